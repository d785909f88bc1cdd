// parse_hello: how much of a HELLO to read next, as the handshake reads it from a socket.

#include "transport/tcp/wire.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <string>

namespace tandem::transport::tcp {
namespace {

std::span<const std::byte> bytes_of(const std::string& s, std::size_t n) {
  return std::as_bytes(std::span(s.data(), n));
}

TEST(HelloParse, AsksForTheHeadThenTheTokenThenIsComplete) {
  const std::string hello = encode_hello(0, 1, 4, 2, "secret");
  ASSERT_EQ(hello.size(), sizeof(HelloHead) + 6);
  EXPECT_EQ(parse_hello(bytes_of(hello, 0)).need, sizeof(HelloHead));
  EXPECT_EQ(parse_hello(bytes_of(hello, 10)).need, sizeof(HelloHead) - 10);
  auto head_only = parse_hello(bytes_of(hello, sizeof(HelloHead)));
  EXPECT_TRUE(head_only.have_head);
  EXPECT_EQ(head_only.need, 6u);
  auto full = parse_hello(bytes_of(hello, hello.size()));
  EXPECT_EQ(full.need, 0u);
  EXPECT_EQ(full.token, "secret");
  EXPECT_EQ(full.head.purpose, 2);
  EXPECT_EQ(check_hello(full.head, full.token, 1, 4, "secret"), "");
}

TEST(HelloParse, StopsReadingAtAForeignOrOversizedHead) {
  std::string junk(sizeof(HelloHead), 'x');
  auto p = parse_hello(bytes_of(junk, junk.size()));
  EXPECT_EQ(p.need, 0u) << "a stranger's bytes: nothing more is read";
  EXPECT_NE(check_hello(p.head, p.token, 1, 4, ""), "");

  std::string big = encode_hello(0, 1, 4, 0, "");
  const std::uint32_t huge = kMaxTokenBytes + 1;
  std::memcpy(big.data() + offsetof(HelloHead, token_bytes), &huge, sizeof huge);
  p = parse_hello(bytes_of(big, big.size()));
  EXPECT_EQ(p.need, 0u) << "an oversized token is refused before it is read";
  EXPECT_NE(check_hello(p.head, p.token, 1, 4, ""), "");
}

}  // namespace
}  // namespace tandem::transport::tcp
