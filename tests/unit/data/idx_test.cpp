// IDX parsing: good files (plain and gzip, every element type) and every corruption we could
// think of; each must fail with Error(Io) naming the file, never crash or over-allocate.

#include "files.hpp"

#include <tandem/data.hpp>
#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>

namespace tandem::data {
namespace {

using test::idx_bytes;
using test::TempDir;

std::vector<std::uint8_t> iota_bytes(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + 3);
  return v;
}

// Runs read_idx and returns the Error it threw (fails the test when it did not throw).
Error read_error(const std::filesystem::path& p, const IdxLimits& limits = {}) {
  try {
    read_idx(p, limits);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "read_idx(" << p << ") did not throw";
  return Error(ErrorCode::Internal, "no error");
}

void expect_io_error(const std::filesystem::path& p, const std::string& fragment,
                     const IdxLimits& limits = {}) {
  const Error e = read_error(p, limits);
  EXPECT_EQ(e.code(), ErrorCode::Io) << e.what();
  EXPECT_NE(e.message().find(p.string()), std::string::npos) << "names the file: " << e.what();
  EXPECT_NE(e.message().find(fragment), std::string::npos)
      << "expected '" << fragment << "' in: " << e.what();
}

class IdxBoth : public ::testing::TestWithParam<bool> {
 protected:
  // Writes `bytes` plain or gzip-compressed, as the parameter says.
  std::filesystem::path write(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    const auto p = dir_ / (name + (GetParam() ? ".gz" : ""));
    if (GetParam())
      test::write_gzip(p, bytes);
    else
      test::write_plain(p, bytes);
    return p;
  }
  TempDir dir_;
};

TEST_P(IdxBoth, ReadsU8ImagesAndLabels) {
  const auto payload = iota_bytes(5 * 4 * 3);
  const auto p = write("images", idx_bytes(0x08, {5, 4, 3}, payload));
  const IdxArray a = read_idx(p);
  EXPECT_EQ(a.type, IdxType::u8);
  EXPECT_EQ(a.dims, (std::vector<std::size_t>{5, 4, 3}));
  EXPECT_EQ(a.count(), 60u);
  EXPECT_EQ(a.bytes, payload);

  const std::vector<std::uint8_t> labels{9, 0, 3};
  const IdxArray l = read_idx(write("labels", idx_bytes(0x08, {3}, labels)));
  EXPECT_EQ(l.dims, (std::vector<std::size_t>{3}));
  EXPECT_EQ(l.bytes, labels);
}

TEST_P(IdxBoth, MultiByteElementsAreConvertedFromBigEndian) {
  // i32: 0x01020304 and -2; f32 1.5; i16 0x0102; f64 -0.25.
  const IdxArray i32 =
      read_idx(write("i32", idx_bytes(0x0C, {2}, {1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe})));
  ASSERT_EQ(i32.bytes.size(), 8u);
  std::int32_t v[2];
  std::memcpy(v, i32.bytes.data(), 8);
  EXPECT_EQ(v[0], 0x01020304);
  EXPECT_EQ(v[1], -2);

  const IdxArray f32 = read_idx(write("f32", idx_bytes(0x0D, {1}, {0x3f, 0xc0, 0, 0})));
  float f = 0;
  std::memcpy(&f, f32.bytes.data(), 4);
  EXPECT_EQ(f, 1.5f);

  const IdxArray i16 = read_idx(write("i16", idx_bytes(0x0B, {1, 1}, {1, 2})));
  std::int16_t h = 0;
  std::memcpy(&h, i16.bytes.data(), 2);
  EXPECT_EQ(h, 0x0102);

  const IdxArray f64 = read_idx(write("f64", idx_bytes(0x0E, {1}, {0xbf, 0xd0, 0, 0, 0, 0, 0, 0})));
  double d = 0;
  std::memcpy(&d, f64.bytes.data(), 8);
  EXPECT_EQ(d, -0.25);

  const IdxArray i8 = read_idx(write("i8", idx_bytes(0x09, {2}, {0x80, 0x7f})));
  EXPECT_EQ(i8.type, IdxType::i8);
  EXPECT_EQ(i8.bytes, (std::vector<std::uint8_t>{0x80, 0x7f}));
}

TEST_P(IdxBoth, ZeroSizedDimensionGivesAnEmptyArray) {
  const IdxArray a = read_idx(write("empty", idx_bytes(0x08, {0, 28, 28}, {})));
  EXPECT_EQ(a.dims, (std::vector<std::size_t>{0, 28, 28}));
  EXPECT_EQ(a.count(), 0u);
  EXPECT_TRUE(a.bytes.empty());
}

TEST_P(IdxBoth, BadMagic) {
  expect_io_error(write("magic", {0x1f, 0x00, 0x08, 0x01, 0, 0, 0, 1, 5}), "bad magic");
  expect_io_error(write("magic2", {0x00, 0x01, 0x08, 0x01, 0, 0, 0, 1, 5}), "bad magic");
}

TEST_P(IdxBoth, UnknownTypeCode) {
  for (std::uint8_t code : {0x00, 0x07, 0x0A, 0x0F, 0xFF})
    expect_io_error(write("type" + std::to_string(code), idx_bytes(code, {1}, {5})),
                    "unknown element type code");
}

TEST_P(IdxBoth, ZeroOrTooManyDimensions) {
  expect_io_error(write("ndim0", {0, 0, 0x08, 0}), "0 dimensions");
  std::vector<std::uint8_t> many{0, 0, 0x08, 255};
  many.resize(4 + 4 * 255, 0);
  expect_io_error(write("ndim255", many), "255 dimensions");
  // The limit is configurable.
  const auto p = write("ndim3", idx_bytes(0x08, {1, 1, 1}, {7}));
  IdxLimits two;
  two.max_ndim = 2;
  expect_io_error(p, "3 dimensions", two);
  EXPECT_EQ(read_idx(p).bytes, std::vector<std::uint8_t>{7});
}

TEST_P(IdxBoth, DimensionsWhoseProductOverflows) {
  // 2^32-1 to the fourth (and times 8 bytes) overflows 64 bits; must be rejected before
  // any allocation.
  expect_io_error(
      write("overflow", idx_bytes(0x0E, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {})),
      "more than the limit");
  expect_io_error(write("overflow2", idx_bytes(0x08, {0x10000u, 0x10000u, 0x10000u}, {})),
                  "more than the limit");
}

TEST_P(IdxBoth, HeaderClaimingMoreThanTheFileCanHold) {
  // 2 GiB under the 16 GiB limit, in a file of a few bytes: rejected before allocating.
  expect_io_error(write("huge", idx_bytes(0x08, {0x8000u, 0x10000u}, {1, 2, 3})),
                  "truncated or corrupt");
}

TEST_P(IdxBoth, TruncatedHeader) {
  expect_io_error(write("short", {0, 0}), "too short");
  expect_io_error(write("nodims", {0, 0, 0x08, 3, 0, 0, 0, 2, 0, 0}), "truncated header");
}

TEST_P(IdxBoth, TruncatedData) {
  auto bytes = idx_bytes(0x08, {10, 3}, iota_bytes(30));
  bytes.erase(bytes.end() - 10, bytes.end());  // not resize(): gcc's ASan build warns on it
  expect_io_error(write("trunc", bytes), "truncated");
  // One byte missing still counts.
  auto one = idx_bytes(0x08, {100, 100}, iota_bytes(10000));
  one.pop_back();
  expect_io_error(write("trunc1", one), "truncated");
}

TEST_P(IdxBoth, TrailingData) {
  auto bytes = idx_bytes(0x08, {4}, {1, 2, 3, 4});
  bytes.push_back(5);
  expect_io_error(write("trailing", bytes), "data continues");
}

INSTANTIATE_TEST_SUITE_P(PlainAndGzip, IdxBoth, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "gzip" : "plain"; });

TEST(Idx, MissingFileOrDirectory) {
  TempDir dir;
  expect_io_error(dir / "nope.gz", "no such file");
  expect_io_error(dir.path(), "not a regular file");
}

TEST(Idx, TruncatedGzipStream) {
  TempDir dir;
  const auto payload = iota_bytes(20000);
  const auto good = dir / "good.gz";
  test::write_gzip(good, idx_bytes(0x08, {200, 100}, payload));
  EXPECT_EQ(read_idx(good).bytes, payload);
  const auto all = test::read_all(good);
  ASSERT_GT(all.size(), 40u);
  // Cut at several places: inside the trailer (CRC/length), inside the deflate stream.
  for (std::size_t keep :
       {all.size() - 1, all.size() - 4, all.size() - 8, all.size() / 2, std::size_t{20}}) {
    const auto p = dir / ("cut" + std::to_string(keep) + ".gz");
    test::write_plain(
        p, std::vector<std::uint8_t>(all.begin(), all.begin() + static_cast<long>(keep)));
    const Error e = read_error(p);
    EXPECT_EQ(e.code(), ErrorCode::Io) << e.what();
    EXPECT_NE(e.message().find(p.string()), std::string::npos) << e.what();
  }
}

TEST(Idx, CorruptGzipStream) {
  TempDir dir;
  const auto good = dir / "good.gz";
  test::write_gzip(good, idx_bytes(0x08, {200, 100}, iota_bytes(20000)));
  auto all = test::read_all(good);
  // Flip bits in the CRC of the trailer, and in the compressed data.
  for (std::size_t at : {all.size() - 6, all.size() / 2}) {
    auto bad = all;
    bad[at] ^= 0x55;
    const auto p = dir / ("flip" + std::to_string(at) + ".gz");
    test::write_plain(p, bad);
    const Error e = read_error(p);
    EXPECT_EQ(e.code(), ErrorCode::Io) << e.what();
  }
}

TEST(Idx, GzipBombIsBoundedByTheLimit) {
  // 64 MiB of zeros compress to ~64 KiB; with a 1 MiB limit the reader refuses from the header.
  TempDir dir;
  const auto p = dir / "bomb.gz";
  test::write_gzip(p, idx_bytes(0x08, {64u << 20}, std::vector<std::uint8_t>(64u << 20, 0)));
  IdxLimits small;
  small.max_bytes = 1u << 20;
  expect_io_error(p, "more than the limit", small);
  EXPECT_EQ(read_idx(p).count(), 64u << 20);
}

TEST(Idx, ParsesFromMemoryLikeAFile) {
  TempDir dir;
  const auto bytes = idx_bytes(0x0B, {2, 2}, {0, 1, 0, 2, 1, 0, 0xff, 0xff});
  const auto p = dir / "a.gz";
  test::write_gzip(p, bytes);
  const auto from_file = read_idx(p);
  const auto gz = test::read_all(p);
  const auto from_gzip = parse_idx(std::as_bytes(std::span(gz)), {}, "mem.gz");
  const auto from_plain = parse_idx(std::as_bytes(std::span(bytes)));
  EXPECT_EQ(from_gzip.bytes, from_file.bytes);
  EXPECT_EQ(from_plain.bytes, from_file.bytes);
  EXPECT_EQ(from_plain.dims, (std::vector<std::size_t>{2, 2}));
}

TEST(Idx, GzipMembersOneAfterTheOtherAndGarbageAfterThem) {
  TempDir dir;
  const auto bytes = idx_bytes(0x08, {6}, {1, 2, 3, 4, 5, 6});
  test::write_gzip(dir / "a.gz", std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + 7));
  test::write_gzip(dir / "b.gz", std::vector<std::uint8_t>(bytes.begin() + 7, bytes.end()));
  auto two = test::read_all(dir / "a.gz");
  const auto b = test::read_all(dir / "b.gz");
  two.insert(two.end(), b.begin(), b.end());
  EXPECT_EQ(parse_idx(std::as_bytes(std::span(two))).bytes,
            (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
  two.push_back(0);
  try {
    parse_idx(std::as_bytes(std::span(two)), {}, "garbage.gz");
    ADD_FAILURE() << "garbage after the gzip stream was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(e.message().find("garbage.gz"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::data
