// ControlWatch: the thread that wakes a rank asleep on shared memory when a control connection
// has news. Real sockets (a socketpair stands for the connection to a peer); the 10 s bounds
// are never-hang checks, not timings.

#include "transport/control.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sys/socket.h>
#include <unistd.h>

namespace tandem::transport {
namespace {

using namespace std::chrono_literals;

struct Pair {
  net::Fd ours;    ///< this rank's end, watched
  net::Fd theirs;  ///< the peer's end
};

Pair socket_pair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {net::Fd(fds[0]), net::Fd(fds[1])};
}

// Counts the watch's wake-ups.
class Wakes {
 public:
  void operator()() {
    {
      std::lock_guard lock(mu_);
      ++count_;
    }
    cv_.notify_all();
  }
  /// Waits until the count reaches `n` (false after 10 s).
  bool reach(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return count_ >= n; });
  }
  int count() {
    std::lock_guard lock(mu_);
    return count_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
};

TEST(ControlWatch, APeerThatClosesWakesTheRank) {
  Wakes wakes;
  Pair a = socket_pair();
  Pair b = socket_pair();
  {
    ControlWatch watch([&] { wakes(); });
    watch.watch(a.ours.get());
    watch.watch(b.ours.get());
    b.theirs.reset();  // the kernel closes a dead peer's socket
    ASSERT_TRUE(wakes.reach(1)) << "the watch did not see the peer's socket close";
  }
  // The destructor joined the thread: a later event wakes nobody.
  const int after = wakes.count();
  a.theirs.reset();
  EXPECT_EQ(wakes.count(), after);
}

TEST(ControlWatch, EachFrameWakesOnceAndItIsLeftToBeRead) {
  Wakes wakes;
  Pair a = socket_pair();
  ControlWatch watch([&] { wakes(); });
  watch.watch(a.ours.get());
  ASSERT_EQ(::write(a.theirs.get(), "x", 1), 1);
  ASSERT_TRUE(wakes.reach(1));
  // Edge-triggered: unread data does not wake again and again, a new frame does.
  ASSERT_EQ(::write(a.theirs.get(), "y", 1), 1);
  ASSERT_TRUE(wakes.reach(2));
  // The watch reads nothing: both bytes wait for the mesh's thread.
  char buf[4];
  EXPECT_EQ(::recv(a.ours.get(), buf, sizeof buf, MSG_DONTWAIT), 2);
}

TEST(ControlWatch, StopsWithNothingWatched) {
  Wakes wakes;
  {
    ControlWatch watch([&] { wakes(); });
  }
  EXPECT_EQ(wakes.count(), 0);
}

}  // namespace
}  // namespace tandem::transport
