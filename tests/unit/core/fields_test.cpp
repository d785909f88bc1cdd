// core::field_count, on which the call memo's check that it handles every CallOptions field
// (comm/communicator.cpp) rests: it must count every kind of member CallOptions may get, so
// that a field added there changes the count.

#include "core/fields.hpp"

#include <tandem/types.hpp>

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::core {
namespace {

struct Empty {};
struct One {
  int a = 7;
};
struct Mixed {
  std::optional<Deadline> deadline;
  std::string_view name;
  void* handle = nullptr;
  std::string text;
  std::vector<int> list;
  std::map<int, int> table;
  std::shared_ptr<int> shared;
  bool flag = false;
};
// tandem::CallOptions's fields (communicator.hpp), and the same with one more, as a change to
// it would add one.
struct CallOptionsNow {
  std::optional<Deadline> deadline;
  std::string_view algorithm;
  void* stream = nullptr;
};
struct CallOptionsPlusOne {
  std::optional<Deadline> deadline;
  std::string_view algorithm;
  void* stream = nullptr;
  int priority = 0;
};

TEST(FieldCount, CountsEveryKindOfMember) {
  EXPECT_EQ(field_count<Empty>(), 0u);
  EXPECT_EQ(field_count<One>(), 1u);
  EXPECT_EQ(field_count<Mixed>(), 8u);
}

TEST(FieldCount, SeesAFieldAddedToCallOptions) {
  EXPECT_EQ(field_count<CallOptionsNow>(), 3u);
  EXPECT_EQ(field_count<CallOptionsPlusOne>(), 4u);
}

}  // namespace
}  // namespace tandem::core
