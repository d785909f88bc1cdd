#pragma once
// Shared pieces of the store tests.

#include "support/temp_dir.hpp"

#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <poll.h>
#include <string>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace tandem::store::test {

using tandem::testing::TempDir;

/// Waits for a condition another thread or process makes true, up to a generous bound.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds bound = std::chrono::seconds(10)) {
  const auto deadline = Clock::now() + bound;
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

/// Runs `fn`, expecting a tandem::Error with `code`; returns its message.
inline std::string expect_error(ErrorCode code, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "expected an Error with code " << to_string(code);
  return {};
}

/// Forks a child that runs `fn`; it exits 0 when `fn` returns without a failed assertion.
class Child {
 public:
  explicit Child(const std::function<void()>& fn) {
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      int code = 0;
      try {
        fn();
        if (::testing::Test::HasFailure()) code = 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
        code = 2;
      }
      std::fflush(stderr);
      std::_Exit(code);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Exit status, or -1 if it is still running at the deadline (then it is killed).
  int join(std::chrono::milliseconds bound = std::chrono::seconds(30)) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(bound.count()));
      ::close(pidfd);
      if (rc == 0) return -1;
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace tandem::store::test
