// The behaviour every Store promises, checked on each implementation.

#include "store_test_util.hpp"

#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace tandem::store::test {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;
using namespace std::string_view_literals;

// One store under test; client() gives a handle for one thread (a new connection where the
// store has them, so that threads also exercise the store's own concurrency).
class Env {
 public:
  virtual ~Env() = default;
  virtual std::shared_ptr<Store> client() = 0;
};

class HashEnv : public Env {
 public:
  std::shared_ptr<Store> client() override { return store_; }

 private:
  std::shared_ptr<Store> store_ = std::make_shared<HashStore>();
};

class TcpEnv : public Env {
 public:
  TcpEnv() : server_(options()) {}
  std::shared_ptr<Store> client() override {
    TcpStoreOptions o;
    o.token = "contract-token";
    o.connect_timeout = 10s;
    return std::make_shared<TcpStore>("127.0.0.1", server_.port(), o);
  }

 private:
  static TcpStoreServerOptions options() {
    TcpStoreServerOptions o;
    o.token = "contract-token";
    return o;
  }
  TcpStoreServer server_;
};

class FileEnv : public Env {
 public:
  std::shared_ptr<Store> client() override {
    return std::make_shared<FileStore>(dir_.file("store"));
  }

 private:
  TempDir dir_;
};

// A PrefixStore over another store, with a neighbour prefix writing into the same base so
// that any leak across prefixes shows up.
class PrefixEnv : public Env {
 public:
  explicit PrefixEnv(std::unique_ptr<Env> base) : base_(std::move(base)) {
    auto other = std::make_shared<PrefixStore>("other", base_->client());
    other->set("k", "not yours");
    other->set("shared", "not yours");
    other->add("n", 5);
  }
  std::shared_ptr<Store> client() override {
    return std::make_shared<PrefixStore>("job/round1", base_->client());
  }

 private:
  std::unique_ptr<Env> base_;
};

std::unique_ptr<Env> make_env(const std::string& kind) {
  if (kind == "hash") return std::make_unique<HashEnv>();
  if (kind == "tcp") return std::make_unique<TcpEnv>();
  if (kind == "file") return std::make_unique<FileEnv>();
  if (kind == "prefix_hash") return std::make_unique<PrefixEnv>(std::make_unique<HashEnv>());
  if (kind == "prefix_tcp") return std::make_unique<PrefixEnv>(std::make_unique<TcpEnv>());
  if (kind == "prefix_file") return std::make_unique<PrefixEnv>(std::make_unique<FileEnv>());
  throw std::runtime_error("unknown store kind " + kind);
}

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    env_ = make_env(GetParam());
    store_ = env_->client();
  }
  std::unique_ptr<Env> env_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreContract, SetThenGet) {
  store_->set("a", "1");
  EXPECT_EQ(store_->get("a"), "1");
  store_->set("a", "two");
  EXPECT_EQ(store_->get("a"), "two");
  // Another handle sees it too.
  EXPECT_EQ(env_->client()->get("a"), "two");
}

TEST_P(StoreContract, BinaryAndEmptyValues) {
  const std::string binary = "\0a\0\xff\x01"s;
  store_->set("bin", binary);
  store_->set("empty", "");
  store_->set(""s, "empty key");
  store_->set("k\0ey"s, "nul in key");
  EXPECT_EQ(store_->get("bin"), binary);
  EXPECT_EQ(store_->get("empty"), "");
  EXPECT_EQ(store_->get(""), "empty key");
  EXPECT_EQ(store_->get("k\0ey"s), "nul in key");
  EXPECT_FALSE(store_->check(std::vector<std::string>{"k"}));  // "k\0ey" is not "k"
}

TEST_P(StoreContract, LargeValue) {
  std::string big(4 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  store_->set("big", big);
  EXPECT_EQ(store_->get("big"), big);
}

TEST_P(StoreContract, GetOfAbsentKeyTimesOutNamingIt) {
  store_->set("present", "x");
  const auto start = Clock::now();
  const auto msg =
      expect_error(ErrorCode::Timeout, [&] { store_->get("absent-key", deadline_in(100ms)); });
  EXPECT_TRUE(contains(msg, "absent-key")) << msg;
  EXPECT_LT(Clock::now() - start, 10s);
}

TEST_P(StoreContract, WaitTimesOutNamingOnlyMissingKeys) {
  store_->set("here", "1");
  const std::vector<std::string> keys = {"here", "missing-one", "missing-two"};
  const auto start = Clock::now();
  const auto msg =
      expect_error(ErrorCode::Timeout, [&] { store_->wait(keys, deadline_in(150ms)); });
  EXPECT_TRUE(contains(msg, "missing-one")) << msg;
  EXPECT_TRUE(contains(msg, "missing-two")) << msg;
  EXPECT_FALSE(contains(msg, "'here'")) << msg;
  EXPECT_GE(Clock::now() - start, 150ms);
  EXPECT_LT(Clock::now() - start, 10s);
}

TEST_P(StoreContract, ExpiredDeadlineStillSeesPresentKeys) {
  store_->set("p", "v");
  EXPECT_EQ(store_->get("p", Clock::now() - 1s), "v");
  store_->wait(std::vector<std::string>{"p"}, Clock::now() - 1s);
  store_->wait(std::vector<std::string>{}, Clock::now());
}

TEST_P(StoreContract, WaitWakesOnSetFromAnotherThread) {
  auto other = env_->client();
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    store_->wait(std::vector<std::string>{"k1", "k2"}, deadline_in(30s));
    woke = true;
  });
  other->set("k1", "a");
  other->add("k2", 1);
  waiter.join();
  EXPECT_TRUE(woke.load());
}

TEST_P(StoreContract, MultiGetReturnsTheValuesInOrderOnceAllAreSet) {
  auto other = env_->client();
  store_->set("m/1", "one");
  std::vector<std::string> got;
  std::thread reader([&] {
    got = store_->multi_get(std::vector<std::string>{"m/2", "m/1", "m/3"}, deadline_in(30s));
  });
  other->set("m/3", std::string("th\0ree", 6));
  other->set("m/2", "");
  reader.join();
  EXPECT_EQ(got, (std::vector<std::string>{"", "one", std::string("th\0ree", 6)}));
  EXPECT_TRUE(store_->multi_get(std::vector<std::string>{}, deadline_in(1s)).empty());
}

// A key listed twice, a key written twice, a key deleted after it was seen: the waiter still
// wakes exactly when every key is set (the server counts registrations, then looks again).
TEST_P(StoreContract, MultiGetWithRepeatedWritesAndKeysWakesWhenAllAreSet) {
  auto other = env_->client();
  std::vector<std::string> got;
  std::thread reader([&] {
    got = store_->multi_get(std::vector<std::string>{"r/a", "r/b", "r/a", "r/c"}, deadline_in(30s));
  });
  other->set("r/a", "1");
  other->set("r/a", "2");
  other->set("r/b", "b");
  other->set("r/c", "c");
  reader.join();
  EXPECT_EQ(got, (std::vector<std::string>{"2", "b", "2", "c"}));
}

TEST_P(StoreContract, MultiGetTimesOutNamingOnlyMissingKeys) {
  store_->set("have", "1");
  const std::vector<std::string> keys = {"have", "lacking-a", "lacking-b"};
  const auto msg =
      expect_error(ErrorCode::Timeout, [&] { store_->multi_get(keys, deadline_in(150ms)); });
  EXPECT_TRUE(contains(msg, "lacking-a")) << msg;
  EXPECT_TRUE(contains(msg, "lacking-b")) << msg;
  EXPECT_FALSE(contains(msg, "'have'")) << msg;
}

// multi_get_or_stop: the poll applies to the stores that alternate reads and checks.
constexpr auto kStopPoll = 20ms;

TEST_P(StoreContract, MultiGetOrStopReturnsTheValuesWhenTheyComeFirst) {
  auto other = env_->client();
  KeysOrStop got;
  std::thread reader([&] {
    got = store_->multi_get_or_stop(std::vector<std::string>{"s/2", "s/1"}, "s/lost",
                                    deadline_in(30s), kStopPoll);
  });
  other->set("s/1", "one");
  other->set("s/2", std::string("t\0wo", 4));
  reader.join();
  EXPECT_FALSE(got.stop.has_value());
  EXPECT_EQ(got.values, (std::vector<std::string>{std::string("t\0wo", 4), "one"}));
  // With every key and the stop key there, the values win.
  other->set("s/lost", "rank 3");
  got = store_->multi_get_or_stop(std::vector<std::string>{"s/1"}, "s/lost", deadline_in(30s),
                                  kStopPoll);
  EXPECT_FALSE(got.stop.has_value());
  EXPECT_EQ(got.values, std::vector<std::string>{"one"});
}

TEST_P(StoreContract, MultiGetOrStopEndsWithTheStopKeysValue) {
  auto other = env_->client();
  KeysOrStop got;
  std::thread reader([&] {
    got = store_->multi_get_or_stop(std::vector<std::string>{"t/1", "t/never"}, "t/lost",
                                    deadline_in(30s), kStopPoll);
  });
  other->set("t/1", "one");
  other->set("t/lost", std::string("rank\0 5", 7));
  reader.join();
  ASSERT_TRUE(got.stop.has_value());
  EXPECT_EQ(*got.stop, std::string("rank\0 5", 7));
  EXPECT_TRUE(got.values.empty());
  // Set before the call, the stop key ends it at once; the store serves the next call.
  got = store_->multi_get_or_stop(std::vector<std::string>{"t/never"}, "t/lost", deadline_in(30s),
                                  kStopPoll);
  EXPECT_EQ(got.stop, std::optional<std::string>(std::string("rank\0 5", 7)));
  other->set("t/after", "x");
  EXPECT_EQ(store_->get("t/after", deadline_in(30s)), "x");
}

// The stop key is under the store's prefix like the keys: the neighbour prefix's "shared"
// (PrefixEnv) does not stop this store's wait, and an empty stop key is a plain multi_get.
TEST_P(StoreContract, MultiGetOrStopTimesOutNamingTheMissingKeys) {
  store_->set("u/have", "1");
  const std::vector<std::string> keys = {"u/have", "u/lacking"};
  for (std::string_view stop : {"shared"sv, ""sv}) {
    const auto msg = expect_error(ErrorCode::Timeout, [&] {
      store_->multi_get_or_stop(keys, stop, deadline_in(150ms), kStopPoll);
    });
    EXPECT_TRUE(contains(msg, "u/lacking")) << msg;
    EXPECT_FALSE(contains(msg, "u/have")) << msg;
  }
  store_->set("u/lacking", "2");
  const auto got = store_->multi_get_or_stop(keys, "", deadline_in(30s), kStopPoll);
  EXPECT_EQ(got.values, (std::vector<std::string>{"1", "2"}));
}

TEST_P(StoreContract, GetWakesOnCompareSet) {
  auto other = env_->client();
  std::string got;
  std::thread getter([&] { got = store_->get("cas-key", deadline_in(30s)); });
  EXPECT_EQ(other->compare_set("cas-key", "", "first"), "first");
  getter.join();
  EXPECT_EQ(got, "first");
}

TEST_P(StoreContract, WaitSurvivesDeleteOfAKeyItAlreadySaw) {
  auto other = env_->client();
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    store_->wait(std::vector<std::string>{"x", "y"}, deadline_in(30s));
    done = true;
  });
  other->set("x", "1");
  other->delete_key("x");
  other->set("y", "1");
  EXPECT_FALSE(done.load());  // x is missing again: nothing may complete the wait now
  other->set("x", "again");
  waiter.join();
  EXPECT_TRUE(done.load());
}

TEST_P(StoreContract, Add) {
  EXPECT_EQ(store_->add("ctr", 5), 5);  // absent counts as 0
  EXPECT_EQ(store_->add("ctr", -7), -2);
  EXPECT_EQ(store_->add("ctr", 0), -2);
  EXPECT_EQ(store_->get("ctr"), "-2");
  store_->set("num", "40");
  EXPECT_EQ(store_->add("num", 2), 42);
}

TEST_P(StoreContract, AddOnNonIntegerIsInvalidArgumentAndTheStoreGoesOn) {
  store_->set("word", "hello");
  const auto msg = expect_error(ErrorCode::InvalidArgument, [&] { store_->add("word", 1); });
  EXPECT_TRUE(contains(msg, "word")) << msg;
  store_->set("spaces", " 1");
  expect_error(ErrorCode::InvalidArgument, [&] { store_->add("spaces", 1); });
  store_->set("max", std::to_string(INT64_MAX));
  expect_error(ErrorCode::InvalidArgument, [&] { store_->add("max", 1); });
  EXPECT_EQ(store_->get("word"), "hello");
  EXPECT_EQ(store_->add("fine", 3), 3);
}

TEST_P(StoreContract, CompareSet) {
  // Absent key: an empty expected matches and sets.
  EXPECT_EQ(store_->compare_set("c", "", "v1"), "v1");
  EXPECT_EQ(store_->get("c"), "v1");
  // Mismatch leaves the value and returns it.
  EXPECT_EQ(store_->compare_set("c", "wrong", "v2"), "v1");
  EXPECT_EQ(store_->get("c"), "v1");
  // Match swaps.
  EXPECT_EQ(store_->compare_set("c", "v1", "v2"), "v2");
  EXPECT_EQ(store_->get("c"), "v2");
  // Absent key with a non-empty expected: nothing is written.
  EXPECT_EQ(store_->compare_set("absent", "something", "v"), "");
  EXPECT_FALSE(store_->check(std::vector<std::string>{"absent"}));
  // An existing empty value matches an empty expected.
  store_->set("e", "");
  EXPECT_EQ(store_->compare_set("e", "", "filled"), "filled");
}

TEST_P(StoreContract, CheckAndDelete) {
  EXPECT_TRUE(store_->check(std::vector<std::string>{}));
  EXPECT_FALSE(store_->check(std::vector<std::string>{"d"}));
  store_->set("d", "1");
  store_->set("e", "1");
  EXPECT_TRUE(store_->check(std::vector<std::string>{"d", "e"}));
  EXPECT_FALSE(store_->check(std::vector<std::string>{"d", "nope"}));
  EXPECT_TRUE(store_->delete_key("d"));
  EXPECT_FALSE(store_->delete_key("d"));
  EXPECT_FALSE(store_->delete_key("never"));
  EXPECT_FALSE(store_->check(std::vector<std::string>{"d"}));
  expect_error(ErrorCode::Timeout, [&] { store_->get("d", deadline_in(50ms)); });
  store_->set("d", "back");
  EXPECT_EQ(store_->get("d"), "back");
}

TEST_P(StoreContract, NumKeys) {
  const auto base = store_->num_keys();
  EXPECT_EQ(base, 0);  // a PrefixStore counts only its own keys
  store_->set("a", "1");
  store_->set("b", "1");
  store_->add("c", 1);
  store_->set("a", "again");
  EXPECT_EQ(store_->num_keys(), 3);
  store_->delete_key("b");
  EXPECT_EQ(store_->num_keys(), 2);
  EXPECT_EQ(store_->num_keys_with_prefix("a"), 1);
  EXPECT_EQ(store_->num_keys_with_prefix(""), 2);
  EXPECT_EQ(store_->num_keys_with_prefix("zzz"), 0);
}

TEST_P(StoreContract, KeyLimits) {
  store_->set(std::string(4000, 'k'), "ok");
  expect_error(ErrorCode::InvalidArgument, [&] { store_->set(std::string(5000, 'k'), "v"); });
  std::vector<std::string> too_many(5000, "k");
  expect_error(ErrorCode::InvalidArgument, [&] { store_->wait(too_many, deadline_in(1s)); });
  // Still usable afterwards.
  store_->set("after", "1");
  EXPECT_EQ(store_->get("after"), "1");
}

TEST_P(StoreContract, ConcurrentAddsAreExact) {
  constexpr int kThreads = 8;
  constexpr int kAdds = 1000;
  std::vector<std::shared_ptr<Store>> clients;
  for (int t = 0; t < kThreads; ++t) clients.push_back(env_->client());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kAdds; ++i) clients[t]->add("counter", 1);
        clients[t]->add("done", 1);
      } catch (const std::exception& e) {
        ++failures;
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store_->add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(store_->get("done"), std::to_string(kThreads));
}

TEST_P(StoreContract, DefaultTimeoutApplies) {
  store_->set_timeout(100ms);
  const auto start = Clock::now();
  expect_error(ErrorCode::Timeout, [&] { store_->get("nobody-sets-this"); });
  EXPECT_LT(Clock::now() - start, 10s);
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreContract,
                         ::testing::Values("hash", "tcp", "file", "prefix_hash", "prefix_tcp",
                                           "prefix_file"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace tandem::store::test
