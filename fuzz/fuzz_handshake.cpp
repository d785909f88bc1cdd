// What a connecting peer sends before any data: the tcp HELLO (head, then token), read and
// checked as Context::connect_all does, and the address record every rank publishes through
// the store (decode_record). The first byte picks who this rank is (rank, world size, token)
// so that the checks behind the magic are reached too.

#include "transport/bootstrap.hpp"
#include "transport/tcp/wire.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

namespace {

using namespace tandem::transport;

void hello(std::span<const std::byte> bytes, int self, int world, std::string_view token) {
  // The bytes arrive in pieces: parse after every one, reading only what is asked for.
  std::size_t have = 0;
  tcp::HelloParse p = tcp::parse_hello(bytes.first(0));
  while (p.need != 0) {
    if (have + p.need > bytes.size()) return;  // the peer stops sending (EOF or timeout)
    have += std::min<std::size_t>(p.need, 7);
    p = tcp::parse_hello(bytes.first(have));
  }
  if (!p.have_head) std::abort();
  const std::string why = tcp::check_hello(p.head, p.token, self, world, token);
  // An accepted HELLO is exactly what encode_hello makes for those fields.
  if (why.empty() &&
      tcp::encode_hello(p.head.from, p.head.to, p.head.world, p.head.purpose, p.token) !=
          std::string_view(reinterpret_cast<const char*>(bytes.data()), have))
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t who = data[0];
  const int world = 2 + (who & 7);
  const int self = (who >> 3) % world;
  const std::string_view token = (who & 0x80) != 0 ? std::string_view("s3cret") : "";
  const auto bytes = std::as_bytes(std::span(data + 1, size - 1));
  hello(bytes, self, world, token);
  try {
    const RankRecord r = decode_record(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), self);
    // A record that decodes is what encode_record writes.
    if (decode_record(encode_record(r), self).address != r.address) std::abort();
  } catch (const tandem::Error&) {
    // Rejected, as it should be; anything else escapes and is reported.
  }
  return 0;
}
