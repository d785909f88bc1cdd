// Checkpointer: round trip of everything a resumed run needs, rotation, damaged files, a
// writer killed at every step of a save, a run killed after a save and resumed, a full disk
// during a save. share_state: the same state sent from one rank to the others, no file.

#include "torch/checkpoint_file.hpp"
#include "torch/torch_test_util.hpp"

#include <tandem/data.hpp>
#include <tandem/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <poll.h>
#include <sched.h>
#include <string>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <type_traits>
#include <unistd.h>

namespace tandem::torchtest {
namespace {

namespace fs = std::filesystem;
using torch::Checkpointer;
using torch::DistributedDataParallel;
using torch::share_state;
using torch::TrainingState;
namespace F = ::torch::nn::functional;

// The optimizer's state key of parameter `p`: its TensorImpl's address (torch 2.13 on), or
// that address printed (before).
template <typename Optimizer>
auto state_key(const Optimizer& opt, const ::torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(opt.state())>::key_type;
  if constexpr (std::is_same_v<Key, void*>) {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  } else {
    return Key(c10::str(p.unsafeGetTensorImpl()));
  }
}

std::vector<::torch::Tensor> momenta(::torch::optim::SGD& opt) {
  std::vector<::torch::Tensor> out;
  for (const auto& p : opt.param_groups()[0].params()) {
    const auto it = opt.state().find(state_key(opt, p));
    if (it == opt.state().end()) {
      out.emplace_back();
      continue;
    }
    out.push_back(
        static_cast<::torch::optim::SGDParamState&>(*it->second).momentum_buffer().clone());
  }
  return out;
}

void train_step(DistributedDataParallel& ddp, ::torch::nn::Sequential& net,
                ::torch::optim::SGD& opt, const Data& d) {
  opt.zero_grad();
  F::cross_entropy(ddp.forward([&] { return net->forward(d.x); }), d.y).backward();
  opt.step();
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// Runs `fn` with stderr going to a file; returns what was written there.
template <class Fn>
std::string capture_stderr(const fs::path& file, Fn&& fn) {
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ::dup2(fd, 2);
  ::close(fd);
  try {
    fn();
  } catch (...) {
    ::dup2(saved, 2);
    ::close(saved);
    throw;
  }
  ::dup2(saved, 2);
  ::close(saved);
  return read_file(file);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Checkpoint, RoundTripRestoresParametersMomentumRngAndTrainingState) {
  TempDir dir;
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const Data data = make_data(Net::mlp, 64);
        auto net = make_net(Net::mlp, 31);
        DistributedDataParallel ddp(net, comm);
        auto opt = make_sgd(*net);
        for (int k = 0; k < 2; ++k)
          train_step(ddp, net, opt, data.slice((2 * k + ctx.rank) * 8, 8));
        ::torch::manual_seed(1000 + static_cast<std::uint64_t>(ctx.rank));
        ::torch::rand({3});

        TrainingState st;
        st.step = 2;
        st.epoch = 1;
        st.sampler = {1, 16, 42, 3, 7};
        st.scaler = torch::GradScalerState{512.0, 3};
        st.extra_json = R"({"lr": 0.05, "name": "x\"y"})";
        Checkpointer ck(comm, dir.path() / "ckpt");
        const fs::path written = ck.save(*net, opt, st);
        EXPECT_EQ(written, dir.path() / "ckpt" / "ckpt-2.tdm");
        EXPECT_TRUE(fs::exists(written)) << "save() returned before the file existed";
        EXPECT_EQ(read_file(dir.path() / "ckpt" / "latest"), "ckpt-2.tdm\n");
        const auto params = snapshot(*net);
        const auto moms = momenta(opt);
        ASSERT_TRUE(moms[0].defined());
        EXPECT_GT(moms[0].abs().max().item<double>(), 0.0);
        const auto draws = ::torch::rand({4});  // what the restored generator must draw

        // Move everything on, then load into this model and into a fresh one.
        train_step(ddp, net, opt, data.slice((4 + ctx.rank) * 8, 8));
        ::torch::manual_seed(5);
        EXPECT_GT(max_diff(snapshot(*net), params), 0.0);
        const auto got = ck.load_latest(*net, opt);
        ASSERT_TRUE(got.has_value());
        EXPECT_EQ(got->step, 2u);
        EXPECT_EQ(got->epoch, 1u);
        EXPECT_EQ(got->sampler.epoch, 1u);
        EXPECT_EQ(got->sampler.position, 16u);
        EXPECT_EQ(got->sampler.seed, 42u);
        EXPECT_EQ(got->sampler.replicas, 3u);
        EXPECT_EQ(got->sampler.offset, 7u);
        ASSERT_TRUE(got->scaler.has_value());
        EXPECT_EQ(got->scaler->scale, 512.0);
        EXPECT_EQ(got->scaler->growth_tracker, 3);
        EXPECT_EQ(got->extra_json, st.extra_json);
        EXPECT_EQ(max_diff(snapshot(*net), params), 0.0);
        EXPECT_EQ(max_diff(momenta(opt), moms), 0.0);
        EXPECT_TRUE(::torch::rand({4}).equal(draws)) << "RNG state of rank " << ctx.rank;

        auto fresh = make_net(Net::mlp, 77);
        auto fresh_opt = make_sgd(*fresh);
        ASSERT_TRUE(ck.load_latest(*fresh, fresh_opt).has_value());
        EXPECT_EQ(max_diff(snapshot(*fresh), params), 0.0);
        EXPECT_EQ(max_diff(momenta(fresh_opt), moms), 0.0);

        Checkpointer empty(comm, dir.path() / "nothing-here");
        EXPECT_FALSE(empty.load_latest(*fresh, fresh_opt).has_value());
      },
      run_options()));
}

TEST(Checkpoint, RotationAndDamagedFiles) {
  TempDir dir;
  testing::expect_all_ok(testing::run_ranks(
      1,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const Data data = make_data(Net::mlp, 64);
        auto net = make_net(Net::mlp, 3);
        DistributedDataParallel ddp(net, comm);
        auto opt = make_sgd(*net);
        const fs::path d = dir.path() / "run";
        torch::CheckpointOptions co;
        co.keep_last = 2;
        Checkpointer ck(comm, d, co);
        std::vector<std::vector<::torch::Tensor>> saved;
        for (std::uint64_t step = 1; step <= 3; ++step) {
          train_step(ddp, net, opt, data.slice(static_cast<std::int64_t>(step) * 8, 8));
          TrainingState st;
          st.step = step;
          ck.save(*net, opt, st);
          saved.push_back(snapshot(*net));
        }
        EXPECT_EQ(names_in(d), (std::vector<std::string>{"ckpt-2.tdm", "ckpt-3.tdm", "latest"}));

        // A damaged newest file: a warning names it, and the previous one is loaded.
        std::string bytes = read_file(d / "ckpt-3.tdm");
        bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x40);
        write_file(d / "ckpt-3.tdm", bytes);
        std::optional<TrainingState> got;
        const std::string log =
            capture_stderr(dir.path() / "stderr.txt", [&] { got = ck.load_latest(*net, opt); });
        ASSERT_TRUE(got.has_value());
        EXPECT_EQ(got->step, 2u);
        EXPECT_EQ(max_diff(snapshot(*net), saved[1]), 0.0);
        EXPECT_TRUE(contains(log, "ckpt-3.tdm") && contains(log, "CRC")) << log;

        // Nothing valid: an error naming every file and what is wrong with it.
        const std::string good = read_file(d / "ckpt-2.tdm");
        write_file(d / "ckpt-2.tdm", good.substr(0, good.size() - 100));
        try {
          capture_stderr(dir.path() / "stderr.txt", [&] { ck.load_latest(*net, opt); });
          ADD_FAILURE() << "damaged checkpoints were loaded";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Io);
          EXPECT_TRUE(contains(e.what(), "ckpt-3.tdm") && contains(e.what(), "ckpt-2.tdm"))
              << e.what();
          EXPECT_TRUE(contains(e.what(), "truncated")) << e.what();
          EXPECT_TRUE(contains(e.what(), "Remove the damaged files")) << e.what();
        }

        // One file with a bad magic number; one whose header claims an absurd length.
        fs::remove(d / "ckpt-3.tdm");
        std::string bad = good;
        bad[0] = 'X';
        write_file(d / "ckpt-2.tdm", bad);
        try {
          capture_stderr(dir.path() / "stderr.txt", [&] { ck.load_latest(*net, opt); });
          ADD_FAILURE() << "a file with a bad magic number was loaded";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Io);
          EXPECT_TRUE(contains(e.what(), "ckpt-2.tdm") && contains(e.what(), "magic")) << e.what();
        }
        std::string huge = good;
        for (int i = 16; i < 24; ++i) huge[static_cast<std::size_t>(i)] = '\xff';
        write_file(d / "ckpt-2.tdm", huge);
        EXPECT_THROW(capture_stderr(dir.path() / "stderr.txt", [&] { ck.load_latest(*net, opt); }),
                     Error);
        // `latest` naming something else is ignored with a warning: the scan finds the file.
        write_file(d / "ckpt-2.tdm", good);
        write_file(d / "latest", "../../etc/passwd\n");
        const std::string log2 =
            capture_stderr(dir.path() / "stderr.txt", [&] { got = ck.load_latest(*net, opt); });
        ASSERT_TRUE(got.has_value());
        EXPECT_EQ(got->step, 2u);
        EXPECT_TRUE(contains(log2, "latest")) << log2;

        // Another model: a clear error naming the file, and nothing half-loaded.
        auto other = make_net(Net::conv, 1);
        auto other_opt = make_sgd(*other);
        const auto other_before = snapshot(*other);
        try {
          ck.load_latest(*other, other_opt);
          ADD_FAILURE() << "a checkpoint of another model was loaded";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
          EXPECT_TRUE(contains(e.what(), "ckpt-2.tdm") && contains(e.what(), "does not fit"))
              << e.what();
        }
        EXPECT_EQ(max_diff(snapshot(*other), other_before), 0.0);
      },
      run_options()));
}

// ---- killed at every step of a save ----------------------------------------------------------

// The probe of this process (the rank, or a writer forked from it): records the steps of a save,
// or SIGKILLs the process at its kill_at-th call.
struct KillPlan {
  std::size_t kill_at = ~std::size_t{0};
  std::size_t calls = 0;
  std::vector<std::string>* record = nullptr;  // "step file offset"
};
KillPlan g_plan;

void kill_probe(std::string_view step, const fs::path& file, std::uint64_t offset) {
  if (g_plan.record != nullptr)
    g_plan.record->push_back(fmt::format("{} {} {}", step, file.filename().string(), offset));
  if (g_plan.calls++ == g_plan.kill_at) std::raise(SIGKILL);
}

// Waits for `pid` under a deadline (then kills it); its wait status, or -1.
int wait_child(pid_t pid, std::chrono::milliseconds limit) {
  const int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pfd >= 0) {
    pollfd p{pfd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(limit.count()));
    ::close(pfd);
    if (ready <= 0) ::kill(pid, SIGKILL);
  }
  int status = 0;
  return ::waitpid(pid, &status, 0) == pid ? status : -1;
}

std::size_t index_of(const std::vector<std::string>& steps, const std::string& step) {
  const auto it = std::find(steps.begin(), steps.end(), step);
  return static_cast<std::size_t>(it - steps.begin());
}

// A writer SIGKILLed before each step of a save in turn (open, every write chunk, fsync, close,
// rename and directory fsync of the file and of `latest`, removal of the rotated file): a
// fresh load then finds the previous checkpoint or the new one, whole, and the next save
// removes what the killed one left behind.
TEST(Checkpoint, WriterKilledAtEveryStepOfASaveLeavesThePreviousOrTheNewCheckpoint) {
  TempDir dir;
  testing::expect_all_ok(testing::run_ranks(
      1,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const Data data = make_data(Net::mlp, 64);
        auto net = make_net(Net::mlp, 5);
        DistributedDataParallel ddp(net, comm);
        auto opt = make_sgd(*net);
        torch::CheckpointOptions co;
        co.keep_last = 2;
        const fs::path base = dir.path() / "base";
        TrainingState st;
        for (std::uint64_t step = 1; step <= 2; ++step) {
          train_step(ddp, net, opt, data.slice(static_cast<std::int64_t>(step) * 8, 8));
          st.step = step;
          Checkpointer(comm, base, co).save(*net, opt, st);
        }
        const auto old_params = snapshot(*net);
        const auto old_moms = momenta(opt);
        train_step(ddp, net, opt, data.slice(24, 8));
        const auto new_params = snapshot(*net);
        const auto new_moms = momenta(opt);
        ASSERT_GT(max_diff(new_params, old_params), 0.0);
        st.step = 3;

        // A dry run lists the steps of saving step 3 over steps 1 and 2 (step 1 rotates out).
        auto& wp = torch::detail::write_probe();
        wp.chunk_bytes = 1500;
        wp.before = kill_probe;
        std::vector<std::string> steps;
        g_plan = {~std::size_t{0}, 0, &steps};
        fs::copy(base, dir.path() / "dry");
        Checkpointer(comm, dir.path() / "dry", co).save(*net, opt, st);
        g_plan = {};
        wp.before = nullptr;
        const std::size_t file_bytes = fs::file_size(dir.path() / "dry" / "ckpt-3.tdm");
        std::size_t chunks = 0;
        for (const auto& s : steps) chunks += s.starts_with("write ckpt-3.tdm.tmp ") ? 1 : 0;
        EXPECT_EQ(chunks, (file_bytes + 1499) / 1500) << fmt::format("{}", fmt::join(steps, "\n"));
        EXPECT_GE(chunks, 4u) << "too few byte offsets within the file";
        const std::size_t new_file = index_of(steps, "rename ckpt-3.tdm 0");
        const std::size_t new_latest = index_of(steps, "rename latest 0");
        const std::size_t rotated = index_of(steps, "remove ckpt-1.tdm 0");
        ASSERT_LT(new_file, new_latest) << fmt::format("{}", fmt::join(steps, "\n"));
        ASSERT_LT(new_latest, rotated) << fmt::format("{}", fmt::join(steps, "\n"));
        EXPECT_EQ(steps.at(new_file + 1), "fsync-dir dry 0");

        // Kill before step k, for every k; k == steps.size() lets the save finish.
        for (std::size_t k = 0; k <= steps.size(); ++k) {
          const std::string at =
              k < steps.size() ? "killed before '" + steps[k] + "'" : "not killed";
          const fs::path d = dir.path() / fmt::format("k{}", k);
          fs::copy(base, d);
          const pid_t pid = ::fork();
          ASSERT_GE(pid, 0);
          if (pid == 0) {
            g_plan = {k, 0, nullptr};
            wp.before = kill_probe;
            try {
              Checkpointer(comm, d, co).save(*net, opt, st);
            } catch (...) {
              _exit(3);
            }
            _exit(0);
          }
          const int status = wait_child(pid, std::chrono::seconds(60));
          if (k < steps.size()) {
            EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << at << " " << status;
          } else {
            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << at << " " << status;
          }
          // A fresh model and optimizer load the previous or the new checkpoint, whole.
          auto fresh = make_net(Net::mlp, 99);
          auto fresh_opt = make_sgd(*fresh);
          Checkpointer ck(comm, d, co);
          std::optional<TrainingState> got;
          try {
            got = ck.load_latest(*fresh, fresh_opt);
          } catch (const Error& e) {
            ADD_FAILURE() << at << ": " << e.what();
            continue;
          }
          ASSERT_TRUE(got.has_value()) << at;
          const bool is_new = k > new_latest;
          EXPECT_EQ(got->step, is_new ? 3u : 2u) << at;
          EXPECT_EQ(max_diff(snapshot(*fresh), is_new ? new_params : old_params), 0.0) << at;
          EXPECT_EQ(max_diff(momenta(fresh_opt), is_new ? new_moms : old_moms), 0.0) << at;
          EXPECT_EQ(fs::exists(d / "ckpt-1.tdm"), k <= rotated) << at;
          // The next save clears the killed one's temporary files.
          TrainingState next;
          next.step = 4;
          ck.save(*fresh, fresh_opt, next);
          for (const auto& name : names_in(d))
            EXPECT_FALSE(name.ends_with(".tmp")) << at << ": " << name;
          EXPECT_EQ(read_file(d / "latest"), "ckpt-4.tdm\n") << at;
          fs::remove_all(d);
        }
      },
      run_options()));
}

// ---- killed after a save, then resumed --------------------------------------------------------

struct ResumeRun {
  fs::path dir;
  std::int64_t total_steps = 9;
  std::int64_t save_at = -1;
  std::int64_t die_after = -1;
  bool resume = false;
  fs::path out;  // rank 0 writes its final parameters here
};

// Dropout (per-rank RNG) and a shuffling sampler across epochs: a resumed run must restore
// the model, the optimizer's momentum, every rank's generator and the sampler position.
void resume_run(const testing::RankContext& ctx, const ResumeRun& r) {
  auto comm = start_rank(ctx);
  const std::int64_t b = 6;
  const Data data = make_data(Net::mlp, 48);
  namespace nn = ::torch::nn;
  ::torch::manual_seed(40 + static_cast<std::uint64_t>(ctx.rank));
  auto net =
      nn::Sequential(nn::Linear(20, 32), nn::ReLU(), nn::Dropout(0.3), nn::Linear(32, kClasses));
  DistributedDataParallel ddp(net, comm);
  auto opt = make_sgd(*net);
  ::torch::manual_seed(500 + static_cast<std::uint64_t>(ctx.rank));
  data::SamplerOptions so;
  so.seed = 9;
  data::DistributedSampler sampler(48, ctx.size, ctx.rank, so);
  Checkpointer ck(comm, r.dir);
  std::int64_t step = 0;
  std::uint64_t epoch = 0;
  if (r.resume) {
    const auto st = ck.load_latest(*net, opt);
    ASSERT_TRUE(st.has_value());
    step = static_cast<std::int64_t>(st->step);
    epoch = st->epoch;
    sampler.load_state(st->sampler);
  }
  while (step < r.total_steps) {
    sampler.set_epoch(epoch);
    const auto rest = sampler.remaining();
    for (std::size_t i = 0; i + b <= rest.size() && step < r.total_steps; i += b) {
      std::vector<std::int64_t> idx(rest.begin() + static_cast<std::ptrdiff_t>(i),
                                    rest.begin() + static_cast<std::ptrdiff_t>(i + b));
      const auto sel = ::torch::tensor(idx, ::torch::kLong);
      train_step(ddp, net, opt, {data.x.index_select(0, sel), data.y.index_select(0, sel)});
      sampler.advance(b);
      ++step;
      if (step == r.save_at) {
        TrainingState st;
        st.step = static_cast<std::uint64_t>(step);
        st.epoch = epoch;
        st.sampler = sampler.state();
        ck.save(*net, opt, st);
      }
      if (step == r.die_after) std::raise(SIGKILL);
    }
    if (sampler.position() == sampler.num_samples()) ++epoch;
  }
  if (ctx.rank == 0) {
    std::string bytes;
    for (const auto& p : snapshot(*net))
      bytes.append(static_cast<const char*>(p.data_ptr()), static_cast<std::size_t>(p.nbytes()));
    write_file(r.out, bytes);
  }
}

TEST(Checkpoint, KilledAfterASaveThenResumedEqualsAnUninterruptedRun) {
  TempDir dir;
  ResumeRun crashed{dir.path() / "ckpt", 9, 5, 6, false, dir.path() / "unused.bin"};
  const auto exits = testing::run_ranks(
      2, [&](const testing::RankContext& c) { resume_run(c, crashed); }, run_options());
  for (const auto& e : exits) EXPECT_EQ(e.signal, SIGKILL) << testing::describe(e);
  ASSERT_TRUE(fs::exists(dir.path() / "ckpt" / "ckpt-5.tdm"));

  ResumeRun resumed{dir.path() / "ckpt", 9, -1, -1, true, dir.path() / "resumed.bin"};
  testing::expect_all_ok(testing::run_ranks(
      2, [&](const testing::RankContext& c) { resume_run(c, resumed); }, run_options()));
  ResumeRun straight{dir.path() / "other", 9, -1, -1, false, dir.path() / "straight.bin"};
  testing::expect_all_ok(testing::run_ranks(
      2, [&](const testing::RankContext& c) { resume_run(c, straight); }, run_options()));

  const std::string a = read_file(resumed.out);
  const std::string b = read_file(straight.out);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << "the resumed run's parameters differ from the uninterrupted run's";
}

// ---- a full disk ------------------------------------------------------------------------------

// Mounts a small tmpfs on `dir` in a private mount namespace of the calling process.
std::string mount_small_tmpfs(const fs::path& dir, const char* size) {
  if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + strerror(errno);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("making / private: ") + strerror(errno);
  const std::string opts = std::string("size=") + size;
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0)
    return std::string("mount tmpfs: ") + strerror(errno);
  return {};
}

TEST(Checkpoint, FullDiskKeepsThePreviousCheckpointAndFailsEveryRank) {
  TempDir dir;
  const fs::path d = dir.path() / "small";
  fs::create_directories(d);
  {  // Can this process mount at all (root, or a user namespace)? A child tries.
    const pid_t pid = ::fork();
    if (pid == 0) _exit(mount_small_tmpfs(d, "64k").empty() ? 0 : 1);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace here (needs "
                      "CAP_SYS_ADMIN); the full-disk checkpoint test is skipped";
  }
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        // Rank 0 alone writes checkpoints: only it sees the small disk.
        if (ctx.rank == 0) {
          const std::string why = mount_small_tmpfs(d, "512k");
          ASSERT_TRUE(why.empty()) << why;
        }
        auto comm = start_rank(ctx);
        const Data data = make_data(Net::mlp, 32);
        auto net = make_net(Net::mlp, 8);
        DistributedDataParallel ddp(net, comm);
        auto opt = make_sgd(*net);
        train_step(ddp, net, opt, data.slice(ctx.rank * 8, 8));
        Checkpointer ck(comm, d);
        TrainingState st;
        st.step = 1;
        ck.save(*net, opt, st);
        if (ctx.rank == 0) {
          // Fill the disk.
          std::ofstream filler(d / "filler", std::ios::binary);
          const std::string block(4096, 'x');
          while (filler.write(block.data(), static_cast<std::streamsize>(block.size())) &&
                 filler.flush()) {
          }
        }
        st.step = 2;
        train_step(ddp, net, opt, data.slice(16 + ctx.rank * 8, 8));
        try {
          ck.save(*net, opt, st);
          ADD_FAILURE() << "save on a full disk succeeded";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::Io) << e.what();
          EXPECT_TRUE(contains(e.what(), "No space left on device")) << e.what();
          EXPECT_TRUE(contains(e.what(), "ckpt-2.tdm")) << e.what();
          if (ctx.rank != 0) {
            EXPECT_TRUE(contains(e.what(), "rank 0")) << e.what();
          }
        }
        if (ctx.rank == 0) {
          EXPECT_EQ(names_in(d), (std::vector<std::string>{"ckpt-1.tdm", "filler", "latest"}));
          EXPECT_EQ(read_file(d / "latest"), "ckpt-1.tdm\n");
          fs::remove(d / "filler");
        }
        // With space again, saving works.
        EXPECT_EQ(ck.save(*net, opt, st), d / "ckpt-2.tdm");
      },
      run_options()));
}

// Three ranks whose models, momenta and training states all differ (rank 2 has never stepped
// its optimizer) take rank 1's: parameters, momenta and state equal rank 1's on every rank,
// and rank 1's own are unchanged.
TEST(ShareState, EveryRankEndsWithTheRootsModelOptimizerAndTrainingState) {
  testing::expect_all_ok(testing::run_ranks(
      3,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        const Data data = make_data(Net::mlp, 64);
        auto net = make_net(Net::mlp, 100 + static_cast<std::uint64_t>(ctx.rank));
        auto opt = make_sgd(*net);
        for (int k = 0; k < 2 - ctx.rank; ++k) {  // no DDP: every rank trains on its own
          opt.zero_grad();
          const Data d = data.slice((k + ctx.rank) * 8, 8);
          F::cross_entropy(net->forward(d.x), d.y).backward();
          opt.step();
        }
        EXPECT_FALSE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))));
        const auto mine = snapshot(*net);
        const auto my_momenta = momenta(opt);

        TrainingState st;
        st.step = 10 + static_cast<std::uint64_t>(ctx.rank);
        st.epoch = static_cast<std::uint64_t>(ctx.rank);
        st.sampler = {st.epoch, 8u * st.step, 42, 3, static_cast<std::uint64_t>(ctx.rank)};
        if (ctx.rank == 1) st.scaler = torch::GradScalerState{256.0, 5};
        st.extra_json = fmt::format(R"({{"rank": {}}})", ctx.rank);
        const TrainingState got = share_state(*comm, 1, *net, opt, st);

        EXPECT_EQ(got.step, 11u);
        EXPECT_EQ(got.epoch, 1u);
        EXPECT_EQ(got.sampler.position, 88u);
        EXPECT_EQ(got.sampler.offset, 1u);
        ASSERT_TRUE(got.scaler.has_value());
        EXPECT_EQ(got.scaler->scale, 256.0);
        EXPECT_EQ(got.scaler->growth_tracker, 5);
        EXPECT_EQ(got.extra_json, R"({"rank": 1})");
        EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))));
        const auto moms = momenta(opt);
        ASSERT_TRUE(moms[0].defined()) << "rank " << ctx.rank << " got no momentum";
        EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(moms)));
        if (ctx.rank == 1) {
          EXPECT_EQ(max_diff(snapshot(*net), mine), 0.0);
          EXPECT_EQ(max_diff(moms, my_momenta), 0.0);
        }
        // Training on from there keeps them equal: the state is all a step depends on.
        opt.zero_grad();
        const Data d = data.slice(40, 8);
        F::cross_entropy(net->forward(d.x), d.y).backward();
        opt.step();
        EXPECT_TRUE(same_on_every_rank(*comm, hash_tensors(snapshot(*net))));
      },
      run_options()));
}

// A rank whose model differs from the root's fails, and so does every other rank (none is
// left waiting for it); a root out of range is refused before any communication.
TEST(ShareState, AModelThatDoesNotFitFailsOnEveryRank) {
  testing::expect_all_ok(testing::run_ranks(
      2,
      [&](const testing::RankContext& ctx) {
        auto comm = start_rank(ctx);
        auto net = make_net(ctx.rank == 0 ? Net::mlp : Net::conv, 7);
        auto opt = make_sgd(*net);
        try {
          share_state(*comm, 0, *net, opt, TrainingState{});
          ADD_FAILURE() << "rank " << ctx.rank << ": a state that does not fit was taken";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
          EXPECT_TRUE(contains(e.message(), ctx.rank == 0 ? "rank 1 could not load"
                                                          : "does not fit this rank's model"))
              << e.what();
        }
        try {
          share_state(*comm, 2, *net, opt, TrainingState{});
          ADD_FAILURE() << "root 2 of 2 ranks was taken";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
        }
      },
      run_options()));
}

}  // namespace
}  // namespace tandem::torchtest
