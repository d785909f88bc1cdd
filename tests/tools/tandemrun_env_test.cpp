// tandemrun: what its workers see (environment, store, arguments) and what it leaves behind.
#include "subprocess.hpp"

#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <unistd.h>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// When this binary runs as a tandemrun worker (TANDEM_TOOLS_TEST_WORKER=store), it
// rendezvouses through the launcher's store (TANDEM_STORE_ADDR) before gtest starts, and exits.
int store_worker() {
  try {
    const int rank = std::atoi(std::getenv("RANK"));
    const int world = std::atoi(std::getenv("WORLD_SIZE"));
    const std::string where = std::getenv("TANDEM_STORE_ADDR");
    const auto colon = where.rfind(':');
    const std::string addr = where.substr(0, colon);
    const auto port = static_cast<std::uint16_t>(std::atoi(where.c_str() + colon + 1));
    if (rank == 0) {
      store::TcpStoreOptions bad;
      bad.token = "not-the-token";
      bad.connect_timeout = 10s;
      try {
        store::TcpStore s(addr, port, bad);
        s.set("intruder", "x");
        std::printf("auth NOT enforced\n");
      } catch (const Error& e) {
        std::printf("auth %s\n", e.code() == ErrorCode::Unauthenticated ? "enforced" : e.what());
      }
    }
    store::TcpStoreOptions o;  // token from TANDEM_STORE_TOKEN
    o.connect_timeout = 30s;
    store::TcpStore s(addr, port, o);
    s.set(fmt::format("rank/{}", rank), std::to_string(::getpid()));
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(fmt::format("rank/{}", r));
    s.wait(keys, deadline_in(30s));
    const auto joined = s.add("joined", 1);
    std::printf("store ok rank %d joined %lld\n", rank, static_cast<long long>(joined));
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store worker: %s\n", e.what());
    return 1;
  }
}

[[maybe_unused]] const bool kRanAsWorker = [] {
  const char* mode = std::getenv("TANDEM_TOOLS_TEST_WORKER");
  if (mode != nullptr && std::string_view(mode) == "store") std::_Exit(store_worker());
  return false;
}();

std::string self_exe() {
  return fs::read_symlink("/proc/self/exe").string();
}

// Lines "[rank R]: <rest>" of `text`, by rank.
std::map<int, std::vector<std::string>> by_rank(const std::string& text) {
  static const std::regex re(R"(^\[rank (\d+)\]: (.*)$)");
  std::map<int, std::vector<std::string>> m;
  for (const auto& line : split_lines(text)) {
    std::smatch sm;
    EXPECT_TRUE(std::regex_match(line, sm, re)) << "unprefixed line: " << line;
    if (!sm.empty()) m[std::stoi(sm[1])].push_back(sm[2]);
  }
  return m;
}

TEST(Tandemrun, WorkersGetTorchrunEnvironment) {
  const std::string script =
      "echo ENV $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE "
      "$ROLE_RANK $ROLE_WORLD_SIZE $ROLE_NAME $MASTER_ADDR $TORCHELASTIC_RESTART_COUNT "
      "$TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_RUN_ID $TANDEM_RUN_ID $TANDEM_RESTART_COUNT "
      "$OMP_NUM_THREADS x${TORCHELASTIC_USE_AGENT_STORE}x${TANDEM_AGENT_STORE}x; "
      "echo PORT $MASTER_PORT; echo STORE $TANDEM_STORE_ADDR; echo TOKEN $TANDEM_STORE_TOKEN";
  const auto r =
      run_process({tandemrun_path(), "--nproc-per-node", "3", "--run-id", "envtest",
                   "--max-restarts", "2", "/bin/sh", "-c", script},
                  {"TANDEM_STORE_TOKEN=", "OMP_NUM_THREADS=", "TORCHELASTIC_USE_AGENT_STORE=True"});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = by_rank(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  std::string port, store, token;
  for (int rank = 0; rank < 3; ++rank) {
    const auto& l = lines[rank];
    ASSERT_EQ(l.size(), 4u) << r.out;
    EXPECT_EQ(l[0], fmt::format("ENV {0} {0} 3 3 0 1 {0} 3 default 127.0.0.1 0 2 envtest "
                                "envtest 0 1 xxx",
                                rank));
    ASSERT_TRUE(l[1].starts_with("PORT "));
    ASSERT_TRUE(l[2].starts_with("STORE "));
    ASSERT_TRUE(l[3].starts_with("TOKEN "));
    if (rank == 0) {
      port = l[1].substr(5);
      store = l[2].substr(6);
      token = l[3].substr(6);
    }
    EXPECT_EQ(l[1].substr(5), port) << "every rank gets the same MASTER_PORT";
    EXPECT_EQ(l[2].substr(6), store) << "every rank gets the same store";
    EXPECT_EQ(l[3].substr(6), token) << "every rank gets the same token";
  }
  const int p = std::stoi(port);
  EXPECT_GT(p, 0);
  EXPECT_LT(p, 65536);
  ASSERT_TRUE(store.starts_with("127.0.0.1:")) << store;
  EXPECT_NE(store.substr(10), port) << "MASTER_PORT is the workers' own, not the launcher's store";
  EXPECT_TRUE(std::regex_match(token, std::regex("[0-9a-f]{32}"))) << token;
}

TEST(Tandemrun, GpusListGivesEachLocalRankItsDevice) {
  const auto r = run_process({tandemrun_path(), "--gpus", "3,5,7", "/bin/sh", "-c",
                              "echo $LOCAL_RANK $LOCAL_WORLD_SIZE $CUDA_VISIBLE_DEVICES"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = by_rank(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0], std::vector<std::string>{"0 3 3"});
  EXPECT_EQ(lines[1], std::vector<std::string>{"1 3 5"});
  EXPECT_EQ(lines[2], std::vector<std::string>{"2 3 7"});
}

TEST(Tandemrun, LocalRanksFilterKeepsOtherRanksOffTheConsole) {
  TempDir dir;
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "3", "--local-ranks-filter",
                              "0,2", "--log-dir", dir.str(), "--run-id", "filter", "/bin/sh", "-c",
                              "echo hello $RANK"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = by_rank(r.out);
  EXPECT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines.count(1), 0u) << r.out;
  std::ifstream f(dir.file("filter/rank_1.log"));
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "hello 1\n") << "the log file still gets rank 1's output";
}

TEST(Tandemrun, KeepsUserOmpThreadsAndToken) {
  const auto r = run_process({tandemrun_path(), "--nproc_per_node=2", "--", "/bin/sh", "-c",
                              "echo $OMP_NUM_THREADS $TANDEM_STORE_TOKEN"},
                             {"OMP_NUM_THREADS=7", "TANDEM_STORE_TOKEN=my-secret"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = by_rank(r.out);
  ASSERT_EQ(lines.size(), 2u);
  for (auto& [rank, l] : lines) EXPECT_EQ(l, std::vector<std::string>{"7 my-secret"});
}

TEST(Tandemrun, EverythingAfterProgramBelongsToIt) {
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "1", "/bin/sh", "-c",
                              "echo \"$0|$1|$2|$3\"", "x", "--nproc-per-node", "5", "--bogus"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0]: x|--nproc-per-node|5|--bogus\n");
}

TEST(Tandemrun, WorkersRendezvousThroughTheHostedStore) {
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "3", self_exe()},
                             {"TANDEM_TOOLS_TEST_WORKER=store", "TANDEM_STORE_TOKEN="});
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto lines = by_rank(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].front(), "auth enforced") << r.out;
  std::set<std::string> joined;
  for (auto& [rank, l] : lines) {
    ASSERT_FALSE(l.empty());
    EXPECT_TRUE(l.back().starts_with(fmt::format("store ok rank {} joined ", rank))) << l.back();
    joined.insert(l.back().substr(l.back().size() - 1));
  }
  EXPECT_EQ(joined, (std::set<std::string>{"1", "2", "3"}));
}

TEST(Tandemrun, AllWorkersSucceedExitsZero) {
  const auto r =
      run_process({tandemrun_path(), "--nproc-per-node", "4", "--standalone", "/bin/true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST(Tandemrun, AutoMeansOneWorkerPerCpu) {
  const auto r = run_process(
      {tandemrun_path(), "--nproc-per-node", "auto", "/bin/sh", "-c", "echo $WORLD_SIZE"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.size(), static_cast<std::size_t>(std::stoi(lines[0].substr(10))));
}

TEST(Tandemrun, LogDirGetsOneFilePerRank) {
  TempDir dir;
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "2", "--log-dir", dir.str(),
                              "--run-id", "logs1", "--redirects", "1", "/bin/sh", "-c",
                              "echo out $RANK; echo err $RANK >&2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "") << "--redirects 1: stdout goes to the files only";
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(r.err.find(fmt::format("[rank {}]: err {}\n", rank, rank)), std::string::npos);
    std::ifstream f(fmt::format("{}/logs1/rank_{}.log", dir.str(), rank));
    ASSERT_TRUE(f.good()) << "missing log file for rank " << rank;
    std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_NE(content.find(fmt::format("out {}\n", rank)), std::string::npos) << content;
    EXPECT_NE(content.find(fmt::format("err {}\n", rank)), std::string::npos) << content;
  }
}

// What Paddle's launcher (python -m paddle.distributed.launch --selected_gpus 4,6 --log_dir
// DIR, FLAGS_START_PORT=7100) gives each worker, computed here as Paddle computes it, field by
// field; CUDA_VISIBLE_DEVICES stays the user's, as under Paddle.
TEST(Tandemrun, PaddleProgramsSeePaddlesEnvironment) {
  TempDir dir;
  const std::vector<std::string> fields{
      "PADDLE_TRAINER_ID",       "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS",
      "PADDLE_CURRENT_ENDPOINT", "PADDLE_RANK_IN_NODE", "PADDLE_GLOBAL_RANK",
      "PADDLE_GLOBAL_SIZE",      "PADDLE_LOCAL_RANK",   "PADDLE_LOCAL_SIZE",
      "PADDLE_NNODES",           "FLAGS_selected_gpus", "CUDA_VISIBLE_DEVICES",
      "PADDLE_DISTRI_BACKEND"};
  std::string script;
  for (const auto& f : fields) script += fmt::format("echo {0}=${{{0}:-unset}}; ", f);
  const auto r = run_process(
      {tandemrun_path(), "--selected_gpus", "4,6", "--log_dir", dir.str(), "/bin/sh", "-c", script},
      {"FLAGS_START_PORT=7100", "CUDA_VISIBLE_DEVICES=2,4,6"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> devices{"4", "6"};
  for (int i = 0; i < 2; ++i) {
    const std::map<std::string, std::string> want{
        {"PADDLE_TRAINER_ID", std::to_string(i)},
        {"PADDLE_TRAINERS_NUM", "2"},
        {"PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:7100,127.0.0.1:7101"},
        {"PADDLE_CURRENT_ENDPOINT", fmt::format("127.0.0.1:{}", 7100 + i)},
        {"PADDLE_RANK_IN_NODE", std::to_string(i)},
        {"PADDLE_GLOBAL_RANK", std::to_string(i)},
        {"PADDLE_GLOBAL_SIZE", "2"},
        {"PADDLE_LOCAL_RANK", std::to_string(i)},
        {"PADDLE_LOCAL_SIZE", "2"},
        {"PADDLE_NNODES", "1"},
        {"FLAGS_selected_gpus", devices[static_cast<std::size_t>(i)]},
        {"CUDA_VISIBLE_DEVICES", "2,4,6"},
        {"PADDLE_DISTRI_BACKEND", "unset"}};
    // Paddle's log layout: DIR/workerlog.<local rank>, holding what the worker printed.
    std::ifstream f(fmt::format("{}/workerlog.{}", dir.str(), i));
    ASSERT_TRUE(f.good()) << "missing workerlog." << i;
    std::string line;
    std::size_t seen = 0;
    while (std::getline(f, line)) {
      const auto eq = line.find('=');
      ASSERT_NE(eq, std::string::npos) << line;
      EXPECT_EQ(line.substr(eq + 1), want.at(line.substr(0, eq))) << "worker " << i;
      ++seen;
    }
    EXPECT_EQ(seen, fields.size());
  }
  // --start_port wins over FLAGS_START_PORT; without devices Paddle says gloo.
  const auto cpu = run_process(
      {tandemrun_path(), "--nproc-per-node", "2", "--start_port", "9000", "/bin/sh", "-c",
       "echo $PADDLE_CURRENT_ENDPOINT $PADDLE_DISTRI_BACKEND "
       "${FLAGS_selected_gpus:-none}"},
      {"FLAGS_START_PORT=7100"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  auto lines = by_rank(cpu.out);
  EXPECT_EQ(lines[0], std::vector<std::string>{"127.0.0.1:9000 gloo none"});
  EXPECT_EQ(lines[1], std::vector<std::string>{"127.0.0.1:9001 gloo none"});
}

TEST(Tandemrun, RemovesLeftoverShmSegmentsOfItsRun) {
  const std::string run = fmt::format("shmtest{}", ::getpid());
  const std::string other = fmt::format("/dev/shm/tandem-other{}-keep", ::getpid());
  std::ofstream(other) << "x";
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "2", "--run-id", run, "/bin/sh",
                              "-c", "echo x > /dev/shm/tandem-$TANDEM_RUN_ID-c0-$RANK"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_FALSE(fs::exists(fmt::format("/dev/shm/tandem-{}-c0-{}", run, rank)));
  EXPECT_TRUE(fs::exists(other)) << "another run's segment must stay";
  fs::remove(other);
}

}  // namespace
}  // namespace tandem::testing
