#include "support/multiproc.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tandem::testing {
namespace {

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

// Binds 127.0.0.1:0 and listens; the store process adopts this socket, so the port is
// reserved without a race.
int listen_loopback(std::uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 512) != 0)
    throw std::runtime_error(std::string("bind/listen failed: ") + std::strerror(errno));
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

[[noreturn]] void run_store(int listen_fd, const std::string& token) {
  try {
    store::TcpStoreServerOptions o;
    o.token = token;
    store::TcpStoreServer server(listen_fd, o);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test store: %s\n", e.what());
    std::_Exit(3);
  }
  std::_Exit(0);
}

[[noreturn]] void run_rank(const RankContext& ctx, const RunOptions& options,
                           const std::function<void(const RankContext&)>& fn) {
  for (const auto& kv : options.env) ::putenv(const_cast<char*>(kv.c_str()));
  int code = 0;
  try {
    fn(ctx);
    code = ::testing::Test::HasFailure() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: uncaught exception: %s\n", ctx.rank, e.what());
    code = 2;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace

std::shared_ptr<store::Store> RankContext::store() const {
  store::TcpStoreOptions o;
  o.token = store_token;
  o.connect_timeout = std::chrono::seconds(30);
  return std::make_shared<store::TcpStore>("127.0.0.1", store_port, o);
}

std::vector<RankExit> run_ranks(int n, const std::function<void(const RankContext&)>& fn,
                                const RunOptions& options) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::uint16_t port = 0;
  const int listen_fd = listen_loopback(&port);

  // The store process ignores SIGTERM until sigwait() takes it.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, &old);
  const pid_t store_pid = ::fork();
  if (store_pid == 0) run_store(listen_fd, options.store_token);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  ::close(listen_fd);

  const auto start = Clock::now();
  std::vector<RankExit> exits(static_cast<std::size_t>(n));
  std::vector<int> pidfds(static_cast<std::size_t>(n), -1);
  for (int r = 0; r < n; ++r) {
    RankContext ctx{r, n, port, options.store_token};
    const pid_t pid = ::fork();
    if (pid == 0) run_rank(ctx, options, fn);
    exits[r].rank = r;
    exits[r].pid = pid;
    pidfds[r] = pidfd_open(pid);
  }

  const Deadline deadline = start + options.timeout;
  int left = n;
  while (left > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 0; r < n; ++r) {
      if (pidfds[r] >= 0) {
        pfds.push_back({pidfds[r], POLLIN, 0});
        who.push_back(r);
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    const int rc =
        ::poll(pfds.data(), pfds.size(), static_cast<int>(std::min<long long>(ms + 1, 60000)));
    if (rc < 0 && errno != EINTR) break;
    for (std::size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & POLLIN)) continue;
      const int r = who[i];
      int status = 0;
      ::waitpid(exits[r].pid, &status, 0);
      exits[r].seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (WIFEXITED(status)) {
        exits[r].exited = true;
        exits[r].exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        exits[r].signal = WTERMSIG(status);
      }
      ::close(pidfds[r]);
      pidfds[r] = -1;
      --left;
    }
  }
  for (int r = 0; r < n; ++r) {
    if (pidfds[r] < 0) continue;
    exits[r].timed_out = true;
    ::kill(exits[r].pid, SIGKILL);
    int status = 0;
    ::waitpid(exits[r].pid, &status, 0);
    exits[r].signal = SIGKILL;
    exits[r].seconds = std::chrono::duration<double>(Clock::now() - start).count();
    ::close(pidfds[r]);
  }
  ::kill(store_pid, SIGTERM);
  int status = 0;
  ::waitpid(store_pid, &status, 0);
  return exits;
}

std::string describe(const RankExit& e) {
  if (e.timed_out)
    return fmt::format("rank {} (pid {}): still running after {:.1f} s (killed)", e.rank, e.pid,
                       e.seconds);
  if (e.exited)
    return fmt::format("rank {} (pid {}): exit code {} after {:.2f} s", e.rank, e.pid, e.exit_code,
                       e.seconds);
  return fmt::format("rank {} (pid {}): killed by {} after {:.2f} s", e.rank, e.pid,
                     sigabbrev_np(e.signal) ? sigabbrev_np(e.signal) : "?", e.seconds);
}

void expect_all_ok(const std::vector<RankExit>& exits) {
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(e);
}

}  // namespace tandem::testing
