#include "check.hpp"

#include "host_info.hpp"
#include "output.hpp"
#include "rendezvous.hpp"
#include "session.hpp"
#include "tools_api/net.hpp"

#include <tandem/error.hpp>
#include <tandem/settings.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sys/statvfs.h>
#include <vector>

#ifndef TANDEM_BUILD_VERSION
#define TANDEM_BUILD_VERSION "unknown"
#endif

namespace tandem::tools::tandemrun {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Clocks further apart than this make timelines and logs of the nodes hard to line up.
constexpr double kClockWarnSeconds = 2.0;

struct Line {
  std::string check;
  std::string status;  // ok, WARN, FAIL
  std::string detail;
};

std::string mib(std::uint64_t bytes) {
  return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20));
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What this node can check by itself.
std::vector<Line> local_checks(const LaunchOptions& o) {
  std::vector<Line> lines;
  lines.push_back({"version", "ok", "tandem " TANDEM_BUILD_VERSION});
  try {
    const tools_api::IfnameSetting ifname = tools_api::socket_ifname_setting();
    const bool several = o.multi_node();
    // As in a worker, whose MASTER_ADDR tandemrun sets: the route to it picks the interface.
    if (several) ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
    const std::string address = ifname.list.empty() && !several ? std::string("127.0.0.1")
                                                                : tools_api::choose_listen_address(
                                                                      ifname.list, ifname.variable);
    if (several && address.starts_with("127.")) {
      lines.push_back({"interface", "FAIL",
                       fmt::format("the ranks would listen on {} (loopback): other nodes cannot "
                                   "reach them; set TANDEM_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME) "
                                   "to the interface that reaches the other nodes",
                                   address)});
    } else {
      lines.push_back(
          {"interface", "ok",
           ifname.list.empty()
               ? fmt::format("ranks listen on {} (the route to {})", address, o.master_addr)
               : fmt::format("ranks listen on {} ({}={})", address, ifname.variable, ifname.list)});
    }
  } catch (const Error& e) {
    lines.push_back({"interface", "FAIL", e.message()});
  }
  const std::size_t buffsize = tools_api::shm_buffer_setting();
  const bool shm_off = settings::get_bool("TANDEM_SHM_DISABLE");
  const std::size_t need = shm_off ? 0 : tools_api::shm_bytes_needed(o.nproc_per_node, buffsize);
  struct statvfs fs {};
  if (need == 0) {
    lines.push_back({"shm", "ok", "no shared memory needed (one local rank, or shm disabled)"});
  } else if (::statvfs("/dev/shm", &fs) != 0) {
    lines.push_back({"shm", "FAIL",
                     "/dev/shm is missing: mount a tmpfs there (mount -t tmpfs tmpfs /dev/shm), "
                     "or set TANDEM_SHM_DISABLE=1 to use TCP between local ranks"});
  } else {
    const std::uint64_t have = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
    const std::string what = fmt::format("/dev/shm has {} free, {} local ranks need {}", mib(have),
                                         o.nproc_per_node, mib(need));
    if (have >= need)
      lines.push_back({"shm", "ok", what});
    else
      lines.push_back(
          {"shm", "FAIL",
           fmt::format("{}: give the container more (docker run --shm-size=1g, Kubernetes: an "
                       "emptyDir with medium Memory on /dev/shm), or lower TANDEM_BUFFSIZE "
                       "({} now)",
                       what, buffsize == 0 ? std::string("auto") : mib(buffsize))});
  }
  const int gpus = count_gpus();
  if (o.devices.empty()) {
    lines.push_back({"gpus", "ok", fmt::format("{} NVIDIA GPU(s) visible; none asked for", gpus)});
  } else if (gpus == 0) {
    lines.push_back({"gpus", "FAIL",
                     fmt::format("{} device(s) asked for, but no NVIDIA GPU is visible (no "
                                 "/proc/driver/nvidia/gpus, no nvidia-smi): install the driver, "
                                 "or give the container the GPUs (docker run --gpus all)",
                                 o.devices.size())});
  } else {
    lines.push_back(
        {"gpus", "ok",
         fmt::format("{} NVIDIA GPU(s) visible, {} asked for", gpus, o.devices.size())});
  }
  return lines;
}

json to_json(const std::vector<Line>& lines) {
  json a = json::array();
  for (const Line& l : lines) a.push_back({l.check, l.status, l.detail});
  return a;
}

void print(int node, const std::string& host, const std::vector<Line>& lines) {
  const std::string who = node >= 0 ? std::to_string(node) : std::string("?");
  for (const Line& l : lines)
    write_all(1, fmt::format("check node {} ({}): {:<9} {:<4}  {}\n", who, host, l.check, l.status,
                             l.detail));
}

bool any_failed(const std::vector<Line>& lines) {
  return std::any_of(lines.begin(), lines.end(), [](const Line& l) { return l.status == "FAIL"; });
}

constexpr std::string_view kAdvice =
    "run tandemrun --check with the same flags on every node to see what a start needs";

// The store, hosted or reached as the run would: nullptr (and a FAIL line) when that fails.
std::unique_ptr<Session> connect_store(const LaunchOptions& options, std::vector<Line>& mine) {
  const StoreRole role = store_role(options);
  std::unique_ptr<Session> session;
  try {
    session = std::make_unique<Session>(options, role, [] {});
  } catch (const Error& e) {
    mine.push_back(
        {"store", "FAIL",
         fmt::format("{}{}", e.message(),
                     role == StoreRole::host
                         ? ": free the port or give another --master-port"
                         : ": check --master-addr/--master-port, that node 0 runs tandemrun "
                           "--check too, its firewall, and the same TANDEM_STORE_TOKEN")});
    return nullptr;
  }
  mine.push_back(
      {"store", "ok",
       fmt::format("{} the rendezvous store at {}, token accepted",
                   session->hosts_store() ? "hosting" : "reached", session->store_address())});
  return session;
}

// This node's place in the check's round (round 0): nullopt (and a FAIL line) when the nodes
// did not all join.
std::optional<Assignment> join_check_round(const LaunchOptions& options, Session& session,
                                           std::vector<Line>& mine) {
  Assignment a;
  try {
    a = join_round(
        options, session,
        [&](const std::vector<std::string>& keys, Deadline deadline) {
          try {
            session.store().wait(keys, deadline);
            return true;
          } catch (const Error& e) {
            if (e.code() == ErrorCode::Timeout) return false;
            throw;
          }
        },
        0,
        RoundRules{.min_nodes = options.min_nodes,
                   .max_nodes = options.max_nodes,
                   .want = options.node_rank});
    if (!a.admitted()) {
      throw RendezvousError(
          fmt::format("the check's round closed with {} node(s) without this "
                      "one: more nodes were started than --nnodes allows",
                      a.nnodes()));
    }
  } catch (const std::exception& e) {
    mine.push_back(
        {"nodes", "FAIL",
         fmt::format("{}; start tandemrun --check on every node with the same flags", e.what())});
    return std::nullopt;
  }
  mine.push_back({"nodes", "ok",
                  fmt::format("{} node(s) joined, {} rank(s) in all", a.nnodes(), a.world_size)});
  return a;
}

// Node 0 publishes its wall clock; each node compares its own the moment it sees it.
Line clock_line(store::Store& store, const std::string& base, const Assignment& a,
                Deadline deadline) {
  if (a.node_rank == 0) store.set(base + "clock", fmt::format("{:.6f}", wall_seconds()));
  store.wait(std::vector<std::string>{base + "clock"}, deadline);
  const double skew = wall_seconds() - std::stod(store.get(base + "clock", deadline));
  const std::string clock = fmt::format("{:+.3f} s from node 0's clock", skew);
  if (std::abs(skew) > kClockWarnSeconds)
    return {"clock", "WARN",
            clock +
                ": the nodes' logs and timelines will not line up; run NTP "
                "(chrony, systemd-timesyncd) on every node"};
  return {"clock", "ok", clock};
}

// Publishes this node's lines and prints every node's, each node's version held against node
// 0's. True when any line of any node failed.
bool exchange_lines(store::Store& store, const std::string& base, const Assignment& a,
                    const std::string& host, const std::vector<Line>& mine, Deadline deadline) {
  store.set(base + std::to_string(a.node_rank),
            json{{"host", host}, {"lines", to_json(mine)}}.dump());
  std::vector<std::string> keys;
  for (int n = 0; n < a.nnodes(); ++n) keys.push_back(base + std::to_string(n));
  store.wait(keys, deadline);
  bool failed = false;
  std::string node0_version;
  for (int n = 0; n < a.nnodes(); ++n) {
    const json j = json::parse(store.get(keys[static_cast<std::size_t>(n)], deadline));
    std::vector<Line> lines;
    for (const auto& l : j.at("lines"))
      lines.push_back(
          {l.at(0).get<std::string>(), l.at(1).get<std::string>(), l.at(2).get<std::string>()});
    // Every node must run node 0's tandem.
    for (Line& l : lines) {
      if (l.check != "version") continue;
      if (n == 0) node0_version = l.detail;
      if (l.detail != node0_version) {
        l.status = "FAIL";
        l.detail +=
            fmt::format(" but node 0 runs {}: install the same build on every node", node0_version);
      }
    }
    failed = failed || any_failed(lines);
    print(n, j.at("host").get<std::string>(), lines);
  }
  return failed;
}

// Node 0 (and its store) stays until every node has read everything.
void wait_for_readers(store::Store& store, const std::string& base, const Assignment& a,
                      Deadline deadline) {
  store.set(base + "read/" + std::to_string(a.node_rank), "1");
  if (a.node_rank == 0) {
    std::vector<std::string> read;
    for (int n = 0; n < a.nnodes(); ++n) read.push_back(base + "read/" + std::to_string(n));
    store.wait(read, deadline);
  }
}

}  // namespace

std::string_view check_advice() noexcept {
  return kAdvice;
}

int run_check(const LaunchOptions& options) {
  std::vector<Line> mine = local_checks(options);
  const std::string host = tools_api::local_host_name();
  const std::unique_ptr<Session> session = connect_store(options, mine);
  const std::optional<Assignment> a =
      session ? join_check_round(options, *session, mine) : std::nullopt;
  if (!a) {
    print(options.node_rank.value_or(-1), host, mine);
    return 1;
  }
  store::Store& store = session->store();
  const std::string base = session->keys().base + "/check/";
  const Deadline deadline = deadline_in(options.rdzv_timeout);
  mine.push_back(clock_line(store, base, *a, deadline));
  const bool failed = exchange_lines(store, base, *a, host, mine, deadline);
  wait_for_readers(store, base, *a, deadline);
  write_all(1, failed ? "check: FAILED (see the lines marked FAIL)\n" : "check: all passed\n");
  return failed ? 1 : 0;
}

}  // namespace tandem::tools::tandemrun
