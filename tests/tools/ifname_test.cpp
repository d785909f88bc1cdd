// Which interface the ranks listen on, in a network namespace with two of them (veth links
// tdmeth0 and tdmib1): TANDEM_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME,
// in NCCL's syntax, said at TANDEM_DEBUG=INFO together with the rest of the setup report
// (transport per peer, algorithm per size range, the ranks' layout).

#include "netns.hpp"
#include "subprocess.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;

class TwoInterfaces : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NetnsPair::unavailable()) GTEST_SKIP() << *why;
    ip_ = NetnsPair::ip_path();
    ns_ = fmt::format("tdm-{}-if", ::getpid());
    ip({"netns", "add", ns_});
    ip({"-n", ns_, "link", "set", "lo", "up"});
    for (const auto& [name, addr] :
         {std::pair{"tdmeth0", "10.214.1.1/24"}, std::pair{"tdmib1", "10.214.2.1/24"}}) {
      const std::string peer = std::string(name) + "p";
      ip({"-n", ns_, "link", "add", name, "type", "veth", "peer", "name", peer});
      ip({"-n", ns_, "addr", "add", addr, "dev", name});
      ip({"-n", ns_, "link", "set", name, "up"});
      ip({"-n", ns_, "link", "set", peer, "up"});
    }
  }
  void TearDown() override {
    if (!ns_.empty()) (void)run_process({ip_, "netns", "del", ns_});
  }
  void ip(std::vector<std::string> args) {
    args.insert(args.begin(), ip_);
    const auto r = run_process(args);
    ASSERT_EQ(r.exit_code, 0) << fmt::format("{}", fmt::join(args, " ")) << ": " << r.err;
  }
  // Two ranks of minimal_allreduce inside the namespace with `env`; their output.
  ProcessResult run(const std::vector<std::string>& env) {
    std::vector<std::string> all = env;
    all.emplace_back("TANDEM_DEBUG=INFO");
    for (const char* name : {"TANDEM_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"})
      if (std::none_of(env.begin(), env.end(),
                       [&](const std::string& e) { return e.starts_with(name); }))
        all.push_back(std::string(name) + "=");  // not the test's own
    return run_process({ip_, "netns", "exec", ns_, tandemrun_path(), "--nproc-per-node", "2",
                        TANDEM_BINARY_DIR "/bin/minimal_allreduce"},
                       all, 60s);
  }

  std::string ip_, ns_;
};

TEST_F(TwoInterfaces, NcclAndGlooNamesChooseTheInterfaceWhereTandemsIsUnset) {
  const auto nccl = run({"NCCL_SOCKET_IFNAME=tdmib"});
  ASSERT_EQ(nccl.exit_code, 0) << nccl.err;
  const std::string all = nccl.out + nccl.err;
  EXPECT_NE(all.find("[rank 0]: [tandem rank 0/2 vm"), std::string::npos) << all;
  EXPECT_NE(all.find("listening on 10.214.2.1 (interface tdmib1: NCCL_SOCKET_IFNAME=tdmib, as "
                     "TANDEM_SOCKET_IFNAME is unset)"),
            std::string::npos)
      << all;
  // The rest of the INFO report: transport per peer, algorithms per size range, layout.
  EXPECT_NE(all.find("shm to [1], tcp to [] (1 stream(s) each), listening on 10.214.2.1:"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("rank 0 of 2, local rank 0 of 2; shm to rank 1"), std::string::npos) << all;
  EXPECT_NE(all.find("allreduce: 0-32K recursive_doubling"), std::string::npos) << all;

  const auto gloo = run({"GLOO_SOCKET_IFNAME=^=tdmeth0,lo"});
  ASSERT_EQ(gloo.exit_code, 0) << gloo.err;
  EXPECT_NE((gloo.out + gloo.err)
                .find("listening on 10.214.2.1 (interface tdmib1: "
                      "GLOO_SOCKET_IFNAME=^=tdmeth0,lo"),
            std::string::npos)
      << gloo.out << gloo.err;

  // tandem's own wins over NCCL's, and NCCL's over Gloo's.
  const auto own = run({"TANDEM_SOCKET_IFNAME==tdmeth0", "NCCL_SOCKET_IFNAME=tdmib"});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_NE((own.out + own.err)
                .find("listening on 10.214.1.1 (interface tdmeth0: "
                      "TANDEM_SOCKET_IFNAME==tdmeth0)"),
            std::string::npos)
      << own.out << own.err;
  const auto both = run({"NCCL_SOCKET_IFNAME=tdmeth", "GLOO_SOCKET_IFNAME=tdmib"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_NE((both.out + both.err).find("listening on 10.214.1.1 (interface tdmeth0"),
            std::string::npos)
      << both.out << both.err;
}

TEST_F(TwoInterfaces, AnInterfaceThatIsNotThereIsNamedWithTheOnesThatAre) {
  const auto r = run({"NCCL_SOCKET_IFNAME=eth"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE((r.out + r.err)
                .find("NCCL_SOCKET_IFNAME=eth: no interface with an IPv4 address "
                      "matches; this host has: lo, tdmeth0, tdmib1"),
            std::string::npos)
      << r.out << r.err;
}

}  // namespace
}  // namespace tandem::testing
