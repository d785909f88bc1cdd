// What the UCX transport puts on the wire and in the store: the tag layout (sender rank and
// tandem's tag), worker addresses as bounded hex, and the transports/devices summary of
// an endpoint taken from UCX's own description of it.

#include "transport/ucx/wire.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tandem::transport::ucx {
namespace {

TEST(UcxWire, TagsCarryTheSenderInTheHighHalfAndTandemsTagInTheLow) {
  EXPECT_EQ(make_tag(0, 0), 0u);
  EXPECT_EQ(make_tag(1, 0), std::uint64_t{1} << 32);
  EXPECT_EQ(make_tag(3, 0xdeadbeef), (std::uint64_t{3} << 32) | 0xdeadbeef);
  EXPECT_EQ(tandem_tag(make_tag(3, 0xdeadbeef)), 0xdeadbeefu);
  // The receive's mask sees the sender only: every tandem tag of rank 2 matches rank 2's.
  EXPECT_EQ(make_tag(2, 0xffffffff) & kRankMask, make_tag(2, 0));
  EXPECT_NE(make_tag(1, 5) & kRankMask, make_tag(2, 5) & kRankMask);
  EXPECT_EQ(make_tag(1 << 20, 1) >> 32, std::uint64_t{1} << 20);
}

TEST(UcxWire, AddressesRoundTripThroughBoundedHex) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  const std::string hex = to_hex(bytes);
  EXPECT_EQ(hex.size(), 512u);
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(from_hex(hex), bytes);
  EXPECT_EQ(from_hex(""), std::string());
  EXPECT_FALSE(from_hex("abc"));  // odd length
  EXPECT_FALSE(from_hex("0g"));   // not hex
  EXPECT_FALSE(from_hex("0A"));   // upper case is not what to_hex writes
  EXPECT_FALSE(from_hex(std::string(2 * kMaxAddressBytes + 2, '0')));  // too long
  EXPECT_TRUE(from_hex(std::string(2 * kMaxAddressBytes, '0')));
}

TEST(UcxWire, LanesAreSummarisedFromUcxsEndpointDescription) {
  // As ucp_ep_print_info() writes it (UCX 1.13).
  const std::string tcp =
      "#\n# UCP endpoint \n#\n#               peer: <no debug data>\n"
      "#                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] "
      "rma_bw#0 am am_bw#0\n"
      "#                 lane[1]:  1:tcp/eth0.0 md[0]              -> md[0]/tcp/sysdev[255] "
      "rma_bw#1 wireup\n"
      "#                 lane[2]:  1:tcp/eth0.0 md[0]              -> md[0]/tcp/sysdev[255] "
      "am_bw#1\n"
      "#\n#                tag_send: 0..<egr/short>..8185..<egr/zcopy>..8192..<rndv>..(inf)\n";
  EXPECT_EQ(summarize_lanes(tcp), "tcp/lo, tcp/eth0");
  const std::string shm =
      "#                 lane[0]:  0:self/memory0.0 md[0]          -> md[0]/self/sysdev[255] am\n"
      "#                 lane[1]:  5:cma/memory.0 md[4]            -> md[4]/cma/sysdev[255] "
      "rma_bw#0\n";
  EXPECT_EQ(summarize_lanes(shm), "self/memory0, cma/memory");
  EXPECT_EQ(summarize_lanes("#\n# UCP endpoint\n#\n"), "");
}

}  // namespace
}  // namespace tandem::transport::ucx
