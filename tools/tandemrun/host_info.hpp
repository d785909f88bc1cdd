#pragma once
// What tandemrun needs to know about the host it runs on: how many CPUs and GPUs it may use,
// and which addresses are its own (to find its place in --ips, and to tell whether it is the
// host of --master-addr).

#include <optional>
#include <string>
#include <vector>

namespace tandem::tools::tandemrun {

/// Number of CPUs this process may run on (its affinity mask), at least 1.
int available_cpus();

/// NVIDIA GPUs of this host: entries of /proc/driver/nvidia/gpus, else the lines of
/// `nvidia-smi -L` (bounded wait). 0 when there are none or neither source exists.
int count_gpus();

/// Every IPv4/IPv6 address of this host's interfaces (getifaddrs), as numeric strings.
std::vector<std::string> local_addresses();

/// True when `host` (a name or literal) resolves to an address of this host. Unresolvable
/// names are not local.
bool is_local_host(const std::string& host);

/// Index in `hosts` (Paddle's --ips list) of the entry that is an address of this host.
/// Throws std::runtime_error with a one-line reason when none or several entries match.
int index_of_this_host(const std::vector<std::string>& hosts);

}  // namespace tandem::tools::tandemrun
