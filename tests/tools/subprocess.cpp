#include "subprocess.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tandem::testing {
namespace {

int poll_ms(Deadline d) {
  const auto now = Clock::now();
  if (d <= now) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(d - now).count());
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Reads what is there; closes the fd at EOF.
void drain(int& fd, std::string& into) {
  char buf[65536];
  while (fd >= 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      into.append(buf, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {
      close_fd(fd);
    }
  }
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const auto name = kv.substr(0, kv.find('=') + 1);
    const bool overridden = std::any_of(env.begin(), env.end(), [&](const std::string& x) {
      return x.compare(0, name.size(), name) == 0;
    });
    if (!overridden) envs.emplace_back(kv);
  }
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> argv_c, env_c;
  for (const auto& a : argv) argv_c.push_back(const_cast<char*>(a.c_str()));
  argv_c.push_back(nullptr);
  for (const auto& e : envs) env_c.push_back(const_cast<char*>(e.c_str()));
  env_c.push_back(nullptr);

  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe2 failed");
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(argv_c[0], argv_c.data(), env_c.data());
    std::_Exit(127);
  }
  ::setpgid(pid_, pid_);
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  ::fcntl(err_fd_, F_SETFL, O_NONBLOCK);
  pid_fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
}

Subprocess::~Subprocess() {
  if (!exited_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    reap(true);
  }
  close_fd(out_fd_);
  close_fd(err_fd_);
  close_fd(pid_fd_);
}

void Subprocess::reap(bool block) {
  if (exited_) return;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  if (r != pid_) return;
  exited_ = true;
  result_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  if (WIFEXITED(status)) result_.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result_.signal = WTERMSIG(status);
  close_fd(pid_fd_);
}

bool Subprocess::pump(Deadline deadline) {
  pollfd p[3];
  nfds_t n = 0;
  if (out_fd_ >= 0) p[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) p[n++] = {err_fd_, POLLIN, 0};
  if (pid_fd_ >= 0) p[n++] = {pid_fd_, POLLIN, 0};
  if (n == 0) return true;
  const int rc = ::poll(p, n, poll_ms(deadline));
  if (rc < 0 && errno != EINTR) throw std::runtime_error("poll failed");
  drain(out_fd_, result_.out);
  drain(err_fd_, result_.err);
  reap(false);
  return Clock::now() < deadline || rc > 0;
}

bool Subprocess::wait_for(const std::function<bool(const std::string&, const std::string&)>& done,
                          std::chrono::milliseconds timeout) {
  const Deadline deadline = Clock::now() + timeout;
  while (!done(result_.out, result_.err)) {
    if (Clock::now() >= deadline) return false;
    if (exited_ && out_fd_ < 0 && err_fd_ < 0) return done(result_.out, result_.err);
    pump(deadline);
  }
  return true;
}

ProcessResult Subprocess::wait(std::chrono::milliseconds timeout) {
  const Deadline deadline = Clock::now() + timeout;
  while (!(exited_ && out_fd_ < 0 && err_fd_ < 0)) {
    if (Clock::now() >= deadline) {
      result_.timed_out = true;
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      reap(true);
      drain(out_fd_, result_.out);
      drain(err_fd_, result_.err);
      close_fd(out_fd_);
      close_fd(err_fd_);
      break;
    }
    pump(deadline);
  }
  return result_;
}

ProcessResult run_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::chrono::milliseconds timeout) {
  Subprocess p(argv, env);
  return p.wait(timeout);
}

std::string failure_summary(const std::string& err) {
  const std::string rule(72, '=');
  const auto first = err.find(rule);
  if (first == std::string::npos) return {};
  const auto second = err.find(rule, first + rule.size());
  if (second == std::string::npos) return {};
  return err.substr(first, second + rule.size() - first);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() &&
         line[close_paren + 2] == 'Z';
}

BusyPort::BusyPort() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(fd_, 1) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("BusyPort: cannot listen on 127.0.0.1");
  port_ = ntohs(a.sin_port);
}

BusyPort::~BusyPort() {
  if (fd_ >= 0) ::close(fd_);
}

std::string tandemrun_path() {
  return TANDEM_BINARY_DIR "/bin/tandemrun";
}
std::string tandem_perf_path() {
  return TANDEM_BINARY_DIR "/bin/tandem-perf";
}

}  // namespace tandem::testing
