// Names of the core vocabulary (round trips, aliases) and the Error type's formatting.

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <gtest/gtest.h>

#include <string>

namespace tandem {
namespace {

TEST(Types, DataTypeNamesRoundTrip) {
  for (DataType t : kAllDataTypes) {
    const auto name = to_string(t);
    EXPECT_NE(name, "unknown");
    EXPECT_EQ(parse_dtype(name), t) << name;
  }
  EXPECT_EQ(to_string(DataType::bf16), "bf16");
  EXPECT_EQ(parse_dtype("float"), DataType::f32);
  EXPECT_EQ(parse_dtype("FLOAT32"), DataType::f32);
  EXPECT_EQ(parse_dtype("double"), DataType::f64);
  EXPECT_EQ(parse_dtype("half"), DataType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DataType::bf16);
  EXPECT_EQ(parse_dtype("int8"), DataType::i8);
  EXPECT_EQ(parse_dtype("uint8"), DataType::u8);
  EXPECT_EQ(parse_dtype("int32"), DataType::i32);
  EXPECT_EQ(parse_dtype("int64"), DataType::i64);
  EXPECT_EQ(parse_dtype("f128"), std::nullopt);
  EXPECT_EQ(parse_dtype(""), std::nullopt);
}

TEST(Types, ReduceOpNamesRoundTrip) {
  for (ReduceOp op : kAllReduceOps) EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  EXPECT_EQ(to_string(ReduceOp::avg), "avg");
  EXPECT_EQ(parse_reduce_op("SUM"), ReduceOp::sum);
  EXPECT_EQ(parse_reduce_op("xor"), std::nullopt);
}

TEST(Types, CollectiveNamesRoundTrip) {
  for (int k = 0; k <= static_cast<int>(CollectiveKind::barrier); ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    EXPECT_NE(to_string(kind), "unknown");
    EXPECT_EQ(parse_collective(to_string(kind)), kind) << to_string(kind);
  }
  EXPECT_EQ(to_string(CollectiveKind::reduce_scatter), "reduce_scatter");
  EXPECT_EQ(parse_collective("allgatherv"), CollectiveKind::allgatherv);
  EXPECT_EQ(parse_collective("allreduce_please"), std::nullopt);
}

TEST(Types, DeviceNames) {
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  EXPECT_NE(Device::cpu(), Device::cuda(0));
}

TEST(Types, BufferViewSlices) {
  float data[8] = {};
  const auto v = BufferView::of(std::span<float>(data));
  EXPECT_EQ(v.bytes(), sizeof data);
  const auto s = v.slice(2, 3);
  EXPECT_EQ(s.data, data + 2);
  EXPECT_EQ(s.count, 3u);
  EXPECT_EQ(s.dtype, DataType::f32);
}

TEST(Error, WhatCarriesTheCodeAndWhereTheBasename) {
  const Error e(ErrorCode::PeerLost, "rank 3 closed its connection", "/a/b/src/comm/group.cpp", 42);
  EXPECT_STREQ(e.what(), "[PeerLost] rank 3 closed its connection");
  EXPECT_EQ(e.message(), "rank 3 closed its connection");
  EXPECT_EQ(e.where(), "group.cpp:42");
  EXPECT_EQ(e.code(), ErrorCode::PeerLost);
  const Error bare(ErrorCode::Io, "disk full");
  EXPECT_EQ(bare.where(), "");
}

TEST(Error, ThrowMacrosFormatAndTag) {
  try {
    TANDEM_THROW(ErrorCode::Timeout, "allreduce #{} waited {} s", 7, 600);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_STREQ(e.what(), "[Timeout] allreduce #7 waited 600 s");
    EXPECT_TRUE(e.where().starts_with("types_error_test.cpp:")) << e.where();
  }
  try {
    TANDEM_CHECK(1 + 1 == 3, "math is {}", "broken");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Internal);
    EXPECT_EQ(e.message(), "check failed: 1 + 1 == 3: math is broken");
  }
  EXPECT_THROW(TANDEM_CHECK_ARG(false, "bad {}", 1), Error);
  EXPECT_NO_THROW(TANDEM_CHECK(true, "fine"));
}

TEST(Error, CodeNames) {
  EXPECT_EQ(to_string(ErrorCode::Timeout), "Timeout");
  EXPECT_EQ(to_string(ErrorCode::PeerLost), "PeerLost");
  EXPECT_EQ(to_string(ErrorCode::InvalidArgument), "InvalidArgument");
  EXPECT_EQ(to_string(ErrorCode::Mismatch), "Mismatch");
  EXPECT_EQ(to_string(ErrorCode::Aborted), "Aborted");
  EXPECT_EQ(to_string(ErrorCode::Io), "Io");
  EXPECT_EQ(to_string(ErrorCode::Unauthenticated), "Unauthenticated");
  EXPECT_EQ(to_string(ErrorCode::Internal), "Internal");
}

}  // namespace
}  // namespace tandem
