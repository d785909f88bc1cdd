// The pieces around DDP: a peer killed during backward, the GradScaler's agreed found-inf and
// scale schedule, the image loader, metrics across ranks.

#include "torch/torch_test_util.hpp"

#include <tandem/data.hpp>
#include <tandem/error.hpp>

#include <chrono>
#include <csignal>
#include <string>

namespace tandem::torchtest {
namespace {

using torch::DdpOptions;
using torch::DistributedDataParallel;
namespace F = ::torch::nn::functional;

// ---- failure ----------------------------------------------------------------------------------

TEST(DdpFault, PeerKilledDuringBackwardFailsBackwardWithTandemsMessage) {
  const auto exits = testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const Data data = make_data(Net::mlp, 32);
        auto net = make_net(Net::mlp, 5);
        DdpOptions o;
        o.reducer.first_bucket_bytes = 256;  // several buckets: some start before the kill
        o.reducer.bucket_cap_bytes = 1024;
        DistributedDataParallel ddp(net, comm, o);
        auto opt = make_sgd(*net);
        auto step = [&](bool die_in_backward) {
          opt.zero_grad();
          const Data d = data.slice(ctx.rank * 8, 8);
          auto out = ddp.forward([&] { return net->forward(d.x); });
          if (die_in_backward) {
            // Dies once the last layer's gradients exist, in the middle of backward.
            out.register_hook([](::torch::Tensor g) {
              std::raise(SIGKILL);
              return g;
            });
          }
          F::cross_entropy(out, d.y).backward();
          opt.step();
        };
        step(false);
        if (ctx.rank == 1) step(true);

        const auto start = std::chrono::steady_clock::now();
        for (int attempt = 0; attempt < 2; ++attempt) {
          bool failed = false;
          try {
            step(false);
          } catch (const Error& e) {
            failed = true;
            EXPECT_TRUE(e.code() == ErrorCode::PeerLost || e.code() == ErrorCode::Aborted)
                << e.what();
            EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
            std::printf("attempt %d: backward threw tandem::Error: %s\n", attempt, e.what());
          } catch (const std::exception& e) {
            failed = true;
            ADD_FAILURE() << "not a tandem::Error: " << e.what();
          }
          EXPECT_TRUE(failed) << "attempt " << attempt << " succeeded although rank 1 died";
        }
        // Never-hang bound, far above detection time and far below TANDEM_TIMEOUT.
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
      },
      run_options());
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[0].ok()) << testing::describe(exits[0]);
  EXPECT_EQ(exits[1].signal, SIGKILL) << testing::describe(exits[1]);
}

TEST(DdpFault, AnExceptionInTheMiddleOfBackwardLeavesDdpUsable) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const Data data = make_data(Net::mlp, 32);
        auto net = make_net(Net::mlp, 6);
        DdpOptions o;
        o.reducer.first_bucket_bytes = 256;  // the last layer's bucket starts before the throw
        o.reducer.bucket_cap_bytes = 1024;
        DistributedDataParallel ddp(net, comm, o);
        auto opt = make_sgd(*net);
        const Data d = data.slice(ctx.rank * 8, 8);
        opt.zero_grad();
        auto out = ddp.forward([&] { return net->forward(d.x); });
        // A user's hook on the first layer's weight throws once the later layers are done.
        auto first = net[0]->as<::torch::nn::Linear>()->weight;
        const unsigned handle = first.register_hook([](::torch::Tensor) -> ::torch::Tensor {
          throw std::runtime_error("user hook failed");
        });
        EXPECT_THROW(F::cross_entropy(out, d.y).backward(), std::runtime_error);
        first.remove_hook(handle);
        // The next step starts clean and averages as usual.
        opt.zero_grad();
        out = ddp.forward([&] { return net->forward(d.x); });
        F::cross_entropy(out, d.y).backward();
        opt.step();
        EXPECT_EQ(ddp.stats().sync_passes, 1u);
        EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))));
      },
      run_options()));
}

// ---- GradScaler -------------------------------------------------------------------------------

TEST(GradScaler, InfOnOneRankSkipsTheStepEverywhereAndTheScaleFollowsTheSchedule) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const std::int64_t b = 8, steps = 6;
        const Data data = make_data(Net::mlp, steps * 2 * b);
        auto net = make_net(Net::mlp, 21);
        DistributedDataParallel ddp(net, comm);
        auto opt = make_sgd(*net);
        torch::GradScalerOptions so;
        so.init_scale = 1024;
        so.growth_interval = 3;
        torch::GradScaler scaler(comm, so);
        // Reference: the same training without scaling, skipping the same step (the scale is
        // a power of two, so scaling and unscaling are exact).
        auto ref = make_net(Net::mlp, 21);
        auto ref_opt = make_sgd(*ref);
        const std::int64_t poisoned = 1;
        const std::vector<double> scales = {1024, 512, 512, 512, 1024, 1024};
        for (std::int64_t k = 0; k < steps; ++k) {
          opt.zero_grad();
          const Data d = data.slice((k * 2 + ctx.rank) * b, b);
          auto out = ddp.forward([&] { return net->forward(d.x); });
          scaler.scale(F::cross_entropy(out, d.y)).backward();
          if (k == poisoned && ctx.rank == 1) {
            ::torch::NoGradGuard no_grad;
            net->parameters()[0].mutable_grad()[0][0] = INFINITY;
          }
          const auto before = snapshot(*net);
          const bool stepped = scaler.step(opt);
          scaler.update();
          EXPECT_EQ(stepped, k != poisoned) << "step " << k;
          if (!stepped) {
            EXPECT_EQ(max_diff(snapshot(*net), before), 0.0);
          }
          EXPECT_EQ(scaler.get_scale(), scales[static_cast<std::size_t>(k)]) << "step " << k;

          ref_opt.zero_grad();
          auto l0 = F::cross_entropy(ref->forward(data.slice(k * 2 * b, 2 * b).x),
                                     data.slice(k * 2 * b, 2 * b).y);
          l0.backward();
          if (k != poisoned) ref_opt.step();
        }
        EXPECT_EQ(scaler.skipped_steps(), 1);
        EXPECT_EQ(scaler.state().growth_tracker, 1);
        EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))));
        EXPECT_LE(closeness(snapshot(*net), snapshot(*ref), 1e-5, 1e-6), 1.0)
            << max_diff(snapshot(*net), snapshot(*ref));

        // Misuse is named; a disabled scaler passes through.
        EXPECT_THROW(scaler.update(), Error);
        torch::GradScalerOptions off;
        off.enabled = false;
        torch::GradScaler disabled(comm, off);
        EXPECT_EQ(disabled.get_scale(), 1.0);
        auto loss = ::torch::ones({1}, ::torch::requires_grad());
        EXPECT_TRUE(disabled.scale(loss).equal(loss));
        torch::GradScalerOptions bad;
        bad.backoff_factor = 1.5;
        EXPECT_THROW(torch::GradScaler(comm, bad), Error);
      },
      run_options()));
}

// ---- ImageLoader and metrics ------------------------------------------------------------------

TEST(ImageLoader, BatchesOfTheRanksShareNormalisedWithLabelsForAnyNumberOfWorkers) {
  testing::expect_all_ok(testing::run_ranks(
      1,
      [&](const testing::RankContext&) {
        ::torch::set_num_threads(1);
        data::ImageDataset ds;
        ds.size = 10;
        ds.rows = 2;
        ds.cols = 3;
        ds.num_classes = 10;
        for (std::size_t i = 0; i < ds.size * 6; ++i)
          ds.images.push_back(static_cast<std::uint8_t>(i * 7 % 256));
        for (std::size_t i = 0; i < ds.size; ++i)
          ds.labels.push_back(static_cast<std::uint8_t>((i * 3) % 10));
        data::SamplerOptions so;
        so.shuffle = false;
        data::DistributedSampler sampler(ds.size, 2, 1, so);  // indices 1, 3, 5, 7, 9
        const data::Normalize norm{0.5f, 0.25f};
        auto check = [&](const torch::ImageBatch& b, std::vector<std::size_t> idx) {
          ASSERT_EQ(b.images.sizes(),
                    (std::vector<std::int64_t>{static_cast<std::int64_t>(idx.size()), 1, 2, 3}));
          ASSERT_EQ(b.labels.scalar_type(), ::torch::kLong);
          for (std::size_t n = 0; n < idx.size(); ++n) {
            EXPECT_EQ(b.labels[static_cast<std::int64_t>(n)].item<std::int64_t>(),
                      ds.labels[idx[n]]);
            for (std::size_t p = 0; p < 6; ++p) {
              const float want = (ds.images[idx[n] * 6 + p] / 255.0f - 0.5f) / 0.25f;
              EXPECT_NEAR(
                  b.images.view({-1, 6})[static_cast<std::int64_t>(n)][static_cast<std::int64_t>(p)]
                      .item<float>(),
                  want, 1e-6);
            }
          }
        };
        torch::ImageLoader all(ds, sampler, 2, false, norm);
        EXPECT_EQ(all.size(), 3u);
        check(*all.next(), {1, 3});
        check(*all.next(), {5, 7});
        check(*all.next(), {9});
        EXPECT_FALSE(all.next().has_value());

        torch::ImageLoader dropped(ds, sampler, 2, true, norm);
        EXPECT_EQ(dropped.size(), 2u);
        sampler.advance(2);  // resume part-way: the loader starts at the sampler's position
        torch::ImageLoader resumed(ds, sampler, 2, false, norm);
        EXPECT_EQ(resumed.size(), 2u);
        check(*resumed.next(), {5, 7});
        EXPECT_THROW(torch::ImageLoader(ds, sampler, 0), Error);

        // A pool of workers, or none, gives the same batches in the same order (a shuffled
        // epoch of the other rank, batches of 1 so that they finish in any order).
        data::SamplerOptions shuffled;
        shuffled.seed = 7;
        data::DistributedSampler other(ds.size, 2, 0, shuffled);
        std::vector<std::vector<float>> first;
        for (const std::size_t workers : {1u, 0u, 4u}) {
          data::LoaderOptions lo;
          lo.num_workers = workers;
          lo.prefetch_factor = 3;
          torch::ImageLoader pool(ds, other, 1, false, norm, lo);
          std::vector<std::vector<float>> got;
          while (auto b = pool.next()) {
            const auto t = b->images.contiguous();
            got.emplace_back(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
            got.back().push_back(static_cast<float>(b->labels[0].item<std::int64_t>()));
          }
          EXPECT_EQ(got.size(), 5u) << workers << " workers";
          if (first.empty())
            first = got;
          else
            EXPECT_EQ(got, first) << workers << " workers";
        }
      },
      run_options()));
}

TEST(Metrics, SumsAndAveragesAcrossRanks) {
  testing::expect_all_ok(testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        std::vector<double> v = {1.0 + ctx.rank, 10.0 * ctx.rank, 0.5};
        torch::all_sum(*comm, v);
        EXPECT_EQ(v, (std::vector<double>{6.0, 30.0, 1.5}));
        EXPECT_EQ(torch::all_average(*comm, static_cast<double>(ctx.rank)), 1.0);
      },
      run_options()));
}

}  // namespace
}  // namespace tandem::torchtest
