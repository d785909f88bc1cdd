// The interface lists of TANDEM_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME, in
// NCCL's syntax: prefixes, '^' to exclude, '=' for exact names.

#include "transport/tcp/wire.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

namespace tandem::transport::tcp {
namespace {

TEST(IfnameFilter, PrefixesExclusionAndExactNames) {
  const IfnameFilter eth = parse_ifname_filter("eth,ib", "NCCL_SOCKET_IFNAME");
  EXPECT_TRUE(eth.matches("eth0"));
  EXPECT_TRUE(eth.matches("eth10"));
  EXPECT_TRUE(eth.matches("ib1"));
  EXPECT_FALSE(eth.matches("lo"));
  EXPECT_FALSE(eth.matches("et"));

  const IfnameFilter no_docker = parse_ifname_filter("^docker,lo", "NCCL_SOCKET_IFNAME");
  EXPECT_FALSE(no_docker.matches("docker0"));
  EXPECT_FALSE(no_docker.matches("lo"));
  EXPECT_TRUE(no_docker.matches("eth0"));

  const IfnameFilter exact = parse_ifname_filter("=eth0", "GLOO_SOCKET_IFNAME");
  EXPECT_TRUE(exact.matches("eth0"));
  EXPECT_FALSE(exact.matches("eth01"));

  const IfnameFilter not_exact = parse_ifname_filter("^=eth0,lo", "TANDEM_SOCKET_IFNAME");
  EXPECT_FALSE(not_exact.matches("eth0"));
  EXPECT_TRUE(not_exact.matches("eth01"));
  EXPECT_FALSE(not_exact.matches("lo"));
  EXPECT_TRUE(not_exact.matches("lo0"));
}

TEST(IfnameFilter, EmptyEntriesAreRefusedNamingTheVariable) {
  for (const char* bad : {"", "^", "=", "eth,", ",eth", "eth,,ib"}) {
    try {
      (void)parse_ifname_filter(bad, "NCCL_SOCKET_IFNAME");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(e.message().find("NCCL_SOCKET_IFNAME="), std::string::npos) << e.message();
    }
  }
}

TEST(IfnameFilter, LoopbackIsFoundAndAMissingInterfaceListsTheOthers) {
  std::string chosen;
  EXPECT_EQ(interface_address("=lo", "TANDEM_SOCKET_IFNAME", &chosen), "127.0.0.1");
  EXPECT_EQ(chosen, "lo");
  try {
    (void)interface_address("nosuch", "GLOO_SOCKET_IFNAME");
    ADD_FAILURE() << "found an interface named nosuch";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("GLOO_SOCKET_IFNAME=nosuch"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("lo"), std::string::npos) << "lists the interfaces";
  }
}

}  // namespace
}  // namespace tandem::transport::tcp
