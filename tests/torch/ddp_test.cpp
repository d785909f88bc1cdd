// DistributedDataParallel across forked ranks: W ranks x batch b train exactly like one
// process x batch W*b (plain, gradients as bucket views, several buckets, compressed, buckets in
// torch memory, on a GPU where there is one), no_sync accumulation, unused parameters, what
// construction broadcasts and checks.

#include "torch/torch_test_util.hpp"

#include <tandem/error.hpp>

#include <string>

namespace tandem::torchtest {
namespace {

using torch::DdpOptions;
using torch::DistributedDataParallel;
namespace F = ::torch::nn::functional;

// ---- W ranks x b == 1 process x W*b ---------------------------------------------------------

// Where the module and its buckets live: host buckets from the communicator's pool, buckets
// in torch memory (torch::bucket_memory) on the CPU, or a module on a GPU.
enum class Where { pool, torch_memory, cuda };

struct EquivCase {
  const char* name;
  Net net;
  bool as_view;
  bool small_buckets;
  const char* hook;
  double rtol;
  double atol;
  Where where = Where::pool;
};

void PrintTo(const EquivCase& c, std::ostream* os) {
  *os << c.name;
}

std::string case_name(const ::testing::TestParamInfo<EquivCase>& info) {
  return info.param.name;
}

class DdpEquivalence : public ::testing::TestWithParam<EquivCase> {};

TEST_P(DdpEquivalence, MatchesOneProcessWithTheConcatenatedBatch) {
  const EquivCase c = GetParam();
  if (c.where == Where::cuda && !gpu_driver_present())
    GTEST_SKIP() << "no GPU on this host (no /dev/nvidiactl)";
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        ::torch::Device device = ::torch::kCPU;
        if (c.where == Where::cuda) {
          ASSERT_TRUE(::torch::cuda::is_available()) << "a GPU but no CUDA build of LibTorch";
          // Ranks beyond the GPUs share them (CUDA IPC); TF32 off to compare with the CPU.
          device = ::torch::Device(::torch::kCUDA,
                                   static_cast<c10::DeviceIndex>(
                                       ctx.rank % static_cast<int>(::torch::cuda::device_count())));
          at::globalContext().setAllowTF32CuDNN(false);
          at::globalContext().setAllowTF32CuBLAS(false);
        }
        const std::int64_t world = ctx.size, b = 8, steps = 5;
        const Data data = make_data(c.net, steps * world * b);
        auto net = make_net(c.net, 100 + static_cast<std::uint64_t>(ctx.rank));
        const auto initial = snapshot(*net);
        net->to(device);
        DdpOptions o;
        if (c.where == Where::torch_memory) o.reducer.memory = torch::bucket_memory(::torch::kCPU);
        o.reducer.gradient_as_bucket_view = c.as_view;
        if (c.small_buckets) {
          o.reducer.first_bucket_bytes = 256;
          o.reducer.bucket_cap_bytes = 1024;
        }
        o.comm_hook = c.hook;
        DistributedDataParallel ddp(net, comm, o);
        auto opt = make_sgd(*net);
        for (std::int64_t k = 0; k < steps; ++k) {
          opt.zero_grad();
          const Data d = data.slice((k * world + ctx.rank) * b, b);
          auto out = ddp.forward([&] { return net->forward(d.x.to(device)); });
          F::cross_entropy(out, d.y.to(device)).backward();
          opt.step();
        }
        EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))))
            << "replicas differ after training";
        const auto st = ddp.stats();
        EXPECT_EQ(st.sync_passes, static_cast<std::uint64_t>(steps));
        EXPECT_EQ(st.hook, c.hook);
        if (c.small_buckets) {
          EXPECT_GT(st.buckets.size(), 2u);
          bool overlapped = false;
          for (const auto& l : st.launches)
            overlapped = overlapped || l.marks_before < ddp.reducer().num_parameters();
          EXPECT_TRUE(overlapped) << "no bucket started before backward ended";
        }
        if (c.as_view) {
          // Gradients live in the buckets (no copy): each points at its slot.
          const auto params = net->parameters();
          for (std::size_t i = 0; i < params.size(); ++i)
            EXPECT_EQ(params[i].grad().data_ptr(), ddp.reducer().bucket_view(i).data) << i;
        }
        if (ctx.rank != 0) return;

        auto ref = make_net(c.net, 100);
        EXPECT_EQ(max_diff(snapshot(*ref), initial), 0.0) << "reference starts elsewhere";
        auto ref_opt = make_sgd(*ref);
        for (std::int64_t k = 0; k < steps; ++k) {
          ref_opt.zero_grad();
          loss_of(ref, data.slice(k * world * b, world * b)).backward();
          ref_opt.step();
        }
        const auto got = snapshot(*net);
        const auto want = snapshot(*ref);
        EXPECT_GT(max_diff(want, initial), 1e-3) << "training did not move the parameters";
        const double close = closeness(got, want, c.rtol, c.atol);
        EXPECT_LE(close, 1.0) << "max |diff| " << max_diff(got, want);
        std::printf("%s: max |ddp - reference| = %.3g (%.3g of the tolerance), %zu buckets\n",
                    c.name, max_diff(got, want), close, st.buckets.size());
      },
      run_options()));
}

INSTANTIATE_TEST_SUITE_P(
    Torch, DdpEquivalence,
    ::testing::Values(
        EquivCase{"mlp", Net::mlp, false, false, "allreduce", 1e-5, 1e-6},
        EquivCase{"conv", Net::conv, false, false, "allreduce", 1e-5, 1e-6},
        EquivCase{"mlp_view", Net::mlp, true, false, "allreduce", 1e-5, 1e-6},
        EquivCase{"conv_view", Net::conv, true, false, "allreduce", 1e-5, 1e-6},
        EquivCase{"mlp_buckets", Net::mlp, false, true, "allreduce", 1e-5, 1e-6},
        EquivCase{"conv_buckets_view", Net::conv, true, true, "allreduce", 1e-5, 1e-6},
        EquivCase{"mlp_fp16", Net::mlp, false, true, "fp16_compress", 1e-2, 1e-3},
        EquivCase{"conv_bf16", Net::conv, false, false, "bf16_compress", 5e-2, 5e-3},
        EquivCase{"mlp_torch_memory", Net::mlp, false, false, "allreduce", 1e-5, 1e-6,
                  Where::torch_memory},
        EquivCase{"conv_buckets_view_torch_memory", Net::conv, true, true, "allreduce", 1e-5, 1e-6,
                  Where::torch_memory},
        EquivCase{"conv_cuda", Net::conv, false, true, "allreduce", 1e-4, 1e-5, Where::cuda},
        EquivCase{"mlp_view_cuda", Net::mlp, true, false, "allreduce", 1e-4, 1e-5, Where::cuda}),
    case_name);

// ---- no_sync ----------------------------------------------------------------------------------

class DdpNoSync : public ::testing::TestWithParam<bool> {};

TEST_P(DdpNoSync, AccumulatedMicroBatchesEqualOneLargeBatch) {
  const bool as_view = GetParam();
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const std::int64_t world = ctx.size, b = 4, micro = 4, steps = 3;
        const Data data = make_data(Net::mlp, steps * micro * world * b);
        auto net = make_net(Net::mlp, 7 + static_cast<std::uint64_t>(ctx.rank));
        DdpOptions o;
        o.reducer.gradient_as_bucket_view = as_view;
        DistributedDataParallel ddp(net, comm, o);
        auto opt = make_sgd(*net);
        auto pass = [&](std::int64_t s, std::int64_t m) {
          const Data d = data.slice(((s * micro + m) * world + ctx.rank) * b, b);
          auto out = ddp.forward([&] { return net->forward(d.x); });
          (F::cross_entropy(out, d.y) / static_cast<double>(micro)).backward();
        };
        for (std::int64_t s = 0; s < steps; ++s) {
          opt.zero_grad();
          {
            auto guard = ddp.no_sync();
            for (std::int64_t m = 0; m + 1 < micro; ++m) pass(s, m);
          }
          pass(s, micro - 1);
          opt.step();
        }
        const auto st = ddp.stats();
        EXPECT_EQ(st.sync_passes, static_cast<std::uint64_t>(steps));
        EXPECT_EQ(st.local_passes, static_cast<std::uint64_t>(steps * (micro - 1)));
        EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))));
        if (ctx.rank != 0) return;
        auto ref = make_net(Net::mlp, 7);
        auto ref_opt = make_sgd(*ref);
        for (std::int64_t s = 0; s < steps; ++s) {
          ref_opt.zero_grad();
          loss_of(ref, data.slice(s * micro * world * b, micro * world * b)).backward();
          ref_opt.step();
        }
        EXPECT_LE(closeness(snapshot(*net), snapshot(*ref), 1e-5, 1e-6), 1.0)
            << "max |diff| " << max_diff(snapshot(*net), snapshot(*ref));
      },
      run_options()));
}

std::string view_name(const ::testing::TestParamInfo<bool>& p) {
  return p.param ? "view" : "copy";
}
INSTANTIATE_TEST_SUITE_P(Torch, DdpNoSync, ::testing::Values(false, true), view_name);

// ---- unused parameters ------------------------------------------------------------------------

// `extra` takes part only when forward is asked to use it.
struct Heads : ::torch::nn::Module {
  explicit Heads(std::uint64_t seed) {
    ::torch::manual_seed(seed);
    fc1 = register_module("fc1", ::torch::nn::Linear(20, 16));
    extra = register_module("extra", ::torch::nn::Linear(16, kClasses));
    fc2 = register_module("fc2", ::torch::nn::Linear(16, kClasses));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x, bool use_extra) {
    auto h = ::torch::relu(fc1(x));
    auto y = fc2(h);
    return use_extra ? y + extra(h) : y;
  }
  ::torch::nn::Linear fc1{nullptr}, extra{nullptr}, fc2{nullptr};
};

// Which ranks use `extra`: none, or rank 1 only.
class DdpUnused : public ::testing::TestWithParam<bool> {};

TEST_P(DdpUnused, FindUnusedParametersTrainsLikeTheAverageOfTheRanksLosses) {
  const bool used_on_rank1 = GetParam();
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const std::int64_t world = ctx.size, b = 8, steps = 3;
        const Data data = make_data(Net::mlp, steps * world * b);
        auto net = std::make_shared<Heads>(11 + static_cast<std::uint64_t>(ctx.rank));
        DdpOptions o;
        o.reducer.find_unused_parameters = true;
        DistributedDataParallel ddp(net, comm, o);
        const auto extra_before = snapshot(*net->extra);
        auto opt = make_sgd(*net);
        const bool use = used_on_rank1 && ctx.rank == 1;
        for (std::int64_t k = 0; k < steps; ++k) {
          opt.zero_grad();
          const Data d = data.slice((k * world + ctx.rank) * b, b);
          auto out = ddp.forward([&] { return net->forward(d.x, use); });
          F::cross_entropy(out, d.y).backward();
          if (!used_on_rank1) {
            for (const auto& p : net->extra->parameters()) {
              ASSERT_TRUE(p.grad().defined()) << "a globally unused parameter gets a gradient";
              EXPECT_EQ(p.grad().abs().max().item<double>(), 0.0);
            }
          } else if (ctx.rank == 0) {
            // Unused here, used on rank 1: the average reaches this rank too.
            EXPECT_GT(net->extra->weight.grad().abs().max().item<double>(), 0.0);
          }
          opt.step();
        }
        EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))));
        if (!used_on_rank1) {
          EXPECT_EQ(max_diff(snapshot(*net->extra), extra_before), 0.0);
        }
        if (ctx.rank != 0) return;
        // Reference: the mean of both ranks' losses, each with its own graph.
        auto ref = std::make_shared<Heads>(11);
        auto ref_opt = make_sgd(*ref);
        for (std::int64_t k = 0; k < steps; ++k) {
          ref_opt.zero_grad();
          ::torch::Tensor loss;
          for (std::int64_t r = 0; r < world; ++r) {
            const Data d = data.slice((k * world + r) * b, b);
            auto l = F::cross_entropy(ref->forward(d.x, used_on_rank1 && r == 1), d.y);
            loss = r == 0 ? l : loss + l;
          }
          (loss / static_cast<double>(world)).backward();
          ref_opt.step();
        }
        EXPECT_LE(closeness(snapshot(*net), snapshot(*ref), 1e-5, 1e-6), 1.0)
            << "max |diff| " << max_diff(snapshot(*net), snapshot(*ref));
      },
      run_options()));
}

std::string unused_name(const ::testing::TestParamInfo<bool>& p) {
  return p.param ? "usedOnOneRank" : "unused";
}
INSTANTIATE_TEST_SUITE_P(Torch, DdpUnused, ::testing::Values(false, true), unused_name);

TEST(DdpUnusedError, WithoutFindUnusedParametersBackwardSaysWhatToDo) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const Data data = make_data(Net::mlp, 16);
        auto net = std::make_shared<Heads>(3);
        DistributedDataParallel ddp(net, comm);
        const Data d = data.slice(ctx.rank * 8, 8);
        auto out = ddp.forward([&] { return net->forward(d.x, false); });
        bool threw = false;
        try {
          F::cross_entropy(out, d.y).backward();
        } catch (const Error& e) {
          threw = true;
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
          EXPECT_NE(std::string(e.what()).find("find_unused_parameters"), std::string::npos)
              << e.what();
        }
        EXPECT_TRUE(threw) << "backward succeeded although parameters got no gradient";
        // The next pass, with every parameter used, works.
        auto out2 = ddp.forward([&] { return net->forward(d.x, true); });
        F::cross_entropy(out2, d.y).backward();
        EXPECT_EQ(ddp.stats().sync_passes, 1u);
      },
      run_options()));
}

// ---- construction -----------------------------------------------------------------------------

TEST(DdpConstruction, ReplicasStartFromRankZeroAndBuffersFollowIt) {
  for (const bool broadcast_buffers : {true, false}) {
    testing::expect_all_ok(testing::run_ranks(
        2,
        [&](const testing::RankContext& ctx) {
          auto comm = start_rank(ctx);
          ::torch::manual_seed(50 + static_cast<std::uint64_t>(ctx.rank));
          namespace nn = ::torch::nn;
          auto net = nn::Sequential(nn::Linear(20, 8), nn::BatchNorm1d(8), nn::ReLU(),
                                    nn::Linear(8, kClasses));
          const auto mine = snapshot(*net);
          EXPECT_FALSE(same_on_every_rank(*comm, hash_tensors(mine))) << "seeds must differ";
          DdpOptions o;
          o.broadcast_buffers = broadcast_buffers;
          DistributedDataParallel ddp(net, comm, o);
          EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))));
          EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(net->buffers())));
          if (ctx.rank == 0) {
            EXPECT_EQ(max_diff(snapshot(*net), mine), 0.0);
          }

          // Rank-dependent batches move the BatchNorm statistics apart...
          const Data d = make_data(Net::mlp, 16, 99 + static_cast<std::uint64_t>(ctx.rank));
          net->forward(d.x);
          EXPECT_FALSE(same_on_every_rank(*comm, hash_tensors(net->buffers())));
          std::vector<::torch::Tensor> rank0_buffers;
          for (const auto& t : net->buffers()) rank0_buffers.push_back(t.clone());
          comm->barrier();
          // ...and the next forward starts from rank 0's, unless told not to.
          ddp.pre_forward();
          EXPECT_EQ(same_on_every_rank(*comm, hash_tensors(net->buffers())), broadcast_buffers);
          if (ctx.rank == 0) {
            EXPECT_EQ(max_diff(net->buffers(), rank0_buffers), 0.0);
          }
        },
        run_options()));
  }
}

TEST(DdpConstruction, ParametersReplacedAfterConstructionStillSynchronise) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        auto net = make_net(Net::mlp, 4);
        DistributedDataParallel ddp(net, comm);
        {
          // As Module::load does: autograd gives such parameters new gradient accumulators.
          ::torch::NoGradGuard no_grad;
          for (auto& p : net->parameters()) p.set_(p.detach().clone());
        }
        auto opt = make_sgd(*net);
        const Data d = make_data(Net::mlp, 8, 60 + static_cast<std::uint64_t>(ctx.rank));
        opt.zero_grad();
        F::cross_entropy(ddp.forward([&] { return net->forward(d.x); }), d.y).backward();
        opt.step();
        EXPECT_EQ(ddp.stats().sync_passes, 1u);
        EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))));
      },
      run_options()));
}

TEST(DdpConstruction, DifferentModulesOnTheRanksAreAMismatch) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        namespace nn = ::torch::nn;
        auto net = nn::Sequential(nn::Linear(20, ctx.rank == 0 ? 8 : 9));
        try {
          DistributedDataParallel ddp(net, comm);
          ADD_FAILURE() << "different modules were accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Mismatch) << e.what();
          EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
        }
      },
      run_options()));
}

TEST(DdpConstruction, UnsupportedParametersAndHooksAreClearErrors) {
  testing::expect_all_ok(testing::run_ranks(
      1,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        auto expect_invalid = [&](std::shared_ptr<::torch::nn::Module> m, DdpOptions o,
                                  std::vector<std::string> words) {
          try {
            DistributedDataParallel ddp(std::move(m), comm, std::move(o));
            ADD_FAILURE() << "accepted; expected an error mentioning " << words[0];
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
            for (const auto& w : words)
              EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
          }
        };
        auto plain = [] {
          return std::static_pointer_cast<::torch::nn::Module>(::torch::nn::Linear(4, 3).ptr());
        };
        DdpOptions bad_hook;
        bad_hook.comm_hook = "int8_compress";
        expect_invalid(plain(), bad_hook,
                       {"int8_compress", "allreduce", "fp16_compress", "bf16_compress"});

        auto strided = std::make_shared<::torch::nn::Module>();
        strided->register_parameter("w", ::torch::randn({4, 3}).t());
        expect_invalid(strided, {}, {"'w'", "not contiguous"});

        auto integer = std::make_shared<::torch::nn::Module>();
        integer->register_parameter("steps", ::torch::zeros({3}, ::torch::kLong), false);
        expect_invalid(integer, {}, {"'steps'", "dtype"});

        // A supported module works on one rank, and backward averages over one rank.
        auto net = make_net(Net::mlp, 1);
        const Data d = make_data(Net::mlp, 4);
        std::vector<::torch::Tensor> grads;
        {
          DdpOptions view;
          view.reducer.gradient_as_bucket_view = true;
          DistributedDataParallel ddp(net, comm, view);
          F::cross_entropy(ddp.forward([&] { return net->forward(d.x); }), d.y).backward();
          EXPECT_EQ(ddp.stats().sync_passes, 1u);
          for (const auto& p : net->parameters()) grads.push_back(p.grad().clone());
        }
        // The gradients outlive the buckets they lived in.
        std::vector<::torch::Tensor> after;
        for (const auto& p : net->parameters()) after.push_back(p.grad());
        EXPECT_EQ(max_diff(after, grads), 0.0);
        EXPECT_GT(max_diff(after, std::vector<::torch::Tensor>(grads.size(), ::torch::zeros({1}))),
                  0.0);
      },
      run_options()));
}

}  // namespace
}  // namespace tandem::torchtest
