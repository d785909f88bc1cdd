// tandemrun --check on one node: every check passes on a healthy machine, and each failure it
// claims to catch is named with what to do: GPUs asked for but absent, the master port in use,
// an interface that is not there, a /dev/shm too small for the local ranks (a 1 MiB tmpfs in a
// private mount namespace). (That a real start which fails points to --check:
// tandemrun_failure_test.cpp; two nodes, the rendezvous and a wrong token:
// tandemrun_multinode_test.cpp.)

#include "subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

namespace tandem::testing {
namespace {

bool has_line(const std::string& out, const std::string& check, const std::string& status) {
  for (const auto& line : split_lines(out))
    if (line.starts_with("check node 0 (") &&
        line.find(fmt::format("): {:<9} {:<4}", check, status)) != std::string::npos)
      return true;
  return false;
}

TEST(TandemrunCheck, EveryCheckPassesOnAHealthyNode) {
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "2", "--check"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* check : {"version", "interface", "shm", "gpus", "store", "nodes", "clock"})
    EXPECT_TRUE(has_line(r.out, check, "ok")) << check << "\n" << r.out;
  EXPECT_NE(r.out.find("2 local ranks need"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check: all passed"), std::string::npos) << r.out;
  // The same flags as a real run: PROGRAM may stay on the line.
  const auto with_program =
      run_process({tandemrun_path(), "--nproc-per-node", "2", "--check", "/bin/false"});
  EXPECT_EQ(with_program.exit_code, 0) << with_program.out << with_program.err;
}

TEST(TandemrunCheck, EachFailureIsNamedWithWhatToDo) {
  if (!std::filesystem::exists("/proc/driver/nvidia/gpus")) {
    const auto gpus = run_process({tandemrun_path(), "--gpus", "0,1", "--check"});
    EXPECT_EQ(gpus.exit_code, 1);
    EXPECT_TRUE(has_line(gpus.out, "gpus", "FAIL")) << gpus.out;
    EXPECT_NE(gpus.out.find("install the driver"), std::string::npos) << gpus.out;
    EXPECT_NE(gpus.out.find("check: FAILED"), std::string::npos) << gpus.out;
  }

  {
    const BusyPort held;
    const std::string port = std::to_string(held.port());
    const auto busy =
        run_process({tandemrun_path(), "--nproc-per-node", "2", "--master-port", port, "--check"});
    EXPECT_EQ(busy.exit_code, 1);
    EXPECT_TRUE(has_line(busy.out, "store", "FAIL")) << busy.out;
    EXPECT_NE(busy.out.find("in use"), std::string::npos) << busy.out;
  }

  const auto ifname = run_process({tandemrun_path(), "--nproc-per-node", "2", "--check"},
                                  {"NCCL_SOCKET_IFNAME=nosuch0"});
  EXPECT_EQ(ifname.exit_code, 1);
  EXPECT_TRUE(has_line(ifname.out, "interface", "FAIL")) << ifname.out;
  EXPECT_NE(ifname.out.find("NCCL_SOCKET_IFNAME=nosuch0"), std::string::npos) << ifname.out;
}

TEST(TandemrunCheck, ASmallDevShmIsNamed) {
  // A private mount namespace with a 1 MiB /dev/shm (as a container's 64 MiB default is, for
  // larger jobs); 4 local ranks need more.
  const auto probe = run_process({"/usr/bin/unshare", "-m", "/bin/true"});
  if (probe.exit_code != 0)
    GTEST_SKIP() << "cannot make a mount namespace here (needs root): " << probe.err;
  const std::string script =
      fmt::format("mount -t tmpfs -o size=1m tmpfs /dev/shm && exec {} --nproc-per-node 4 --check",
                  tandemrun_path());
  const auto r = run_process({"/usr/bin/unshare", "-m", "/bin/sh", "-c", script});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, "shm", "FAIL")) << r.out;
  EXPECT_NE(r.out.find("4 local ranks need"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--shm-size"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tandem::testing
