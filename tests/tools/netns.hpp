#pragma once
// Two "hosts" for multi-node tests: network namespaces tdm-<pid>-a and tdm-<pid>-b joined by a
// veth pair (named tdm0 on both sides), with addresses 10.213.X.1 and 10.213.X.2 that exist
// only inside them. Needs root and iproute2; deleted on destruction, and namespaces left by
// earlier test processes that died are deleted when a new pair is made.

#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace tandem::testing {

class NetnsPair {
 public:
  /// Why namespaces cannot be made here (not root, no `ip`), or nullopt when they can.
  static std::optional<std::string> unavailable();

  /// Creates both namespaces and the link. Throws std::runtime_error with the failing command
  /// and its output.
  NetnsPair();
  ~NetnsPair();
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  /// Namespace of node i (0 or 1).
  const std::string& ns(int i) const { return ns_.at(static_cast<std::size_t>(i)); }
  /// Address of node i inside its namespace.
  std::string addr(int i) const;
  /// The interface name of the link, the same on both sides.
  static std::string ifname() { return "tdm0"; }

  /// argv that runs `argv` inside node i's namespace.
  std::vector<std::string> exec_in(int i, const std::vector<std::string>& argv) const;

  /// Path of the `ip` tool, or empty.
  static std::string ip_path();

 private:
  std::vector<std::string> ns_;
  int subnet_ = 0;
};

/// Pids of the live (non-zombie) processes whose environment contains NAME=VALUE exactly.
std::vector<pid_t> processes_with_env(const std::string& name_value);

}  // namespace tandem::testing
