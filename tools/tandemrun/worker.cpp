#include "worker.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string_view>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace tandem::tools::tandemrun {
namespace {

// What a path is, for the error message when it cannot be run.
enum class Kind { missing, directory, not_executable, ok };

Kind classify(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Kind::missing;
  if (S_ISDIR(st.st_mode)) return Kind::directory;
  if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) return Kind::not_executable;
  return Kind::ok;
}

ProgramError error_for(const std::string& name, const std::string& path, Kind kind) {
  switch (kind) {
    case Kind::directory:
      return {fmt::format("cannot run '{}': {} is a directory", name, path), 126};
    case Kind::not_executable:
      return {fmt::format("cannot run '{}': {} is not an executable file (chmod +x?)", name, path),
              126};
    default:
      return {fmt::format("cannot run '{}': no such file", name), 127};
  }
}

void pipe_cloexec(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0)
    TANDEM_THROW(ErrorCode::Io, "pipe2 failed: {} (too many open files?)",
                 std::system_category().message(errno));
}

void put(const char* s) {
  [[maybe_unused]] const ssize_t n = ::write(2, s, std::strlen(s));
}

// Child side, between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(pid_t parent, int devnull, int out_w, int err_w, const char* path,
                             char* const* argv, char* const* envp, const cpu_set_t* cpus) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // tandemrun died before prctl took effect
  if (::dup2(devnull, 0) < 0 || ::dup2(out_w, 1) < 0 || ::dup2(err_w, 2) < 0) ::_exit(127);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (cpus != nullptr && ::sched_setaffinity(0, sizeof(*cpus), cpus) != 0) {
    const char* what = ::strerrorname_np(errno);
    put("tandemrun: cannot bind the worker to its CPUs (--cpu-bind): ");
    put(what != nullptr ? what : "sched_setaffinity failed");
    put("\n");
    ::_exit(127);
  }
  ::execve(path, argv, envp);
  const char* what = ::strerrorname_np(errno);
  put("tandemrun: cannot execute ");
  put(path);
  put(": ");
  put(what != nullptr ? what : "exec failed");
  put("\n");
  ::_exit(127);
}

}  // namespace

std::string resolve_program(const std::string& name) {
  if (name.empty()) throw ProgramError{"PROGRAM is an empty string", 127};
  if (name.find('/') != std::string::npos) {
    const Kind k = classify(name);
    if (k != Kind::ok) throw error_for(name, name, k);
    return name;
  }
  const char* env_path = std::getenv("PATH");
  const std::string_view search = env_path != nullptr && *env_path != '\0'
                                      ? std::string_view(env_path)
                                      : std::string_view("/usr/local/bin:/usr/bin:/bin");
  Kind best = Kind::missing;
  std::string best_path;
  std::size_t pos = 0;
  while (pos <= search.size()) {
    const std::size_t colon = std::min(search.find(':', pos), search.size());
    const std::string_view dir = colon > pos ? search.substr(pos, colon - pos) : ".";
    pos = colon + 1;
    std::string candidate = fmt::format("{}/{}", dir, name);
    const Kind k = classify(candidate);
    if (k == Kind::ok) return candidate;
    if (k != Kind::missing && best == Kind::missing) {
      best = k;
      best_path = candidate;
    }
  }
  if (best == Kind::missing)
    throw ProgramError{fmt::format("cannot run '{}': not found in PATH", name), 127};
  throw error_for(name, best_path, best);
}

void ensure_standard_fds() noexcept {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    const int n = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (n >= 0 && n != fd) {
      ::dup2(n, fd);
      ::close(n);
    }
  }
}

SpawnedWorker spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const std::vector<int>& cpus) {
  // Everything the child needs is built before fork(): tandemrun has threads (the store).
  std::vector<char*> argv_c, envp_c;
  argv_c.reserve(argv.size() + 1);
  for (const auto& a : argv) argv_c.push_back(const_cast<char*>(a.c_str()));
  argv_c.push_back(nullptr);
  envp_c.reserve(env.size() + 1);
  for (const auto& e : env) envp_c.push_back(const_cast<char*>(e.c_str()));
  envp_c.push_back(nullptr);

  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE)
      TANDEM_THROW(ErrorCode::InvalidArgument, "cannot bind a worker to CPU {}: beyond {}", c,
                   CPU_SETSIZE);
    CPU_SET(c, &cpu_set);
  }

  tools_api::Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull)
    TANDEM_THROW(ErrorCode::Io, "cannot open /dev/null: {}", std::system_category().message(errno));
  int out[2], err[2];
  pipe_cloexec(out);
  tools_api::Fd out_r(out[0]), out_w(out[1]);
  pipe_cloexec(err);
  tools_api::Fd err_r(err[0]), err_w(err[1]);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    TANDEM_THROW(ErrorCode::Io, "fork failed: {} (process limit reached?)",
                 std::system_category().message(errno));
  }
  if (pid == 0) {
    exec_child(parent, devnull.get(), out_w.get(), err_w.get(), path.c_str(), argv_c.data(),
               envp_c.data(), cpus.empty() ? nullptr : &cpu_set);
  }
  // Also from the parent, so the group exists before tandemrun signals it.
  ::setpgid(pid, pid);
  SpawnedWorker w;
  w.pid = pid;
  w.out = std::move(out_r);
  w.err = std::move(err_r);
  tools_api::set_nonblocking(w.out.get());
  tools_api::set_nonblocking(w.err.get());
  return w;
}

}  // namespace tandem::tools::tandemrun
