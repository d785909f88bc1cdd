#include "transport/bootstrap.hpp"

#include "core/net.hpp"
#include "transport/mesh.hpp"
#include "transport/shm/wire.hpp"
#include "transport/tcp/wire.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>
#include <tandem/store.hpp>

#include <fmt/ranges.h>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sys/stat.h>

namespace tandem::transport {
namespace {

constexpr std::string_view kRecordVersion = "tandem-addr-2";

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto nl = text.find('\n', pos);
    const auto end = nl == std::string_view::npos ? text.size() : nl;
    out.push_back(text.substr(pos, end - pos));
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return out;
}

template <class T>
bool parse_int(std::string_view s, T& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string encode_record(const RankRecord& r) {
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}", kRecordVersion, r.address, r.port,
                     r.info.host, r.info.host_id, r.info.pid, r.shm_disable ? 1 : 0, r.streams,
                     r.ucx);
}

RankRecord decode_record(std::string_view text, int rank) {
  const auto f = split_lines(text);
  RankRecord r;
  r.info.rank = rank;
  int shm_disable = 0;
  const bool ok = f.size() == 9 && f[0] == kRecordVersion && !f[1].empty() &&
                  parse_int(f[2], r.port) && parse_int(f[5], r.info.pid) &&
                  parse_int(f[6], shm_disable) && parse_int(f[7], r.streams) && r.streams >= 1;
  if (!ok)
    TANDEM_THROW(ErrorCode::Internal,
                 "rank {} published an address record this rank cannot read ({:?}); every rank "
                 "must run the same tandem build",
                 rank, text.substr(0, 200));
  r.address = f[1];
  r.info.host = f[3];
  r.info.host_id = f[4];
  r.shm_disable = shm_disable != 0;
  r.ucx = f[8];
  return r;
}

std::string local_host_id() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  struct stat st {};
  const auto netns = ::stat("/proc/self/ns/net", &st) == 0 ? st.st_ino : 0;
  return fmt::format("{}/{}/{}", net::local_host_name(), boot_id, netns);
}

IfnameSetting socket_ifname_setting() {
  // NCCL's and Gloo's variables, which users bring along, where tandem's own is unset.
  IfnameSetting s;
  s.list = settings::get_string("TANDEM_SOCKET_IFNAME");
  for (const char* other : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* v = std::getenv(other);
    if (s.list.empty() && v != nullptr && *v != '\0') {
      s.list = v;
      s.variable = other;
    }
  }
  return s;
}

std::size_t shm_buffer_setting() {
  const std::string text = settings::get_string("TANDEM_BUFFSIZE");
  if (text == "auto") return 0;
  const auto bytes = settings::parse_bytes(text);
  TANDEM_CHECK_ARG(bytes && *bytes >= 4096,
                   "TANDEM_BUFFSIZE={:?} must be auto or a size of at least 4K (4M, 512K)", text);
  return static_cast<std::size_t>(*bytes);
}

std::size_t shm_bytes_needed(int local_ranks, std::size_t buffer_bytes) {
  if (local_ranks < 2) return 0;
  const auto senders = static_cast<std::size_t>(local_ranks - 1);
  const std::size_t channel = buffer_bytes != 0 ? buffer_bytes : shm_channel_bytes(senders);
  return static_cast<std::size_t>(local_ranks) *
         shm::segment_bytes(senders, shm::geometry_for(channel));
}

std::string choose_listen_address(const std::string& ifname, std::string_view source) {
  if (!ifname.empty()) {
    std::string chosen;
    std::string address = tcp::interface_address(ifname, source, &chosen);
    TANDEM_INFO(init, "listening on {} (interface {}: {}={}{})", address, chosen, source, ifname,
                source == "TANDEM_SOCKET_IFNAME" ? "" : ", as TANDEM_SOCKET_IFNAME is unset");
    return address;
  }
  const char* master = std::getenv("MASTER_ADDR");
  if (master != nullptr && *master != '\0' && !tcp::is_loopback(master)) {
    std::string local = tcp::route_address(master);
    if (!local.empty()) return local;
    TANDEM_WARN(init,
                "MASTER_ADDR={} cannot be resolved or routed; listening on loopback, so only "
                "ranks of this host can connect (set TANDEM_SOCKET_IFNAME to choose an interface)",
                master);
  }
  return "127.0.0.1";
}

std::vector<std::string> gather(store::Store& store, int rank, std::string_view value,
                                const GatherSpec& spec, Deadline deadline,
                                const std::function<void()>& check_peers, const ReadKeys& read_keys,
                                std::chrono::milliseconds poll) {
  const auto start = Clock::now();
  store.set(fmt::format("{}{}", spec.prefix, rank), value);
  const std::string count_key = fmt::format("{}published", spec.prefix);
  const std::string all_key = fmt::format("{}all", spec.prefix);
  if (spec.everyone > 0 && store.add(count_key, 1) == spec.everyone) store.set(all_key, {});
  testing::setup_step(fmt::format("published {}", spec.what));
  std::vector<std::string> keys;
  keys.reserve(spec.from.size() + 1);
  for (int p : spec.from) keys.push_back(fmt::format("{}{}", spec.prefix, p));
  if (spec.everyone > 0) keys.push_back(all_key);
  std::vector<std::string> values;
  try {
    if (read_keys) {
      values = read_keys(keys, deadline);
    } else {
      // multi_get in slices when a dead rank can be noticed meanwhile: it will never publish.
      for (;;) {
        const Deadline slice = check_peers ? std::min(deadline, deadline_in(poll)) : deadline;
        try {
          values = store.multi_get(keys, slice);
          break;
        } catch (const Error& e) {
          if (e.code() != ErrorCode::Timeout || slice >= deadline) throw;
        }
        check_peers();
      }
    }
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    std::vector<int> missing;
    for (std::size_t i = 0; i < spec.from.size(); ++i)
      if (!store.check(std::span<const std::string>(&keys[i], 1))) missing.push_back(spec.from[i]);
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    const std::string hint =
        "Are they running, with the same store address, world size and communicator? Did one "
        "of them fail?";
    if (missing.empty() && spec.everyone > 0)
      TANDEM_THROW(ErrorCode::Timeout,
                   "rank {} waited {:.1f} s for every rank to publish its {}: {} of {} have. The "
                   "others have not reached this point of communicator setup. {}",
                   rank, waited, spec.what, store.add(count_key, 0), spec.everyone, hint);
    TANDEM_THROW(ErrorCode::Timeout,
                 "rank {} waited {:.1f} s for the {} of ranks {} ({} of {} missing): they have "
                 "not reached this point of communicator setup. {}",
                 rank, waited, spec.what, fmt::join(missing, ", "), missing.size(),
                 spec.from.size(), hint);
  }
  values.resize(spec.from.size());
  testing::setup_step(fmt::format("gathered {}", spec.what));
  return values;
}

}  // namespace tandem::transport
