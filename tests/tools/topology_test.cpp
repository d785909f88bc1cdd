// tandemrun --cpu-bind (what affinity a worker sees) and tandem-topo (runs here, reads XML).
#include "subprocess.hpp"
#include "topo/binding.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sched.h>

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

topo::CpuList my_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  topo::CpuList out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::string allowed_list() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("Cpus_allowed_list:"))
      return line.substr(line.find_first_not_of(" \t", 18));
  return "?";
}

// As a tandemrun worker (TANDEM_TOOLS_TEST_WORKER=affinity): prints what it may run on.
[[maybe_unused]] const bool kRanAsAffinityWorker = [] {
  const char* mode = std::getenv("TANDEM_TOOLS_TEST_WORKER");
  if (mode == nullptr || std::string_view(mode) != "affinity") return false;
  std::printf("AFFINITY %s %s %s\n", std::getenv("LOCAL_RANK"),
              topo::to_string(my_affinity()).c_str(), allowed_list().c_str());
  std::fflush(stdout);
  std::_Exit(0);
}();

// Local rank -> (sched_getaffinity, Cpus_allowed_list) as the workers printed them.
std::map<int, std::pair<std::string, std::string>> affinities(const std::string& out) {
  static const std::regex re(R"(^\[rank \d+\]: AFFINITY (\d+) (\S+) (\S+)$)");
  std::map<int, std::pair<std::string, std::string>> m;
  for (const auto& line : split_lines(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, re)) m[std::stoi(sm[1])] = {sm[2], sm[3]};
  }
  return m;
}

ProcessResult run_bound(const std::string& policy, int nproc) {
  return run_process({tandemrun_path(), "--nproc-per-node", std::to_string(nproc), "--cpu-bind",
                      policy, fs::read_symlink("/proc/self/exe").string()},
                     {"TANDEM_TOOLS_TEST_WORKER=affinity", "TANDEM_DEBUG=INFO"});
}

void expect_bound_as_planned(topo::CpuBind policy, int nproc) {
  const topo::Binding plan = topo::bind_local_ranks(topo::discover(), policy, nproc);
  const auto r = run_bound(std::string(topo::to_string(policy)), nproc);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto seen = affinities(r.out);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(nproc)) << r.out;
  for (int local = 0; local < nproc; ++local) {
    const std::string want = topo::to_string(plan.cpus[static_cast<std::size_t>(local)]);
    EXPECT_EQ(seen.at(local).first, want) << "local rank " << local;
    EXPECT_EQ(seen.at(local).second, want) << "local rank " << local;
    EXPECT_NE(r.err.find(fmt::format("(local rank {}) bound to CPUs {} (", local, want)),
              std::string::npos)
        << r.err;
  }
}

TEST(CpuBind, CoreGivesEachLocalRankItsOwnCores) {
  expect_bound_as_planned(topo::CpuBind::core, 2);
}

TEST(CpuBind, NumaGivesEachLocalRankANodesCpus) {
  expect_bound_as_planned(topo::CpuBind::numa, 2);
}

TEST(CpuBind, MoreRanksThanCoresWarnsAndShares) {
  const auto cores = topo::discover().cores.size();
  const int nproc = static_cast<int>(cores) + 1;
  expect_bound_as_planned(topo::CpuBind::core, nproc);
  const auto r = run_bound("core", nproc);
  EXPECT_NE(r.err.find(fmt::format("{} local ranks but {} cores", nproc, cores)), std::string::npos)
      << r.err;
}

TEST(CpuBind, NoneLeavesTheLaunchersAffinity) {
  const auto r = run_bound("none", 2);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto seen = affinities(r.out);
  ASSERT_EQ(seen.size(), 2u) << r.out;
  for (const auto& [local, sets] : seen) EXPECT_EQ(sets.first, topo::to_string(my_affinity()));
  EXPECT_EQ(r.err.find("bound to CPUs"), std::string::npos) << r.err;
}

TEST(CpuBind, StaysWithinTheLaunchersAffinity) {
  // tandemrun started on one CPU only (as under taskset): both ranks land there.
  const topo::CpuList all = my_affinity();
  ASSERT_FALSE(all.empty());
  cpu_set_t one, before;
  CPU_ZERO(&one);
  CPU_SET(all.back(), &one);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(before), &before), 0);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
  const auto r = run_bound("core", 2);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(before), &before), 0);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto seen = affinities(r.out);
  ASSERT_EQ(seen.size(), 2u) << r.out;
  for (const auto& [local, sets] : seen) EXPECT_EQ(sets.first, std::to_string(all.back()));
}

TEST(CpuBind, BadValueIsAUsageError) {
  const auto r =
      run_process({tandemrun_path(), "--nproc-per-node", "2", "--cpu-bind", "socket", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cpu-bind 'socket' is not a binding policy: use core, numa or none"),
            std::string::npos)
      << r.err;
}

std::string topo_path() {
  return TANDEM_BINARY_DIR "/bin/tandem-topo";
}
std::string fixture(const std::string& name) {
  return TANDEM_SOURCE_DIR "/tests/unit/topo/fixtures/" + name;
}

TEST(TandemTopo, RunsOnThisMachine) {
  const auto r = run_process({topo_path(), "--nproc-per-node", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Topology of "), std::string::npos) << r.out;
  EXPECT_TRUE(r.out.find("CPU Affinity    NUMA Affinity\n") != std::string::npos ||
              r.out.find("No GPUs or NICs on PCI") != std::string::npos)
      << r.out;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex(R"(\n\s+rank0\s+rank1\s+CPU set\s+NUMA\s+GPU\n)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nrank0\s+X\s+shm\s)"))) << r.out;
}

TEST(TandemTopo, ShmDisabledMeansTcp) {
  const auto r = run_process({topo_path(), "--nproc-per-node", "2"}, {"TANDEM_SHM_DISABLE=1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nrank1\s+tcp\s+X\s)"))) << r.out;
}

TEST(TandemTopo, ShowsAnXmlTopologyAsNvidiaSmiWould) {
  const auto r = run_process({topo_path(), "--xml", fixture("dual_socket.xml"), "--nproc-per-node",
                              "4", "--cpu-bind", "numa"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(
          R"(\n\s+GPU0\s+GPU1\s+GPU2\s+GPU3\s+NIC0\s+NIC1\s+NIC2\s+CPU Affinity\s+NUMA Affinity\n)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\nGPU0\s+X\s+NV4\s+NV2\s+SYS\s+PIX\s+NODE\s+SYS\s+0-3,8-11\s+0\n)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\nrank1\s+shm\s+X\s+shm\s+shm\s+4-7,12-15\s+1\s+GPU1\n)")))
      << r.out;
  EXPECT_NE(r.out.find("NIC0: mlx5_0 (0000:03:00.0)"), std::string::npos) << r.out;
}

TEST(TandemTopo, SavedXmlShowsTheSameMachine) {
  TempDir dir;
  const std::string xml = dir.file("here.xml");
  const auto live = run_process({topo_path(), "--save-xml", xml, "--nproc-per-node", "2"});
  ASSERT_EQ(live.exit_code, 0) << live.err;
  const auto saved = run_process({topo_path(), "--xml", xml, "--nproc-per-node", "2"});
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  // Everything after the first line (which names the source, and says how much memory is
  // free right now) is the same.
  const auto from_matrix = [](const std::string& out) { return out.substr(out.find("\n\n")); };
  EXPECT_EQ(from_matrix(saved.out), from_matrix(live.out));
}

TEST(TandemTopo, JsonAndMeasure) {
  const auto r = run_process(
      {topo_path(), "--json", "--measure", "--measure-bytes", "2M", "--nproc-per-node", "2"}, {},
      std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"local_ranks\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"pair_gbps\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"numa_gbps\""), std::string::npos) << r.out;
}

TEST(TandemTopo, BadArgumentsAreClearErrors) {
  auto r = run_process({topo_path(), "--cpu-bind", "cores"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cpu-bind 'cores' is not a policy"), std::string::npos) << r.err;
  r = run_process({topo_path(), "--xml", "/nonexistent.xml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent.xml does not exist"), std::string::npos) << r.err;
  r = run_process({topo_path(), "--measure-bytes", "lots"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--measure-bytes 'lots'"), std::string::npos) << r.err;
  r = run_process({topo_path(), "--xml", fixture("single_numa.xml"), "--measure"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot be combined with --xml"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tandem::testing
