#include "model.hpp"

#include <tandem/torch.hpp>

#include <ATen/autocast_mode.h>
#include <algorithm>
#include <array>

namespace fashion_mnist {

NetImpl::NetImpl() {
  conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
  conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
  fc1 = register_module("fc1", torch::nn::Linear(64 * 5 * 5, 128));
  fc2 = register_module("fc2", torch::nn::Linear(128, 10));
}

torch::Tensor NetImpl::forward(torch::Tensor x) {
  x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);  // 26x26 -> 13x13
  x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);  // 11x11 -> 5x5
  x = torch::relu(fc1->forward(x.flatten(1)));
  return fc2->forward(x);
}

AutocastScope::AutocastScope(Precision precision, torch::Device device) : type_(device.type()) {
  if (precision != Precision::bf16) return;
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_dtype(type_, at::kBFloat16);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // Leaving the outermost scope drops the weights cast for it (they change every step).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, previous_dtype_);
}

Evaluation evaluate(Net& net, const tandem::data::ImageDataset& test, tandem::Communicator& comm,
                    std::uint64_t batch_size, Precision precision, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  const int world = comm.size();
  const int rank = comm.rank();
  tandem::data::DistributedSampler sampler(test.size, world, rank, {.shuffle = false});
  // Rank r's p-th sample is position r + p * world of the order; positions >= size are the
  // padding that evens out the shards.
  const std::uint64_t mine =
      test.size > static_cast<std::size_t>(rank)
          ? (test.size - static_cast<std::size_t>(rank) + static_cast<std::size_t>(world) - 1) /
                static_cast<std::size_t>(world)
          : 0;
  tandem::torch::ImageLoader loader(test, sampler, batch_size);
  std::array<double, 3> sums{0, 0, 0};  // loss, correct, count
  std::uint64_t seen = 0;
  while (auto batch = loader.next()) {
    const auto n = static_cast<std::uint64_t>(batch->labels.size(0));
    const std::int64_t valid = static_cast<std::int64_t>(std::min(n, mine - std::min(mine, seen)));
    seen += n;
    if (valid == 0) continue;
    torch::Tensor logits;
    {
      AutocastScope autocast(precision, device);
      logits = net->forward(batch->images.narrow(0, 0, valid).to(device));
    }
    logits = logits.to(torch::kFloat);
    const auto labels = batch->labels.narrow(0, 0, valid).to(device);
    sums[0] +=
        torch::nn::functional::cross_entropy(
            logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    sums[1] += logits.argmax(1).eq(labels).sum().item<double>();
    sums[2] += static_cast<double>(valid);
  }
  net->train();
  tandem::torch::all_sum(comm, sums);
  Evaluation e;
  e.correct = static_cast<std::uint64_t>(sums[1]);
  e.total = static_cast<std::uint64_t>(sums[2]);
  if (e.total != 0) {
    e.loss = sums[0] / sums[2];
    e.accuracy = 100.0 * sums[1] / sums[2];
  }
  return e;
}

std::pair<double, double> parameter_digest(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  double squares = 0;
  for (const auto& p : module.parameters()) {
    const auto d = p.to(torch::kDouble);
    sum += d.sum().item<double>();
    squares += d.square().sum().item<double>();
  }
  return {sum, squares};
}

}  // namespace fashion_mnist
