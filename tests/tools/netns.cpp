#include "netns.hpp"

#include "subprocess.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <signal.h>
#include <stdexcept>
#include <unistd.h>

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

ProcessResult ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv{NetnsPair::ip_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, 30s);
}

void must(const std::vector<std::string>& args) {
  const auto r = ip(args);
  if (r.exit_code != 0) {
    std::string cmd = "ip";
    for (const auto& a : args) cmd += " " + a;
    throw std::runtime_error(fmt::format("'{}' failed ({}): {}", cmd, r.exit_code, r.err));
  }
}

// Namespaces of test processes that no longer exist.
void remove_stale() {
  static const std::regex kNetns(R"(^(tdm-(\d+)-[ab])\b.*)");
  for (const auto& line : split_lines(ip({"netns", "list"}).out)) {
    std::smatch m;
    if (!std::regex_match(line, m, kNetns)) continue;
    const pid_t pid = std::stoi(m[2]);
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    ip({"netns", "delete", m[1]});
  }
}

}  // namespace

std::string NetnsPair::ip_path() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return {};
}

std::optional<std::string> NetnsPair::unavailable() {
  if (::geteuid() != 0) return "network namespaces need root (run the tests as root)";
  if (ip_path().empty()) return "the ip tool (iproute2) is not installed";
  return std::nullopt;
}

NetnsPair::NetnsPair() {
  remove_stale();
  const int pid = static_cast<int>(::getpid());
  subnet_ = 20 + pid % 200;
  const std::string a = fmt::format("tdm-{}-a", pid), b = fmt::format("tdm-{}-b", pid);
  const std::string va = fmt::format("tdm{}a", pid), vb = fmt::format("tdm{}b", pid);
  try {
    must({"netns", "add", a});
    ns_.push_back(a);
    must({"netns", "add", b});
    ns_.push_back(b);
    must({"link", "add", va, "type", "veth", "peer", "name", vb});
    must({"link", "set", va, "netns", a});
    must({"link", "set", vb, "netns", b});
    must({"-n", a, "link", "set", va, "name", ifname()});
    must({"-n", b, "link", "set", vb, "name", ifname()});
    for (int i = 0; i < 2; ++i) {
      must({"-n", ns_[static_cast<std::size_t>(i)], "addr", "add", addr(i) + "/24", "dev",
            ifname()});
      must({"-n", ns_[static_cast<std::size_t>(i)], "link", "set", "lo", "up"});
      must({"-n", ns_[static_cast<std::size_t>(i)], "link", "set", ifname(), "up"});
    }
  } catch (...) {
    for (const auto& n : ns_) ip({"netns", "delete", n});
    ip({"link", "delete", va});
    throw;
  }
}

NetnsPair::~NetnsPair() {
  // Deleting a namespace deletes its end of the veth pair, and with it the other end.
  for (const auto& n : ns_) ip({"netns", "delete", n});
}

std::string NetnsPair::addr(int i) const {
  return fmt::format("10.213.{}.{}", subnet_, i + 1);
}

std::vector<std::string> NetnsPair::exec_in(int i, const std::vector<std::string>& argv) const {
  std::vector<std::string> out{ip_path(), "netns", "exec", ns(i)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<pid_t> processes_with_env(const std::string& name_value) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(it->path() / "environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::size_t start = 0;
    while (start < env.size()) {
      std::size_t stop = env.find('\0', start);
      if (stop == std::string::npos) stop = env.size();
      if (env.compare(start, stop - start, name_value) == 0) {
        const pid_t pid = std::stoi(name);
        if (!process_gone(pid)) pids.push_back(pid);
        break;
      }
      start = stop + 1;
    }
  }
  return pids;
}

}  // namespace tandem::testing
