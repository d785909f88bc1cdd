// The training loop: data, DDP, optimizer, lr schedule, gradient accumulation, mixed
// precision, checkpoints and resume, evaluation, progress and metrics.
#include "metrics.hpp"
#include "model.hpp"
#include "progress.hpp"
#include "report.hpp"
#include "trainer.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>
#include <tandem/step_profile.hpp>
#include <tandem/torch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <thread>

namespace fashion_mnist {
namespace {

using tandem::ErrorCode;
using Clock = std::chrono::steady_clock;

tandem::data::ImageDataset load_split(const Config& config, tandem::data::Split split,
                                      std::uint64_t limit) {
  auto ds = tandem::data::load_fashion_mnist(config.data.dir, split);
  if (limit != 0 && limit < ds.size) {
    ds.size = limit;
    ds.images.resize(limit * ds.image_pixels());
    ds.labels.resize(limit);
  }
  return ds;
}

// Sums over this rank's part of an epoch: loss (sum over images), correct answers, images.
using EpochSums = std::array<double, 3>;

// What a checkpoint records besides TrainingState, checked on resume.
nlohmann::json run_record(const Config& config, const Setup& setup, std::uint64_t train_images,
                          const EpochSums& global_sums) {
  return {{"world_size", setup.world_size},
          {"per_rank_batch", setup.per_rank_batch},
          {"accumulation_steps", setup.accumulation_steps},
          {"train_images", train_images},
          {"epoch_sums", global_sums},
          {"config", to_yaml(config)}};
}

// Whether the latest checkpoint can be resumed here: the same data, any world size and batch
// (an elastic run resumes at the world size it has). Returns a sentence when the world size or
// the images per step changed, empty otherwise.
std::string check_resumable(const nlohmann::json& record, const Setup& setup,
                            std::uint64_t train_images, const std::string& dir) {
  const auto then = [&](const char* key) { return record.value(key, std::uint64_t{0}); };
  if (then("train_images") != train_images) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "the latest checkpoint in {} was written for {} training images, this run has "
                 "{}: resume with the same data (or set checkpoint.resume=false, or another "
                 "checkpoint.dir)",
                 dir, then("train_images"), train_images);
  }
  const auto world = static_cast<std::uint64_t>(setup.world_size);
  if (then("world_size") == world && then("per_rank_batch") == setup.per_rank_batch &&
      then("accumulation_steps") == setup.accumulation_steps)
    return {};
  return fmt::format(
      "written at world size {} (global batch {}, {} accumulation step(s)), resumed at world "
      "size {} (global batch {}, {}): the rest of the epoch is re-sharded over the new ranks, "
      "the learning rate follows the new global batch",
      then("world_size"), then("per_rank_batch") * then("world_size"), then("accumulation_steps"),
      world, setup.global_batch, setup.accumulation_steps);
}

std::string describe_buckets(const tandem::ddp::ReducerStats& stats) {
  std::string sizes;
  for (const auto& b : stats.buckets) {
    sizes += fmt::format("{}{:.2f}", sizes.empty() ? "" : " + ",
                         static_cast<double>(b.bytes) / (1 << 20));
  }
  return fmt::format("{} bucket{} ({} MiB)", stats.buckets.size(),
                     stats.buckets.size() == 1 ? "" : "s", sizes);
}

// Restarts of the workers so far: tandemrun's TANDEM_RESTART_COUNT, or torchrun's
// TORCHELASTIC_RESTART_COUNT.
std::int64_t restart_count() {
  std::int64_t n = tandem::settings::get_int("TANDEM_RESTART_COUNT");
  if (const char* t = std::getenv("TORCHELASTIC_RESTART_COUNT"); n == 0 && t != nullptr) {
    if (std::from_chars(t, t + std::strlen(t), n).ec != std::errc()) n = 0;
  }
  return n;
}

// Steps between the breakdowns printed during the run: the configured period, else 500 where
// TANDEM_DEBUG is INFO or more on any rank (agreed by every rank: the report is collective).
std::uint64_t breakdown_period(const Config& config, tandem::Communicator& comm) {
  std::int64_t every = static_cast<std::int64_t>(config.log.breakdown_every_steps);
  if (every == 0 && tandem::log::enabled(tandem::log::Level::info, tandem::log::Subsys::ddp))
    every = 500;
  comm.allreduce(tandem::BufferView::of(std::span<std::int64_t>(&every, 1)), tandem::ReduceOp::max);
  return static_cast<std::uint64_t>(every);
}

// The device this rank trains on: the CPU, or GPU LOCAL_RANK % (GPUs on this host) for cuda.
torch::Device pick_device(const Config& config, int rank) {
  if (config.training.device == DeviceKind::cpu) return torch::kCPU;
  const auto gpus = torch::cuda::device_count();
  if (!torch::cuda::is_available() || gpus == 0) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "training.device is cuda (set at {}) but LibTorch sees no GPU (a CPU build of "
                 "torch, no GPU or no driver): run where a GPU and its driver are, with a CUDA "
                 "build of torch, or use training.device=cpu",
                 config.where("training.device"));
  }
  std::int64_t local = rank;  // LOCAL_RANK is set by tandemrun and torchrun
  if (const char* v = std::getenv("LOCAL_RANK"); v != nullptr)
    if (std::from_chars(v, v + std::strlen(v), local).ec != std::errc()) local = rank;
  return {torch::kCUDA, static_cast<c10::DeviceIndex>(local % static_cast<std::int64_t>(gpus))};
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) {
    static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
}

}  // namespace

void train(const Config& config, const Setup& initial_setup,
           const std::shared_ptr<tandem::Communicator>& initial_comm) {
  const auto& t = config.training;
  // Both change when a rank is lost under training.on_rank_loss=continue (go_on_without).
  std::shared_ptr<tandem::Communicator> comm = initial_comm;
  Setup setup = initial_setup;
  bool lead = comm->rank() == 0;
  torch::set_num_threads(1);  // ranks are processes: one core each
  torch::manual_seed(t.seed);

  const auto train_set = load_split(config, tandem::data::Split::train, config.data.limit_train);
  const auto test_set = load_split(config, tandem::data::Split::test, config.data.limit_test);
  const tandem::data::SamplerOptions sampling{.shuffle = true, .seed = t.seed, .drop_last = false};
  tandem::data::DistributedSampler sampler(train_set.size, setup.world_size, comm->rank(),
                                           sampling);
  std::uint64_t step_images = setup.per_rank_batch * setup.accumulation_steps;
  std::uint64_t steps_per_epoch = sampler.num_samples() / step_images;
  if (steps_per_epoch == 0) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "each rank gets {} training images per epoch, fewer than one optimizer step "
                 "takes ({} per rank x {} accumulation steps): raise data.limit_train or lower "
                 "the batch",
                 sampler.num_samples(), setup.per_rank_batch, setup.accumulation_steps);
  }
  std::uint64_t total_steps = t.epochs * steps_per_epoch;
  std::uint64_t last_step = t.max_steps != 0 ? std::min(t.max_steps, total_steps) : total_steps;
  LrSchedule schedule{setup.lr, t.warmup_steps, total_steps, t.lr_decay};
  const auto kill_at =
      planned_kill(config, comm->rank(), setup.world_size, last_step, restart_count());

  const torch::Device device = pick_device(config, comm->rank());
  Net net;
  net->to(device);
  torch::optim::SGD optimizer(
      net->parameters(),
      torch::optim::SGDOptions(schedule.at(0)).momentum(t.momentum).weight_decay(t.weight_decay));
  auto scaler = std::make_unique<tandem::torch::GradScaler>(
      comm, tandem::torch::GradScalerOptions{.enabled = t.grad_scaler});

  // Resume before DDP exists: every rank loads the same checkpoint, and DDP's broadcast
  // from rank 0 then changes nothing.
  std::optional<tandem::torch::Checkpointer> checkpointer;
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
  EpochSums sums{0, 0, 0};
  std::optional<std::uint64_t> resumed_at;
  std::string reshaped;  // how the world changed since the checkpoint, if it did

  // After the world changed under training.on_rank_loss=continue (a rank lost, or one that
  // joined): the batch and learning rate for the new world as a resumed elastic run resolves
  // them, and the rest of epoch `at_epoch` re-sharded from the sampler state `where`.
  const auto reshard = [&](const tandem::data::SamplerState& where, std::uint64_t at_epoch) {
    setup = resolve_setup_after_loss(config, comm->size());
    const tandem::data::DistributedSampler whole(train_set.size, setup.world_size, comm->rank(),
                                                 sampling);
    step_images = setup.per_rank_batch * setup.accumulation_steps;
    steps_per_epoch = whole.num_samples() / step_images;
    TANDEM_CHECK_ARG(steps_per_epoch > 0,
                     "with {} ranks, each gets {} training images per epoch, fewer than one "
                     "optimizer step takes",
                     setup.world_size, whole.num_samples());
    sampler = whole;
    sampler.load_state(where);
    sampler.set_epoch(at_epoch);
    total_steps = t.epochs * steps_per_epoch;
    last_step = t.max_steps != 0 ? std::min(t.max_steps, total_steps) : total_steps;
    schedule = LrSchedule{setup.lr, t.warmup_steps, total_steps, t.lr_decay};
    step = at_epoch * steps_per_epoch +
           sampler.consumed() / (step_images * static_cast<std::uint64_t>(setup.world_size));
  };

  if (!config.checkpoint.dir.empty()) {
    checkpointer.emplace(
        comm, config.checkpoint.dir,
        tandem::torch::CheckpointOptions{.keep_last = config.checkpoint.keep_last});
  }
  if (comm->joined()) {
    // A replacement (tandemrun --max-replacements): the model, optimizer and position come
    // from rank 0 over the communicator, as the ranks that admitted it send them (admit).
    const auto got = tandem::torch::share_state(*comm, 0, *net, optimizer, {});
    epoch = got.epoch;
    reshard(got.sampler, epoch);
    if (got.scaler) scaler->load_state(*got.scaler);
  } else if (checkpointer) {
    if (config.checkpoint.resume) {
      if (auto state = checkpointer->load_latest(*net, optimizer)) {
        const auto record = nlohmann::json::parse(state->extra_json);
        reshaped = check_resumable(record, setup, train_set.size, config.checkpoint.dir);
        step = state->step;
        epoch = state->epoch;
        sampler.load_state(state->sampler);
        if (!reshaped.empty()) {
          // Steps count in this run's step size: as many as the images seen so far make.
          sampler.set_epoch(epoch);
          step = epoch * steps_per_epoch +
                 sampler.consumed() / (step_images * static_cast<std::uint64_t>(setup.world_size));
        }
        if (state->scaler) scaler->load_state(*state->scaler);
        // The epoch's sums were saved summed over the ranks: rank 0 carries them on.
        if (lead) sums = record.at("epoch_sums").get<EpochSums>();
        resumed_at = step;
      }
    }
  }

  std::unique_ptr<tandem::torch::DistributedDataParallel> ddp;
  tandem::torch::DdpOptions ddp_options;
  RunFacts facts{.train_images = train_set.size,
                 .test_images = test_set.size,
                 .steps_per_epoch = steps_per_epoch,
                 .total_steps = total_steps,
                 .parameters = 0,
                 .buckets = "off",
                 .transport = setup.world_size > 1
                                  ? std::string(comm->transport_to(1 - std::min(comm->rank(), 1)))
                                  : "-",
                 .device = device.str()};
  for (const auto& p : net->parameters()) facts.parameters += static_cast<std::uint64_t>(p.numel());
  if (config.ddp.enabled) {
    ddp_options.reducer.first_bucket_bytes =
        static_cast<std::size_t>(config.ddp.first_bucket_mb * (1 << 20));
    ddp_options.reducer.bucket_cap_bytes =
        static_cast<std::size_t>(config.ddp.bucket_cap_mb * (1 << 20));
    ddp_options.reducer.gradient_as_bucket_view = config.ddp.gradient_as_bucket_view;
    ddp_options.reducer.find_unused_parameters = config.ddp.find_unused_parameters;
    ddp_options.broadcast_buffers = config.ddp.broadcast_buffers;
    ddp_options.comm_hook = config.ddp.comm_hook;
    ddp = std::make_unique<tandem::torch::DistributedDataParallel>(net, comm, ddp_options);
    facts.buckets = describe_buckets(ddp->stats());
  }

  std::optional<Progress> progress;
  std::optional<MetricsWriter> metrics;
  if (lead) {
    std::fputs(describe_setup(config, setup, facts).c_str(), stdout);
    if (resumed_at) {
      std::printf("resumed from %s at step %llu (epoch %llu)\n", config.checkpoint.dir.c_str(),
                  static_cast<unsigned long long>(step),
                  static_cast<unsigned long long>(epoch + 1));
      if (!reshaped.empty()) std::printf("  %s\n", reshaped.c_str());
    }
    std::fflush(stdout);
    progress.emplace(config.log.progress, config.log.every_steps);
    if (!config.log.metrics.empty()) {
      metrics.emplace(config.log.metrics,
                      resumed_at ? std::optional<std::uint64_t>(epoch) : std::nullopt);
    }
  }

  const auto save = [&](std::uint64_t at_epoch, const tandem::data::SamplerState& sampler_state) {
    if (!checkpointer) return;
    EpochSums global = sums;
    tandem::torch::all_sum(*comm, global);
    tandem::torch::TrainingState state{
        .step = step,
        .epoch = at_epoch,
        .sampler = sampler_state,
        .scaler = scaler->state(),
        .extra_json = run_record(config, setup, train_set.size, global).dump()};
    checkpointer->save(*net, optimizer, state);
  };

  StepTimer timer(20);
  // Where each step's time goes (printed at the end, and every breakdown_every steps).
  std::optional<tandem::ddp::StepProfiler> profiler;
  profiler.emplace(ddp ? &ddp->reducer() : nullptr);
  std::uint64_t breakdown_every = breakdown_period(config, *comm);
  const bool slow_rank = config.fault.slow_rank_ms > 0 &&
                         config.fault.slow_rank == static_cast<std::uint64_t>(comm->rank());
  double ema_step_s = 0;
  double lr = schedule.at(step);
  Evaluation last_eval;  // of the current weights when evaluated is true
  bool evaluated = false;
  std::uint64_t saved_at = resumed_at.value_or(~std::uint64_t{0});
  const auto micro_options = torch::nn::functional::CrossEntropyFuncOptions();

  // What holds the communicator, rebuilt after it changed (the scaler, the checkpointer, DDP,
  // the profiler), and who reports: the world's rank 0. Collective as DDP's construction is.
  const auto rebuild = [&](std::uint64_t at_epoch) {
    const auto scaler_state = scaler->state();
    scaler = std::make_unique<tandem::torch::GradScaler>(
        comm, tandem::torch::GradScalerOptions{.enabled = t.grad_scaler});
    scaler->load_state(scaler_state);
    if (checkpointer) {
      checkpointer.emplace(
          comm, config.checkpoint.dir,
          tandem::torch::CheckpointOptions{.keep_last = config.checkpoint.keep_last});
    }
    profiler.reset();
    if (ddp) {
      ddp.reset();  // its hooks leave the parameters before the new one's arrive
      ddp = std::make_unique<tandem::torch::DistributedDataParallel>(net, comm, ddp_options);
    }
    profiler.emplace(ddp ? &ddp->reducer() : nullptr);
    const bool was_lead = lead;
    lead = comm->rank() == 0;
    if (lead && !was_lead) {  // rank 0 was lost: this rank reports from now on
      progress.emplace(config.log.progress, config.log.every_steps);
      if (!config.log.metrics.empty()) metrics.emplace(config.log.metrics, at_epoch);
    }
  };

  // training.on_rank_loss=continue: after a PeerLost, the survivors make a communicator
  // without the ranks it names and go on at the new world size (reshard, rebuild). False: not
  // this policy, or not a lost rank (the caller rethrows).
  std::uint64_t ranks_lost = 0;
  std::uint64_t ranks_gained = 0;
  const int started_with = comm->size();
  // The first grow() after a loss waits this long for a replacement (in milliseconds).
  std::chrono::milliseconds replacement_wait{0};
  const auto go_on_without = [&](const tandem::Error& e, std::uint64_t at_epoch) {
    if (t.on_rank_loss != OnRankLoss::go_on || e.code() != ErrorCode::PeerLost) return false;
    if (comm->lost_ranks().empty()) return false;
    const auto start = Clock::now();
    const int old_world = comm->size();
    const int old_rank = comm->rank();
    // The survivors agree on the lost ranks (two deaths at once may each be seen by only
    // some of them), then shrink without those.
    std::vector<int> lost;
    comm = comm->shrink_lost(std::nullopt, &lost);
    ranks_lost += lost.size();
    // The survivors may stand at different steps: a collective that the lost rank finished
    // can have failed on some of them. Those behind take the state of the lowest rank at the
    // furthest step (share_state), so that every survivor redoes the same step.
    tandem::data::SamplerState where = sampler.state();
    std::string caught_up;
    std::array<std::int64_t, 2> steps{static_cast<std::int64_t>(step),
                                      -static_cast<std::int64_t>(step)};
    comm->allreduce(tandem::BufferView::of(std::span<std::int64_t>(steps)), tandem::ReduceOp::max);
    if (steps[0] != -steps[1]) {
      std::int64_t root = static_cast<std::int64_t>(step) == steps[0] ? comm->rank() : comm->size();
      comm->allreduce(tandem::BufferView::raw(&root, 1, tandem::DataType::i64),
                      tandem::ReduceOp::min);
      const auto got = tandem::torch::share_state(
          *comm, static_cast<int>(root), *net, optimizer,
          tandem::torch::TrainingState{step, at_epoch, where, scaler->state(), {}});
      TANDEM_CHECK(got.epoch == at_epoch,
                   "after losing ranks [{}], rank {} is in epoch {} and this rank in epoch {}",
                   fmt::join(lost, ","), root, got.epoch, at_epoch);
      where = got.sampler;
      if (got.scaler) scaler->load_state(*got.scaler);
      caught_up = fmt::format(" (they stood at steps {} to {}: all go on from rank {}'s state)",
                              -steps[1], steps[0], root);
    }
    reshard(where, at_epoch);
    rebuild(at_epoch);
    replacement_wait =
        std::chrono::milliseconds(static_cast<std::int64_t>(t.replacement_wait_s * 1000.0));
    if (lead) {
      progress->break_line();
      std::printf(
          "lost rank%s %s of %d: going on with %d ranks (rank %d is now %d) from step %llu, "
          "global batch %llu, lr %.5f (%s)%s; recovered in %.0f ms\n",
          lost.size() == 1 ? "" : "s", fmt::format("{}", fmt::join(lost, ",")).c_str(), old_world,
          comm->size(), old_rank, comm->rank(), static_cast<unsigned long long>(step),
          static_cast<unsigned long long>(setup.step_batch), schedule.at(step),
          setup.lr_rule.c_str(), caught_up.c_str(),
          std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      std::fflush(stdout);
    }
    return true;
  };

  // Under training.on_rank_loss=continue, while fewer ranks train than started: the
  // processes waiting to join (tandemrun --max-replacements) are admitted at a step boundary,
  // take rank 0's state, and every rank goes on at the new world size from the same step.
  // grow_now() is the check (nullptr: nobody joins), admit() the rest.
  const auto grow_now = [&]() -> std::shared_ptr<tandem::Communicator> {
    if (t.on_rank_loss != OnRankLoss::go_on || comm->size() >= started_with) return nullptr;
    const auto wait = std::exchange(replacement_wait, std::chrono::milliseconds(0));
    return comm->grow(started_with - comm->size(), wait);
  };
  const auto admit = [&](std::shared_ptr<tandem::Communicator> grown, std::uint64_t at_epoch) {
    const auto start = Clock::now();
    const int old_world = comm->size();
    comm = grown;
    ranks_gained += static_cast<std::uint64_t>(comm->size() - old_world);
    const auto got = tandem::torch::share_state(
        *comm, 0, *net, optimizer,
        tandem::torch::TrainingState{step, at_epoch, sampler.state(), scaler->state(), {}});
    reshard(got.sampler, at_epoch);
    rebuild(at_epoch);
    breakdown_every = breakdown_period(config, *comm);  // as the newcomers' start does
    if (lead) {
      progress->break_line();
      const int added = comm->size() - old_world;
      const std::string who = added == 1 ? fmt::format("rank {}", old_world)
                                         : fmt::format("ranks {}-{}", old_world, comm->size() - 1);
      std::printf(
          "gained %s (a replacement): going on with %d ranks from step %llu, global batch "
          "%llu, lr %.5f (%s); admitted in %.0f ms\n",
          who.c_str(), comm->size(), static_cast<unsigned long long>(step),
          static_cast<unsigned long long>(setup.step_batch), schedule.at(step),
          setup.lr_rule.c_str(),
          std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      std::fflush(stdout);
    }
  };

  for (; epoch < t.epochs && step < last_step; ++epoch) {
    sampler.set_epoch(epoch);  // keeps a resumed position within the same epoch
    tandem::data::LoaderOptions loading;
    loading.num_workers = config.data.num_workers;
    loading.prefetch_factor = config.data.prefetch_factor;
    std::optional<tandem::torch::ImageLoader> loader;
    loader.emplace(train_set, sampler, setup.per_rank_batch, true, tandem::data::Normalize{},
                   loading);
    // Fewer in an epoch resumed at another world size (the rest of it, re-sharded).
    const std::uint64_t epoch_steps = sampler.num_samples() / step_images;
    bool regrouped = false;  // the world shrank or grew: go on at its new size
    try {
      for (std::uint64_t s = sampler.position() / step_images; s < epoch_steps; ++s) {
        if (step >= last_step) break;
        if (auto grown = grow_now()) {
          loader.reset();  // its threads read the old sampler's order
          admit(std::move(grown), epoch);
          regrouped = true;
          break;
        }
        const auto start = Clock::now();
        profiler->begin_step();
        lr = schedule.at(step);
        set_lr(optimizer, lr);
        optimizer.zero_grad();
        double step_loss = 0;
        for (std::uint64_t micro = 0; micro < setup.accumulation_steps; ++micro) {
          auto batch = [&] {
            auto timed = profiler->time(tandem::ddp::StepPart::data);
            if (config.fault.slow_data_ms > 0)  // fault injection: a slow loader
              std::this_thread::sleep_for(std::chrono::milliseconds(config.fault.slow_data_ms));
            return loader->next();
          }();
          TANDEM_CHECK(batch.has_value(), "the loader ended before step {} of epoch {}", s, epoch);
          auto computing = profiler->time(tandem::ddp::StepPart::compute);
          if (slow_rank)  // fault injection: a slow rank
            std::this_thread::sleep_for(std::chrono::milliseconds(config.fault.slow_rank_ms));
          // Only the last pass of an optimizer step averages gradients across ranks.
          std::optional<tandem::ddp::NoSyncGuard> no_sync;
          if (ddp && micro + 1 < setup.accumulation_steps) no_sync.emplace(ddp->no_sync());
          if (ddp) ddp->pre_forward();
          const auto images = batch->images.to(device, /*non_blocking=*/true);
          const auto labels = batch->labels.to(device, /*non_blocking=*/true);
          torch::Tensor logits;
          {
            AutocastScope autocast(t.precision, device);
            logits = net->forward(images);
          }
          if (ddp) ddp->post_forward({logits});
          logits = logits.to(torch::kFloat);
          const auto loss = torch::nn::functional::cross_entropy(logits, labels, micro_options);
          scaler->scale(loss / static_cast<double>(setup.accumulation_steps)).backward();
          const double n = static_cast<double>(batch->labels.size(0));
          const double l = loss.item<double>();
          step_loss += l / static_cast<double>(setup.accumulation_steps);
          sums[0] += l * n;
          sums[1] += logits.detach().argmax(1).eq(labels).sum().item<double>();
          sums[2] += n;
        }
        scaler->step(optimizer);
        scaler->update();
        sampler.advance(step_images);
        ++step;
        profiler->end_step();
        if (breakdown_every != 0 && step % breakdown_every == 0) {
          const auto report = profiler->report(*comm);  // collective
          if (lead) {
            progress->break_line();
            std::printf("step %llu: %s\n", static_cast<unsigned long long>(step),
                        report.text().c_str());
            std::fflush(stdout);
          }
        }
        if (kill_at == step) {
          std::fprintf(stderr,
                       "fashion_mnist: rank %d: fault.kill_at_step: killing this rank with SIGKILL "
                       "after step %llu\n",
                       comm->rank(), static_cast<unsigned long long>(step));
          std::fflush(stderr);
          std::raise(SIGKILL);
        }
        evaluated = false;
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        timer.add(seconds);
        ema_step_s = ema_step_s == 0 ? seconds : 0.9 * ema_step_s + 0.1 * seconds;
        if (progress) {
          progress->update({.epoch = epoch + 1,
                            .epochs = t.epochs,
                            .step_in_epoch = steps_per_epoch - epoch_steps + s + 1,
                            .steps_in_epoch = steps_per_epoch,
                            .step = step,
                            .total_steps = last_step,
                            .loss = step_loss,
                            .lr = lr,
                            .images_per_s = static_cast<double>(setup.step_batch) / ema_step_s,
                            .eta_s = static_cast<double>(last_step - step) * ema_step_s});
        }
        if (config.checkpoint.every_steps != 0 && step % config.checkpoint.every_steps == 0) {
          save(epoch, sampler.state());
          saved_at = step;
        }
      }
    } catch (const tandem::Error& e) {
      loader.reset();  // its threads read the old sampler's order
      if (!go_on_without(e, epoch)) throw;
      regrouped = true;
    }
    if (regrouped) {  // the rest of this epoch, re-sharded, from the step that failed or grew
      --epoch;
      continue;
    }
    if (sampler.position() / step_images < epoch_steps) break;  // stopped at max_steps

    // End of an epoch: the training sums of every rank, then the test set.
    EpochSums global = sums;
    tandem::torch::all_sum(*comm, global);
    sums = {0, 0, 0};
    last_eval = evaluate(net, test_set, *comm, t.eval_batch_size, t.precision, device);
    evaluated = true;
    const double ms = tandem::torch::all_average(*comm, timer.mean_ms());
    if (lead) {
      progress->break_line();
      const MetricsRow row{
          .kind = "epoch",
          .epoch = epoch + 1,
          .step = step,
          .train_loss = global[2] > 0 ? global[0] / global[2] : 0,
          .train_accuracy = global[2] > 0 ? 100.0 * global[1] / global[2] : 0,
          .test_loss = last_eval.loss,
          .test_accuracy = last_eval.accuracy,
          .ms_per_step = ms,
          .images_per_s = ms > 0 ? 1e3 * static_cast<double>(setup.step_batch) / ms : 0,
          .lr = lr};
      std::printf(
          "epoch %llu/%llu: train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%% (%llu/%llu) "
          "| %.2f ms/step %.0f img/s | lr %.5f\n",
          static_cast<unsigned long long>(row.epoch), static_cast<unsigned long long>(t.epochs),
          row.train_loss, row.train_accuracy, row.test_loss, row.test_accuracy,
          static_cast<unsigned long long>(last_eval.correct),
          static_cast<unsigned long long>(last_eval.total), row.ms_per_step, row.images_per_s,
          row.lr);
      std::fflush(stdout);
      if (metrics) metrics->write(row);
    }
    if (config.checkpoint.every_steps == 0) {
      save(epoch + 1, {.epoch = epoch + 1,
                       .position = 0,
                       .seed = t.seed,
                       .replicas = static_cast<std::uint64_t>(setup.world_size)});
      saved_at = step;
    }
  }

  // The end: a checkpoint of the last step, the final evaluation, the result line.
  if (checkpointer && saved_at != step) save(epoch, sampler.state());
  if (!evaluated)
    last_eval = evaluate(net, test_set, *comm, t.eval_batch_size, t.precision, device);
  const double ms = tandem::torch::all_average(*comm, timer.mean_ms());
  const auto [param_sum, param_sq] = parameter_digest(*net);
  const auto breakdown = profiler->report(*comm);  // collective
  // A replacement still waiting to join would wait in vain: tell it the job is ending.
  if (lead && t.on_rank_loss == OnRankLoss::go_on) comm->stop_admitting();
  if (!lead) return;
  progress->break_line();
  std::printf("%s\n", breakdown.text().c_str());
  const RunResult result{
      .world_size = setup.world_size,
      .epochs = (step + steps_per_epoch - 1) / steps_per_epoch,
      .steps = step,
      .global_batch = setup.step_batch,
      .test_accuracy = last_eval.accuracy,
      .ms_per_step = ms,
      .images_per_s = ms > 0 ? 1e3 * static_cast<double>(setup.step_batch) / ms : 0,
      .ranks_lost = ranks_lost,
      .ranks_gained = ranks_gained};
  if (metrics) {
    metrics->write({.kind = "final",
                    .epoch = result.epochs,
                    .step = step,
                    .test_loss = last_eval.loss,
                    .test_accuracy = last_eval.accuracy,
                    .ms_per_step = ms,
                    .images_per_s = result.images_per_s,
                    .lr = lr});
  }
  std::printf(
      "final: test accuracy %.2f%% (%llu/%llu), test loss %.6f, parameters sum %.9g "
      "sumsq %.9g\n",
      last_eval.accuracy, static_cast<unsigned long long>(last_eval.correct),
      static_cast<unsigned long long>(last_eval.total), last_eval.loss, param_sum, param_sq);
  std::printf("%s\n", format_result_line(result).c_str());
  std::fflush(stdout);
}

}  // namespace fashion_mnist
