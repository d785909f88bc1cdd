#pragma once
// The network, mixed precision and the sharded evaluation (LibTorch).

#include "config.hpp"

#include <tandem/communicator.hpp>
#include <tandem/data.hpp>

#include <torch/torch.h>

#include <cstdint>

namespace fashion_mnist {

/// conv(1->32, 3x3)-relu-maxpool2-conv(32->64, 3x3)-relu-maxpool2-fc(1600->128)-relu-
/// fc(128->10), on N x 1 x 28 x 28 images.
struct NetImpl : torch::nn::Module {
  NetImpl();
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

/// Runs the forward passes of its scope under LibTorch's autocast for `device` (CPU or CUDA)
/// in bfloat16 (when `precision` is bf16; otherwise does nothing).
class AutocastScope {
 public:
  AutocastScope(Precision precision, torch::Device device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  bool was_enabled_ = false;
  at::DeviceType type_ = at::kCPU;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

struct Evaluation {
  double loss = 0;      // mean cross-entropy over the test set
  double accuracy = 0;  // percent
  std::uint64_t correct = 0;
  std::uint64_t total = 0;
};

/// Evaluates `net` on `test` sharded across the ranks of `comm`: rank r takes the samples
/// r, r + R, ...; the padding of the sampler is left out and the counts are summed across
/// ranks, so every sample of the test set is counted exactly once (collective).
Evaluation evaluate(Net& net, const tandem::data::ImageDataset& test, tandem::Communicator& comm,
                    std::uint64_t batch_size, Precision precision, torch::Device device);

/// Sum and sum of squares of every parameter (in double): equal digests mean equal weights,
/// to print and compare runs.
std::pair<double, double> parameter_digest(torch::nn::Module& module);

}  // namespace fashion_mnist
