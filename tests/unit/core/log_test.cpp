// The logger: level and subsystem selection from the environment, the line format, and
// whole lines under concurrent writers. stderr is captured through a pipe (dup2 onto fd 2).

#include "support/scoped_env.hpp"

#include <tandem/log.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace tandem::log {
namespace {

// Redirects fd 2 into a pipe drained by a thread (so large outputs cannot block the writer).
class StderrCapture {
 public:
  StderrCapture() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    saved_ = ::dup(STDERR_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[1]);
    read_fd_ = fds[0];
    reader_ = std::thread([this] {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(read_fd_, buf, sizeof buf);
        if (n <= 0) break;
        text_.append(buf, static_cast<std::size_t>(n));
      }
    });
  }
  ~StderrCapture() { finish(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Restores stderr and returns everything written meanwhile.
  const std::string& finish() {
    if (saved_ >= 0) {
      ::dup2(saved_, STDERR_FILENO);  // drops the last write end: the reader sees EOF
      ::close(saved_);
      saved_ = -1;
      reader_.join();
      ::close(read_fd_);
    }
    return text_;
  }

 private:
  int saved_ = -1;
  int read_fd_ = -1;
  std::thread reader_;
  std::string text_;
};

using testing::ScopedEnv;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

// Every test starts from WARN / ALL and an unknown rank, and leaves it so.
class Log : public ::testing::Test {
 protected:
  void SetUp() override { reset(); }
  void TearDown() override { reset(); }
  static void reset() {
    ::unsetenv("TANDEM_DEBUG");
    ::unsetenv("TANDEM_DEBUG_SUBSYS");
    reload_from_env();
    set_rank(-1, -1);
  }
};

TEST_F(Log, DefaultPrintsWarningsOnly) {
  EXPECT_TRUE(enabled(Level::warn, Subsys::coll));
  EXPECT_FALSE(enabled(Level::info, Subsys::coll));
  EXPECT_FALSE(enabled(Level::detail, Subsys::coll));
  StderrCapture cap;
  TANDEM_WARN(store, "visible {}", 1);
  TANDEM_INFO(store, "invisible {}", 2);
  const auto out = lines(cap.finish());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].find("visible 1"), std::string::npos);
}

// "[tandem rank <rank> <host>:<pid>] <rest>": true when `line` has that shape with a
// non-empty host without blanks or colons and the given pid.
bool has_prefix(const std::string& line, const std::string& rank, const std::string& pid,
                const std::string& rest) {
  const std::string head = "[tandem rank " + rank + " ";
  if (!line.starts_with(head)) return false;
  const auto colon = line.find(':', head.size());
  if (colon == std::string::npos || colon == head.size()) return false;
  const std::string host = line.substr(head.size(), colon - head.size());
  if (host.find_first_of(" ]") != std::string::npos) return false;
  return line.substr(colon + 1) == pid + "] " + rest;
}

TEST_F(Log, PrefixBeforeAndAfterSetRank) {
  const std::string pid = std::to_string(::getpid());
  StderrCapture cap;
  TANDEM_WARN(init, "hello {}", "world");
  set_rank(3, 8);
  TANDEM_WARN(coll, "second");
  const auto out = lines(cap.finish());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(has_prefix(out[0], "?", pid, "WARN INIT hello world")) << out[0];
  EXPECT_TRUE(has_prefix(out[1], "3/8", pid, "WARN COLL second")) << out[1];
}

TEST_F(Log, LevelsFromTheEnvironmentCaseInsensitive) {
  {
    ScopedEnv e("TANDEM_DEBUG", "info");
    reload_from_env();
    EXPECT_TRUE(enabled(Level::info, Subsys::tcp));
    EXPECT_FALSE(enabled(Level::detail, Subsys::tcp));
    StderrCapture cap;
    TANDEM_INFO(tcp, "connected");
    TANDEM_DETAIL(tcp, "bytes");
    const auto out = lines(cap.finish());
    ASSERT_EQ(out.size(), 1u);
    EXPECT_NE(out[0].find("] INFO TCP connected"), std::string::npos) << out[0];
  }
  ScopedEnv e("TANDEM_DEBUG", "Detail");
  reload_from_env();
  EXPECT_TRUE(enabled(Level::detail, Subsys::algo));
  StderrCapture cap;
  TANDEM_DETAIL(algo, "ring chosen");
  EXPECT_NE(cap.finish().find("] DETAIL ALGO ring chosen\n"), std::string::npos);
}

TEST_F(Log, BadLevelWarnsOnceAndUsesWarn) {
  ScopedEnv e("TANDEM_DEBUG", "LOUD");
  StderrCapture cap;
  reload_from_env();
  EXPECT_FALSE(enabled(Level::info, Subsys::init));
  EXPECT_TRUE(enabled(Level::warn, Subsys::init));
  TANDEM_WARN(init, "after");
  const auto out = lines(cap.finish());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NE(out[0].find("WARN INIT TANDEM_DEBUG='LOUD' is not a log level"), std::string::npos)
      << out[0];
  EXPECT_NE(out[1].find("after"), std::string::npos);
}

TEST_F(Log, SubsystemFilter) {
  ScopedEnv level("TANDEM_DEBUG", "INFO");
  {
    ScopedEnv e("TANDEM_DEBUG_SUBSYS", "coll,SHM");
    reload_from_env();
    EXPECT_TRUE(enabled(Level::info, Subsys::coll));
    EXPECT_TRUE(enabled(Level::info, Subsys::shm));
    EXPECT_FALSE(enabled(Level::info, Subsys::tcp));
    EXPECT_TRUE(enabled(Level::warn, Subsys::tcp)) << "warnings are never filtered";
  }
  {
    ScopedEnv e("TANDEM_DEBUG_SUBSYS", "^SHM,TCP");
    reload_from_env();
    EXPECT_FALSE(enabled(Level::info, Subsys::shm));
    EXPECT_FALSE(enabled(Level::info, Subsys::tcp));
    EXPECT_TRUE(enabled(Level::info, Subsys::coll));
  }
  {
    ScopedEnv e("TANDEM_DEBUG_SUBSYS", "ALL,^DATA");
    reload_from_env();
    EXPECT_FALSE(enabled(Level::info, Subsys::data));
    EXPECT_TRUE(enabled(Level::info, Subsys::ddp));
  }
  ScopedEnv e("TANDEM_DEBUG_SUBSYS", "COLL,BOGUS");
  StderrCapture cap;
  reload_from_env();
  TANDEM_INFO(coll, "kept");
  TANDEM_INFO(store, "dropped");
  const std::string out = cap.finish();
  EXPECT_NE(out.find("unknown subsystem(s) BOGUS"), std::string::npos) << out;
  EXPECT_NE(out.find("INFO COLL kept"), std::string::npos) << out;
  EXPECT_EQ(out.find("dropped"), std::string::npos) << out;
}

TEST_F(Log, ConcurrentLinesNeverTear) {
  constexpr int kThreads = 4, kLines = 500;
  const std::string payload(200, 'x');
  StderrCapture cap;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLines; ++i) TANDEM_WARN(perf, "t{} i{} {}", t, i, payload);
    });
  for (auto& th : threads) th.join();
  const auto out = lines(cap.finish());
  ASSERT_EQ(out.size(), static_cast<std::size_t>(kThreads * kLines));
  const std::string pid = std::to_string(::getpid());
  std::vector<int> next(kThreads, 0);  // each thread's lines arrive whole and in its order
  for (const auto& l : out) {
    const auto t_pos = l.find("] WARN PERF t");
    ASSERT_NE(t_pos, std::string::npos) << l;
    const int t = l[t_pos + 13] - '0';
    ASSERT_TRUE(t >= 0 && t < kThreads) << l;
    const std::string rest = fmt::format("WARN PERF t{} i{} {}", t, next[t]++, payload);
    ASSERT_TRUE(has_prefix(l, "?", pid, rest)) << l;
  }
}

TEST_F(Log, SubsystemNames) {
  EXPECT_EQ(to_string(Subsys::init), "INIT");
  EXPECT_EQ(to_string(Subsys::store), "STORE");
  EXPECT_EQ(to_string(Subsys::data), "DATA");
}

}  // namespace
}  // namespace tandem::log
