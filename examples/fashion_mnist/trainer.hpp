#pragma once
// The training run (LibTorch lives behind this header, in train.cpp and model.cpp).

#include "config.hpp"
#include "setup.hpp"

#include <tandem/communicator.hpp>

#include <memory>

namespace fashion_mnist {

/// Trains and evaluates as `config` says on every rank of `comm`; rank 0 prints the setup,
/// the progress, each epoch's evaluation and, last, the result line. Throws tandem::Error.
void train(const Config& config, const Setup& setup,
           const std::shared_ptr<tandem::Communicator>& comm);

}  // namespace fashion_mnist
