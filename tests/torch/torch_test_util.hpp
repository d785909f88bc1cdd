#pragma once
// Helpers of the tandem_torch tests: small networks, deterministic data, parameter snapshots
// and comparisons. Everything here touches LibTorch, so it runs inside forked ranks only (the
// gtest parent must not start LibTorch's thread pools before run_ranks forks).

#include "support/multiproc.hpp"
#include "support/rank_checks.hpp"
#include "support/temp_dir.hpp"

#include <tandem/communicator.hpp>
#include <tandem/log.hpp>
#include <tandem/torch.hpp>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tandem::torchtest {

/// Run options: a short TANDEM_TIMEOUT so that a bug fails instead of hanging.
inline testing::RunOptions run_options(std::vector<std::string> extra = {}) {
  testing::RunOptions o;
  o.timeout = std::chrono::seconds(240);
  o.env = {"TANDEM_TIMEOUT=60"};
  for (auto& e : extra) o.env.push_back(std::move(e));
  return o;
}

/// First thing in every rank: one intra-op thread, and the world communicator.
inline std::shared_ptr<Communicator> start_rank(const testing::RankContext& ctx) {
  ::torch::set_num_threads(1);
  log::reload_from_env();
  return Communicator::create(ctx.store(), ctx.rank, ctx.size);
}

enum class Net { mlp, conv };

inline const char* to_string(Net n) {
  return n == Net::mlp ? "mlp" : "conv";
}

/// The network's input shape for a batch of n samples.
inline std::vector<std::int64_t> input_shape(Net net, std::int64_t n) {
  if (net == Net::mlp) return {n, 20};
  return {n, 1, 12, 12};
}
inline constexpr std::int64_t kClasses = 5;

/// A fresh network initialised from `seed`.
inline ::torch::nn::Sequential make_net(Net net, std::uint64_t seed) {
  ::torch::manual_seed(seed);
  namespace nn = ::torch::nn;
  if (net == Net::mlp)
    return nn::Sequential(nn::Linear(20, 32), nn::ReLU(), nn::Linear(32, 16), nn::ReLU(),
                          nn::Linear(16, kClasses));
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 4, 3)), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(nn::Conv2dOptions(4, 8, 3)), nn::ReLU(), nn::Flatten(),
                        nn::Linear(8 * 3 * 3, kClasses));
}

/// A deterministic labelled data set of n samples for `net`.
struct Data {
  ::torch::Tensor x;
  ::torch::Tensor y;
  /// Samples [begin, begin + n).
  Data slice(std::int64_t begin, std::int64_t n) const {
    return {x.narrow(0, begin, n), y.narrow(0, begin, n)};
  }
};
inline Data make_data(Net net, std::int64_t n, std::uint64_t seed = 1234) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto x = ::torch::randn(input_shape(net, n), gen);
  auto y = ::torch::randint(0, kClasses, {n}, gen, ::torch::TensorOptions().dtype(::torch::kLong));
  return {x, y};
}

inline ::torch::Tensor loss_of(::torch::nn::Sequential& net, const Data& d) {
  return ::torch::nn::functional::cross_entropy(net->forward(d.x), d.y);
}

inline ::torch::optim::SGD make_sgd(::torch::nn::Module& m, double lr = 0.05) {
  return ::torch::optim::SGD(m.parameters(), ::torch::optim::SGDOptions(lr).momentum(0.9));
}

/// Copies of every parameter, on the CPU.
inline std::vector<::torch::Tensor> snapshot(::torch::nn::Module& m) {
  std::vector<::torch::Tensor> out;
  for (const auto& p : m.parameters())
    out.push_back(p.detach().to(::torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
  return out;
}

/// Whether this host has an NVIDIA driver, asked without initialising CUDA (a test's parent
/// must not: its forked ranks could not use CUDA afterwards).
inline bool gpu_driver_present() {
  return std::filesystem::exists("/dev/nvidiactl");
}

/// Largest |a - b| / (atol + rtol * |b|) over every element; <= 1 means close.
inline double closeness(const std::vector<::torch::Tensor>& a,
                        const std::vector<::torch::Tensor>& b, double rtol, double atol) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const auto r = (a[i].to(::torch::kDouble) - b[i].to(::torch::kDouble)).abs() /
                   (atol + rtol * b[i].to(::torch::kDouble).abs());
    worst = std::max(worst, r.max().item<double>());
  }
  return worst;
}

/// Largest absolute difference.
inline double max_diff(const std::vector<::torch::Tensor>& a,
                       const std::vector<::torch::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(
        worst, (a[i].to(::torch::kDouble) - b[i].to(::torch::kDouble)).abs().max().item<double>());
  return worst;
}

/// FNV-1a over the bytes of tensors.
inline std::uint64_t hash_tensors(const std::vector<::torch::Tensor>& ts) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& t0 : ts) {
    const auto t = t0.contiguous();
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    for (std::size_t i = 0; i < static_cast<std::size_t>(t.nbytes()); ++i)
      h = (h ^ p[i]) * 0x100000001b3ull;
  }
  return h;
}

using tandem::testing::same_on_every_rank;
using tandem::testing::TempDir;

}  // namespace tandem::torchtest
