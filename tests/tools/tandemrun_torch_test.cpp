// A PyTorch program written for torchrun (torch.distributed, gloo, init_method env://) runs
// unchanged under tandemrun: its rank 0 hosts PyTorch's own store at MASTER_PORT.
#include "python_torch.hpp"
#include "subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>

namespace tandem::testing {
namespace {

TEST(TandemrunTorch, TorchDistributedGlooScriptRunsUnchanged) {
  std::string why;
  const std::string python = python_with_torch(&why);
  if (python.empty()) {
    GTEST_SKIP() << "python3 cannot import torch.distributed (" << why
                 << "); run scripts/python-env.sh (torch into .venv) to run this test";
  }
  TempDir dir;
  const std::string script = dir.file("allreduce.py");
  std::ofstream(script) << torch_allreduce_script();
  const auto r = run_process({tandemrun_path(), "--nproc-per-node", "2", python, script}, {},
                             std::chrono::seconds(180));
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank : {0, 1}) {
    EXPECT_NE(r.out.find(fmt::format("[rank {0}]: rank {0}/2 allreduce 3 OK\n", rank)),
              std::string::npos)
        << r.out << r.err;
  }
}

}  // namespace
}  // namespace tandem::testing
