#include "host_info.hpp"

#include "tools_api/net.hpp"
#include "worker.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <ifaddrs.h>
#include <memory>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <set>
#include <signal.h>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tandem::tools::tandemrun {
namespace {

using namespace std::chrono_literals;

std::optional<std::string> numeric(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa == nullptr) return std::nullopt;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    if (::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf) == nullptr) return std::nullopt;
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf) == nullptr) return std::nullopt;
  } else {
    return std::nullopt;
  }
  return std::string(buf);
}

// Addresses `host` resolves to, as numeric strings; empty when it does not resolve.
std::set<std::string> resolve_all(const std::string& host) {
  std::set<std::string> out;
  try {
    for (const auto& a : tools_api::resolve(host, 0)) {
      if (auto s = numeric(a.get())) out.insert(*s);
    }
  } catch (const Error&) {
  }
  return out;
}

// Output of `nvidia-smi -L`, or nothing when it is absent, fails or takes over 10 s.
std::string nvidia_smi_list() {
  std::string path;
  try {
    path = resolve_program("nvidia-smi");
  } catch (const ProgramError&) {
    return {};
  }
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  SpawnedWorker p = spawn_worker(path, {path, "-L"}, env);
  std::string out;
  const Deadline deadline = deadline_in(10s);
  char buf[4096];
  while (p.out && Clock::now() < deadline) {
    pollfd pfd{p.out.get(), POLLIN, 0};
    ::poll(&pfd, 1, tools_api::poll_timeout_ms(deadline));
    const ssize_t n = ::read(p.out.get(), buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      p.out.reset();
    }
  }
  ::kill(-p.pid, SIGKILL);
  int status = 0;
  ::waitpid(p.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  return out;
}

}  // namespace

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int count_gpus() {
  namespace fs = std::filesystem;
  std::error_code ec;
  int n = 0;
  for (fs::directory_iterator it("/proc/driver/nvidia/gpus", ec), end; !ec && it != end;
       it.increment(ec))
    ++n;
  if (n > 0) return n;
  const std::string list = nvidia_smi_list();
  std::size_t pos = 0;
  while ((pos = list.find("GPU ", pos)) != std::string::npos) {
    if (pos == 0 || list[pos - 1] == '\n') ++n;
    pos += 4;
  }
  return n;
}

std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  const std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(list, ::freeifaddrs);
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (auto s = numeric(i->ifa_addr)) {
      if (std::find(out.begin(), out.end(), *s) == out.end()) out.push_back(std::move(*s));
    }
  }
  return out;
}

bool is_local_host(const std::string& host) {
  const auto mine = local_addresses();
  for (const auto& a : resolve_all(host)) {
    if (std::find(mine.begin(), mine.end(), a) != mine.end()) return true;
  }
  return false;
}

int index_of_this_host(const std::vector<std::string>& hosts) {
  const auto mine = local_addresses();
  std::vector<int> matches;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    for (const auto& a : resolve_all(hosts[i])) {
      if (std::find(mine.begin(), mine.end(), a) != mine.end()) {
        matches.push_back(static_cast<int>(i));
        break;
      }
    }
  }
  if (matches.empty()) {
    throw std::runtime_error(fmt::format(
        "--ips {}: none of these is an address of this host (its addresses: {}); run the "
        "command on the listed hosts, or give --node-rank",
        fmt::join(hosts, ","), fmt::join(mine, ", ")));
  }
  if (matches.size() > 1) {
    std::vector<std::string> which;
    which.reserve(matches.size());
    for (int m : matches) which.push_back(hosts[static_cast<std::size_t>(m)]);
    throw std::runtime_error(fmt::format(
        "--ips {}: several entries ({}) are addresses of this host, so its node rank is "
        "ambiguous; give --node-rank",
        fmt::join(hosts, ","), fmt::join(which, ", ")));
  }
  return matches.front();
}

}  // namespace tandem::tools::tandemrun
