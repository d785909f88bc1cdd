#include "store/protocol.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace tandem::store::proto {
namespace {

using namespace std::string_literals;
using Status = DecodeResult::Status;

std::span<const std::byte> as_span(const std::string& s) {
  return std::as_bytes(std::span(s));
}

Message make(Type t) {
  Message m;
  m.type = t;
  return m;
}

// One valid message of every type, with awkward contents (NUL bytes, empty strings).
std::vector<Message> samples() {
  std::vector<Message> v;
  auto hello = make(Type::hello);
  hello.number = kVersion;
  hello.value = "tok\0en"s;
  v.push_back(hello);
  auto set = make(Type::set);
  set.keys = {"k\0ey"s};
  set.value = std::string("\0\1\2\xff", 4);
  v.push_back(set);
  auto set_empty = make(Type::set);
  set_empty.keys = {""};
  v.push_back(set_empty);
  auto get = make(Type::get);
  get.keys = {"key"};
  get.number = -1;
  v.push_back(get);
  auto add = make(Type::add);
  add.keys = {"ctr"};
  add.number = INT64_MIN;
  v.push_back(add);
  auto cas = make(Type::compare_set);
  cas.keys = {"c"};
  cas.value = "";
  cas.value2 = "new";
  v.push_back(cas);
  auto wait = make(Type::wait);
  wait.number = 1234;
  wait.keys = {"a", "", "c\0"s};
  v.push_back(wait);
  auto wait_none = make(Type::wait);
  v.push_back(wait_none);
  auto multi_get = make(Type::multi_get);
  multi_get.number = -1;
  multi_get.keys = {"addr/0", "", "addr/2\0"s};
  v.push_back(multi_get);
  auto or_stop = make(Type::multi_get_or_stop);
  or_stop.number = 250;
  or_stop.value = "tandem/r0/world/lost";
  or_stop.keys = {"addr/1", "addr/all", ""};
  v.push_back(or_stop);
  auto or_stop_empty = make(Type::multi_get_or_stop);
  v.push_back(or_stop_empty);
  auto values = make(Type::values);
  values.keys = {std::string(5000, 'v'), "", "x\0y"s};
  v.push_back(values);
  auto check = make(Type::check);
  check.keys = {"x", "y"};
  v.push_back(check);
  auto del = make(Type::delete_key);
  del.keys = {"gone"};
  v.push_back(del);
  auto num = make(Type::num_keys);
  num.value = "prefix/";
  v.push_back(num);
  v.push_back(make(Type::ok));
  auto value = make(Type::value);
  value.value = std::string(1000, '\0');
  v.push_back(value);
  auto integer = make(Type::integer);
  integer.number = INT64_MAX;
  v.push_back(integer);
  auto boolean = make(Type::boolean);
  boolean.number = 1;
  v.push_back(boolean);
  auto timeout = make(Type::timeout);
  timeout.keys = {"missing1", "missing2"};
  v.push_back(timeout);
  auto error = make(Type::error);
  error.number = 6;
  error.value = "authentication failed";
  v.push_back(error);
  return v;
}

TEST(StoreProtocol, RoundTripsEveryType) {
  const Limits limits;
  for (const auto& m : samples()) {
    const std::string bytes = encode(m);
    auto res = decode_frame(as_span(bytes), limits);
    ASSERT_EQ(res.status, Status::ok)
        << type_name(static_cast<std::uint8_t>(m.type)) << ": " << res.error;
    EXPECT_EQ(res.consumed, bytes.size());
    EXPECT_EQ(res.message, m) << type_name(static_cast<std::uint8_t>(m.type));
  }
}

TEST(StoreProtocol, HeaderLayoutIsLittleEndian) {
  auto m = make(Type::set);
  m.keys = {"k"};
  m.value = "v";
  const std::string b = encode(m);
  ASSERT_EQ(b.size(), kHeaderBytes + 4 + 1 + 4 + 1);
  EXPECT_EQ(static_cast<unsigned char>(b[0]), 0x54);  // 'T'
  EXPECT_EQ(static_cast<unsigned char>(b[3]), 0x53);  // 'S'
  EXPECT_EQ(b[4], static_cast<char>(kVersion));
  EXPECT_EQ(b[5], static_cast<char>(Type::set));
  EXPECT_EQ(b[6], 0);
  EXPECT_EQ(b[7], 0);
  EXPECT_EQ(static_cast<unsigned char>(b[8]), 10);
  EXPECT_EQ(b[9], 0);
}

TEST(StoreProtocol, EveryProperPrefixNeedsMore) {
  const Limits limits;
  for (const auto& m : samples()) {
    const std::string bytes = encode(m);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      auto res = decode_frame(as_span(bytes).first(n), limits);
      EXPECT_EQ(res.status, Status::need_more) << "prefix " << n << " of " << bytes.size();
    }
  }
}

TEST(StoreProtocol, DecodesOnlyTheFirstFrameOfAStream) {
  auto a = make(Type::ok);
  auto b = make(Type::integer);
  b.number = 7;
  const std::string stream = encode(a) + encode(b);
  auto res = decode_frame(as_span(stream), Limits{});
  ASSERT_EQ(res.status, Status::ok);
  EXPECT_EQ(res.consumed, kHeaderBytes);
  auto second = decode_frame(as_span(stream).subspan(res.consumed), Limits{});
  ASSERT_EQ(second.status, Status::ok);
  EXPECT_EQ(second.message.number, 7);
}

std::string with_header(std::uint32_t magic, std::uint8_t version, std::uint8_t type,
                        std::uint16_t reserved, std::uint32_t len) {
  std::string h(kHeaderBytes, '\0');
  std::memcpy(h.data(), &magic, 4);
  h[4] = static_cast<char>(version);
  h[5] = static_cast<char>(type);
  std::memcpy(h.data() + 6, &reserved, 2);
  std::memcpy(h.data() + 8, &len, 4);
  return h;
}

TEST(StoreProtocol, RejectsBadHeadersAsSoonAsTheHeaderIsIn) {
  const Limits limits;
  struct Case {
    std::string bytes;
    std::string reason;
  };
  const Case cases[] = {
      {with_header(0xdeadbeef, kVersion, 2, 0, 0), "magic"},
      {"GET / HTTP/1.1\r\n", "magic"},
      {with_header(kMagic, kVersion + 1, 2, 0, 0), "version"},
      {with_header(kMagic, kVersion - 1, 2, 0, 0), "version"},
      {with_header(kMagic, 0, 2, 0, 0), "version"},
      {with_header(kMagic, kVersion, 0, 0, 0), "unknown frame type"},
      {with_header(kMagic, kVersion, 13, 0, 0), "unknown frame type"},
      {with_header(kMagic, kVersion, 71, 0, 0), "unknown frame type"},
      {with_header(kMagic, kVersion, 200, 0, 0), "unknown frame type"},
      {with_header(kMagic, kVersion, 2, 1, 0), "reserved"},
      {with_header(kMagic, kVersion, 2, 0, 0xffffffffu), "exceeds the limit"},
  };
  for (const auto& c : cases) {
    auto res = decode_frame(as_span(c.bytes), limits);
    ASSERT_EQ(res.status, Status::bad) << c.reason;
    EXPECT_NE(res.error.find(c.reason), std::string::npos) << res.error;
  }
}

TEST(StoreProtocol, RejectsMalformedPayloads) {
  Limits limits;
  limits.max_value_bytes = 100;
  limits.max_key_bytes = 10;
  limits.max_keys = 3;
  auto payload_case = [&](Type t, std::string payload) {
    std::string f = with_header(kMagic, kVersion, static_cast<std::uint8_t>(t), 0,
                                static_cast<std::uint32_t>(payload.size())) +
                    payload;
    return decode_frame(as_span(f), limits);
  };
  auto u32 = [](std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto i64 = [](std::int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };

  // Key longer than the limit, value longer than the limit, length past the end.
  EXPECT_EQ(payload_case(Type::set, u32(11) + std::string(11, 'k') + u32(0)).status, Status::bad);
  EXPECT_EQ(payload_case(Type::set, u32(1) + "k" + u32(101) + std::string(101, 'v')).status,
            Status::bad);
  auto past = payload_case(Type::set, u32(1) + "k" + u32(50) + "short");
  EXPECT_EQ(past.status, Status::bad);
  EXPECT_NE(past.error.find("past the end"), std::string::npos) << past.error;
  // Missing fields, trailing bytes.
  EXPECT_EQ(payload_case(Type::get, u32(1) + "k").status, Status::bad);
  EXPECT_EQ(payload_case(Type::ok, "x").status, Status::bad);
  EXPECT_EQ(payload_case(Type::delete_key, u32(1) + "k" + "extra").status, Status::bad);
  // Key counts: over the limit, and more than the bytes could hold.
  EXPECT_EQ(payload_case(Type::check, u32(4) + u32(0) + u32(0) + u32(0) + u32(0)).status,
            Status::bad);
  auto huge = payload_case(Type::wait, i64(0) + u32(0xffffffffu));
  EXPECT_EQ(huge.status, Status::bad);
  auto claims = payload_case(Type::check, u32(3) + u32(0));
  EXPECT_EQ(claims.status, Status::bad);
  // VALUES: a value longer than max_value_bytes, more values than max_keys.
  EXPECT_EQ(payload_case(Type::values, u32(1) + u32(101) + std::string(101, 'v')).status,
            Status::bad);
  EXPECT_EQ(payload_case(Type::values, u32(1) + u32(100) + std::string(100, 'v')).status,
            Status::ok);
  EXPECT_EQ(payload_case(Type::values, u32(4) + u32(0) + u32(0) + u32(0) + u32(0)).status,
            Status::bad);
  // MULTI_GET_OR_STOP: its stop key is held to the key limit, not the value limit.
  EXPECT_EQ(payload_case(Type::multi_get_or_stop, i64(0) + u32(11) + std::string(11, 's') + u32(0))
                .status,
            Status::bad);
  EXPECT_EQ(payload_case(Type::multi_get_or_stop,
                         i64(-1) + u32(10) + std::string(10, 's') + u32(1) + u32(1) + "k")
                .status,
            Status::ok);
  // BOOLEAN must be 0 or 1.
  EXPECT_EQ(payload_case(Type::boolean, i64(2)).status, Status::bad);
  // And a well-formed one passes with these limits.
  EXPECT_EQ(
      payload_case(Type::check, u32(3) + u32(0) + u32(1) + "a" + u32(10) + std::string(10, 'z'))
          .status,
      Status::ok);
}

TEST(StoreProtocol, PayloadLimitCoversTheLargestLegalFrames) {
  Limits limits;
  limits.max_value_bytes = 1000;
  limits.max_key_bytes = 16;
  limits.max_keys = 8;
  auto cas = make(Type::compare_set);
  cas.keys = {std::string(16, 'k')};
  cas.value = std::string(1000, 'e');
  cas.value2 = std::string(1000, 'd');
  EXPECT_EQ(decode_frame(as_span(encode(cas)), limits).status, Status::ok);
  auto wait = make(Type::wait);
  wait.keys.assign(8, std::string(16, 'w'));
  EXPECT_EQ(decode_frame(as_span(encode(wait)), limits).status, Status::ok);
  auto or_stop = make(Type::multi_get_or_stop);
  or_stop.value = std::string(16, 's');
  or_stop.keys.assign(8, std::string(16, 'w'));
  EXPECT_EQ(decode_frame(as_span(encode(or_stop)), limits).status, Status::ok);
  auto big = make(Type::set);
  big.keys = {"k"};
  big.value = std::string(1001, 'v');
  EXPECT_EQ(decode_frame(as_span(encode(big)), limits).status, Status::bad);
}

TEST(StoreProtocol, TypeNames) {
  EXPECT_EQ(type_name(static_cast<std::uint8_t>(Type::wait)), "WAIT");
  EXPECT_EQ(type_name(200), "type 200");
  EXPECT_TRUE(is_request(Type::num_keys));
  EXPECT_TRUE(is_request(Type::multi_get));
  EXPECT_TRUE(is_request(Type::multi_get_or_stop));
  EXPECT_EQ(type_name(static_cast<std::uint8_t>(Type::multi_get_or_stop)), "MULTI_GET_OR_STOP");
  EXPECT_FALSE(is_request(Type::values));
  EXPECT_EQ(type_name(static_cast<std::uint8_t>(Type::values)), "VALUES");
  EXPECT_FALSE(is_request(Type::ok));
}

// Mutations of valid frames: flipped bytes, truncations, overwritten length fields and
// appended garbage. Decoding must never crash or read out of bounds (run under ASan to
// see the latter) and must classify each input as ok, need_more or bad consistently.
TEST(StoreProtocol, MutatedFramesNeverCrash) {
  std::mt19937_64 rng(12345);
  Limits limits;
  limits.max_value_bytes = 4096;
  const auto base = samples();
  std::size_t counts[3] = {};
  for (int iter = 0; iter < 20000; ++iter) {
    std::string f = encode(base[rng() % base.size()]);
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < mutations; ++k) {
      switch (rng() % 5) {
        case 0:
          if (!f.empty()) f[rng() % f.size()] = static_cast<char>(rng());
          break;
        case 1:
          if (!f.empty()) f.resize(rng() % f.size());
          break;
        case 2:
          if (f.size() >= kHeaderBytes + 4) {
            const auto pos = rng() % (f.size() - 3);
            const std::uint32_t v = static_cast<std::uint32_t>(rng());
            std::memcpy(f.data() + pos, &v, 4);
          }
          break;
        case 3:
          for (int j = rng() % 16; j > 0; --j) f.push_back(static_cast<char>(rng()));
          break;
        default:
          if (f.size() > kHeaderBytes) f[kHeaderBytes + rng() % (f.size() - kHeaderBytes)] ^= 0x80;
      }
    }
    // Decode from an exactly sized heap copy so an overread would hit the allocation edge.
    auto copy = std::make_unique<std::byte[]>(f.size() + 1);
    std::memcpy(copy.get(), f.data(), f.size());
    auto res = decode_frame(std::span<const std::byte>(copy.get(), f.size()), limits);
    ++counts[static_cast<int>(res.status)];
    if (res.status == Status::ok) {
      EXPECT_LE(res.consumed, f.size());
      // A decoded frame re-encodes to the same bytes.
      EXPECT_EQ(encode(res.message), f.substr(0, res.consumed));
    }
    if (res.status == Status::bad) {
      EXPECT_FALSE(res.error.empty());
    }
  }
  // The mutations reach every outcome.
  EXPECT_GT(counts[0], 0u);
  EXPECT_GT(counts[1], 0u);
  EXPECT_GT(counts[2], 0u);
}

TEST(StoreProtocol, RandomBytesNeverCrash) {
  std::mt19937_64 rng(777);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string f(rng() % 64, '\0');
    for (auto& c : f) c = static_cast<char>(rng());
    if (iter % 2 == 0 && f.size() >= 6) {  // a plausible header makes the payload decoder run
      const std::uint32_t magic = kMagic;
      std::memcpy(f.data(), &magic, 4);
      f[4] = static_cast<char>(kVersion);
      if (f.size() >= 12) {
        f[6] = f[7] = 0;
        const auto len = static_cast<std::uint32_t>(f.size() - 12);
        std::memcpy(f.data() + 8, &len, 4);
      }
    }
    auto res = decode_frame(as_span(f), Limits{});
    if (res.status == Status::ok) {
      EXPECT_LE(res.consumed, f.size());
    }
  }
}

}  // namespace
}  // namespace tandem::store::proto
