// FileStore across threads and processes, and its handling of damaged files.

#include "store_test_util.hpp"

#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <gtest/gtest.h>

#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace tandem::store::test {
namespace {

using namespace std::chrono_literals;

TEST(FileStore, TwoInstancesInTwoThreads) {
  TempDir dir;
  const auto path = dir.file("store");
  FileStore a(path);
  std::string got;
  std::thread t([&] {
    FileStore b(path);
    got = b.get("from-a", deadline_in(30s));
    b.set("from-b", "hi a");
  });
  a.set("from-a", "hi b");
  EXPECT_EQ(a.get("from-b", deadline_in(30s)), "hi a");
  t.join();
  EXPECT_EQ(got, "hi b");
}

TEST(FileStore, ConcurrentAddsAcrossProcesses) {
  TempDir dir;
  const auto path = dir.file("store");
  constexpr int kProcs = 4;
  constexpr int kAdds = 300;
  std::vector<std::unique_ptr<Child>> children;
  for (int p = 0; p < kProcs; ++p) {
    children.push_back(std::make_unique<Child>([&] {
      FileStore s(path);
      for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
      s.add("finished", 1);
    }));
  }
  for (auto& c : children) EXPECT_EQ(c->join(), 0);
  FileStore s(path);
  EXPECT_EQ(s.add("counter", 0), kProcs * kAdds);
  EXPECT_EQ(s.get("finished"), std::to_string(kProcs));
}

TEST(FileStore, HandshakeWithAForkedProcess) {
  TempDir dir;
  const auto path = dir.file("store");
  FileStore s(path);  // created before fork: the child opens its own
  Child child([&] {
    FileStore c(path);
    const auto v = c.get("go", deadline_in(30s));
    c.set("reply", v + "!");
    c.compare_set("cas", "", "child");
  });
  s.set("go", "ping");
  EXPECT_EQ(s.get("reply", deadline_in(30s)), "ping!");
  s.wait(std::vector<std::string>{"cas"}, deadline_in(30s));
  EXPECT_EQ(s.compare_set("cas", "", "parent"), "child");
  EXPECT_EQ(child.join(), 0);
  EXPECT_EQ(s.num_keys(), 3);
}

TEST(FileStore, AnInstanceInheritedByForkedChildrenStillExcludes) {
  TempDir dir;
  FileStore s(dir.file("store"));
  constexpr int kProcs = 3;
  constexpr int kAdds = 2000;
  std::vector<std::unique_ptr<Child>> children;
  for (int p = 0; p < kProcs; ++p)
    children.push_back(std::make_unique<Child>([&] {
      for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
    }));
  for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
  for (auto& c : children) EXPECT_EQ(c->join(), 0);
  EXPECT_EQ(s.add("counter", 0), (kProcs + 1) * kAdds);
}

TEST(FileStore, PersistsAcrossInstances) {
  TempDir dir;
  const auto path = dir.file("store");
  {
    FileStore s(path);
    s.set("a", std::string("\0\1", 2));
    s.set("b", "x");
    s.delete_key("b");
    s.add("n", 3);
  }
  FileStore again(path);
  EXPECT_EQ(again.get("a"), std::string("\0\1", 2));
  EXPECT_FALSE(again.check(std::vector<std::string>{"b"}));
  EXPECT_EQ(again.add("n", 1), 4);
  EXPECT_EQ(again.num_keys(), 2);
}

TEST(FileStore, CorruptTailIsReported) {
  TempDir dir;
  const auto path = dir.file("store");
  FileStore s(path);
  s.set("good", "1");
  {
    std::ofstream f(path, std::ios::binary | std::ios::app);
    f.write("\x01\xff\xff\x00\x00\x02\x00\x00\x00kk", 11);  // key length 65535 > limit
  }
  const auto msg = expect_error(ErrorCode::Io, [&] { s.get("good"); });
  EXPECT_TRUE(contains(msg, "corrupt record at offset")) << msg;
  EXPECT_TRUE(contains(msg, path)) << msg;
  // A fresh reader of the damaged file says the same.
  expect_error(ErrorCode::Io, [&] { FileStore other(path); });
}

TEST(FileStore, TruncatedRecordIsReported) {
  TempDir dir;
  const auto path = dir.file("store");
  {
    FileStore s(path);
    s.set("key", std::string(100, 'v'));
  }
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 10);
  const auto msg = expect_error(ErrorCode::Io, [&] { FileStore s(path); });
  EXPECT_TRUE(contains(msg, "runs past the end")) << msg;
}

TEST(FileStore, ForeignFileIsRefused) {
  TempDir dir;
  const auto path = dir.file("not-a-store");
  {
    std::ofstream f(path);
    f << "some other file\n";
  }
  const auto msg = expect_error(ErrorCode::Io, [&] { FileStore s(path); });
  EXPECT_TRUE(contains(msg, "not a tandem FileStore")) << msg;
}

TEST(FileStore, MissingDirectoryIsAClearError) {
  const auto msg =
      expect_error(ErrorCode::Io, [&] { FileStore s("/nonexistent-dir-for-tandem/store"); });
  EXPECT_TRUE(contains(msg, "/nonexistent-dir-for-tandem/store")) << msg;
}

TEST(FileStore, HeldLockTimesOutInsteadOfHanging) {
  TempDir dir;
  const auto path = dir.file("store");
  FileStore s(path);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  s.set_timeout(200ms);
  const auto start = Clock::now();
  const auto msg = expect_error(ErrorCode::Timeout, [&] { s.set("k", "v"); });
  EXPECT_TRUE(contains(msg, "lock")) << msg;
  EXPECT_LT(Clock::now() - start, 10s);
  ::flock(fd, LOCK_UN);
  ::close(fd);
  s.set("k", "v");
  EXPECT_EQ(s.get("k"), "v");
}

TEST(HashStore, WaitWithoutDeadlineWakes) {
  HashStore s;
  std::thread t([&] { s.set("late", "1"); });
  s.wait(std::vector<std::string>{"late"}, Deadline::max());
  t.join();
  EXPECT_EQ(s.get("late", Deadline::max()), "1");
}

}  // namespace
}  // namespace tandem::store::test
