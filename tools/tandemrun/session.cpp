#include "session.hpp"

#include "host_info.hpp"
#include "rendezvous.hpp"
#include "tools_api/net.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <filesystem>
#include <set>
#include <string_view>
#include <sys/resource.h>
#include <system_error>
#include <unistd.h>

extern char** environ;

namespace tandem::tools::tandemrun {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string random_hex(std::size_t n) {
  std::string bytes(n, '\0');
  tools_api::Fd fd(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!fd)
    TANDEM_THROW(ErrorCode::Io, "cannot open /dev/urandom: {}",
                 std::system_category().message(errno));
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd.get(), bytes.data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      TANDEM_THROW(ErrorCode::Io, "cannot read /dev/urandom: {}",
                   std::system_category().message(errno));
    got += static_cast<std::size_t>(r);
  }
  std::string hex;
  hex.reserve(2 * n);
  for (unsigned char c : bytes) hex += fmt::format("{:02x}", c);
  return hex;
}

std::string Keys::round(int r) const {
  return fmt::format("{}/{}", base, r);
}
std::string Keys::joined(int r) const {
  return round(r) + "/joined";
}
std::string Keys::node(int r, int arrival) const {
  return fmt::format("{}/node/{}", round(r), arrival);
}
std::string Keys::closed(int r) const {
  return round(r) + "/closed";
}
std::string Keys::current() const {
  return base + "/current";
}
std::string Keys::end(int r) const {
  return round(r) + "/end";
}
std::string Keys::done(int r) const {
  return round(r) + "/done";
}
std::string Keys::lost(int r) const {
  return round(r) + "/lost";
}
std::string Keys::report(int r, int node) const {
  return fmt::format("{}/report/{}", round(r), node);
}
std::string Keys::verdict(int r) const {
  return round(r) + "/verdict";
}
std::string Keys::heartbeat(int node) const {
  return fmt::format("{}/hb/{}", base, node);
}
std::string Keys::over() const {
  return base + "/over";
}
std::string Keys::over_seen(std::int64_t n) const {
  return n == 0 ? over() + "/seen" : fmt::format("{}/seen/{}", over(), n);
}
std::string Keys::bye(int node) const {
  return fmt::format("{}/bye/{}", base, node);
}

Session::Session(const LaunchOptions& options, StoreRole role,
                 const std::function<void()>& interrupted)
    : options_(options) {
  token_ = settings::get_string("TANDEM_STORE_TOKEN");
  if (token_.empty()) token_ = random_hex(16);  // one node only (checked when parsing)
  port_ = options.master_port;
  if (role == StoreRole::host) start_server(true);
  if (role == StoreRole::try_host && is_local_host(options.master_addr)) start_server(false);
  connect_client(interrupted);
  agree_on_run_id();
}

Session::~Session() = default;

void raise_fd_limit(std::size_t want) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= want) return;
  const rlim_t before = lim.rlim_cur;
  lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, want);
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur < want) {
    TANDEM_WARN(run,
                "tandemrun: a job of this size may need {} open files (the store's connections, "
                "and a worker's to every peer it exchanges messages with), but the open-file "
                "limit is {} (hard limit {}): raise it (ulimit -n)",
                want, lim.rlim_cur, lim.rlim_max);
    return;
  }
  TANDEM_DETAIL(run, "tandemrun: open-file limit raised from {} to {}", before, lim.rlim_cur);
}

void Session::start_server(bool must) {
  // Binding here (port 0 = the kernel picks) and handing the listening socket to the server
  // reserves the port without a window in which another process could take it.
  tools_api::Fd listener;
  try {
    listener = tools_api::listen_tcp(options_.master_addr, options_.master_port);
  } catch (const Error& e) {
    // Without --node-rank, a busy port on a local --master-addr may be node 0's store of this
    // very run (several nodes on one host): then this node joins it as a client.
    if (!must && e.message().find("already in use") != std::string::npos) return;
    throw;
  }
  port_ = tools_api::bound_port(listener.get());
  store::TcpStoreServerOptions so;
  so.bind_address = options_.master_addr;
  so.port = port_;
  so.token = token_;
  // A connection per rank and per node, whatever the world's size.
  const std::size_t world = static_cast<std::size_t>(std::max(options_.nproc_per_node, 1)) *
                            static_cast<std::size_t>(std::max(options_.max_nodes, 1));
  so.max_connections = std::max(so.max_connections, 2 * world + 64);
  // The workers inherit the limit: an all-to-all connects a rank to every peer (2 sockets
  // each, more with TANDEM_SOCKETS_PER_PEER).
  raise_fd_limit(4 * world + 256);
  server_ = std::make_unique<store::TcpStoreServer>(listener.release(), so);  // adopts the fd
  TANDEM_INFO(run, "tandemrun: hosting the rendezvous store at {}", store_address());
}

void Session::connect_client(const std::function<void()>& interrupted) {
  const std::string where = store_address();
  const Deadline deadline = deadline_in(options_.rdzv_timeout);
  // Until node 0 is up, only reachability is retried (in slices, so that a signal is seen);
  // once something answers on the port, it is tandemrun's store or an error.
  std::string last;
  while (server_ == nullptr) {
    try {
      tools_api::connect_tcp(options_.master_addr, port_, std::min(deadline, deadline_in(1s)));
      break;
    } catch (const Error& e) {
      last = e.message();
    }
    if (Clock::now() >= deadline) {
      TANDEM_THROW(ErrorCode::Timeout,
                   "cannot reach node 0's rendezvous store at {} within --rdzv-timeout {:g} s. "
                   "Check that tandemrun runs on node 0 with the same --master-addr/"
                   "--master-port, that {} is node 0's address as seen from this host "
                   "(MASTER_ADDR), and that no firewall blocks port {}. Last error: {}",
                   where, std::chrono::duration<double>(options_.rdzv_timeout).count(),
                   options_.master_addr, port_, last);
    }
    interrupted();
  }
  store::TcpStoreOptions o;
  o.token = token_;
  o.connect_timeout = 10s;
  o.timeout = 60s;
  try {
    client_ = std::make_unique<store::TcpStore>(options_.master_addr, port_, o);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::Unauthenticated) {
      TANDEM_THROW(ErrorCode::Unauthenticated,
                   "the store at {} rejected this node's TANDEM_STORE_TOKEN: set the same "
                   "TANDEM_STORE_TOKEN on every node",
                   where);
    }
    TANDEM_THROW(e.code(),
                 "something answers at {} but not as node 0's tandemrun (another program on "
                 "that port?): {}",
                 where, e.message());
  }
}

void Session::agree_on_run_id() {
  const std::string key = "rdzv/run_id";
  if (server_ != nullptr) {
    const std::string mine = options_.run_id.empty() ? random_hex(6) : options_.run_id;
    run_id_ = client_->compare_set(key, "", mine);
  } else {
    run_id_ = client_->get(key, deadline_in(options_.rdzv_timeout));
    if (!options_.run_id.empty() && options_.run_id != run_id_) {
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "node 0 (store at {}) runs run '{}' but this node was given --run-id '{}': "
                   "give every node the same --run-id/--rdzv-id",
                   store_address(), run_id_, options_.run_id);
    }
  }
  keys_.base = "rdzv/" + run_id_;
}

StoreRole store_role(const LaunchOptions& options) noexcept {
  if (!options.multi_node()) return StoreRole::host;
  if (!options.node_rank) return StoreRole::try_host;
  return *options.node_rank == 0 ? StoreRole::host : StoreRole::client;
}

std::string Session::store_address() const {
  return tools_api::format_host_port(options_.master_addr, port_);
}

std::unique_ptr<store::TcpStore> Session::connect() const {
  store::TcpStoreOptions o;
  o.token = token_;
  o.connect_timeout = 10s;
  o.timeout = 60s;
  return std::make_unique<store::TcpStore>(options_.master_addr, port_, o);
}

namespace {

// <build>/python next to <build>/bin/tandemrun, when it holds the tandem package.
std::string python_package_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const auto dir = exe.parent_path().parent_path() / "python";
  return std::filesystem::exists(dir / "tandem" / "torch.py", ec) ? dir.string() : std::string();
}

}  // namespace

void Session::add_paddle_env(const Assignment& a, int local_rank,
                             std::vector<std::pair<std::string_view, std::string>>& set) const {
  // What Paddle's launcher (python -m paddle.distributed.launch) gives each worker, field by
  // field: the trainers' endpoints are node addresses (--ips, else the one node's master
  // address, else the node's host name) with ports start_port + local rank.
  const NodeSlot& me = a.self();
  const auto host = [&](int node) {
    if (static_cast<std::size_t>(node) < options_.ips.size())
      return options_.ips[static_cast<std::size_t>(node)];
    return a.nnodes() == 1 ? a.master_addr : a.nodes.at(static_cast<std::size_t>(node)).host;
  };
  std::vector<std::string> endpoints;
  for (const NodeSlot& n : a.nodes)
    for (int i = 0; i < n.nproc; ++i)
      endpoints.push_back(tools_api::format_host_port(
          host(n.node), static_cast<std::uint16_t>(options_.start_port + i)));
  const auto rank = static_cast<std::size_t>(me.first_rank + local_rank);
  const std::string world = std::to_string(a.world_size);
  set.emplace_back("PADDLE_TRAINER_ID", std::to_string(rank));
  set.emplace_back("PADDLE_TRAINERS_NUM", world);
  set.emplace_back("PADDLE_TRAINER_ENDPOINTS", fmt::format("{}", fmt::join(endpoints, ",")));
  set.emplace_back("PADDLE_CURRENT_ENDPOINT", endpoints.at(rank));
  set.emplace_back("PADDLE_RANK_IN_NODE", std::to_string(local_rank));
  set.emplace_back("PADDLE_GLOBAL_RANK", std::to_string(rank));
  set.emplace_back("PADDLE_GLOBAL_SIZE", world);
  set.emplace_back("PADDLE_LOCAL_RANK", std::to_string(local_rank));
  set.emplace_back("PADDLE_LOCAL_SIZE", std::to_string(me.nproc));
  set.emplace_back("PADDLE_NNODES", std::to_string(a.nnodes()));
  set.emplace_back("PADDLE_MASTER", tools_api::format_host_port(a.master_addr, a.master_port));
  if (options_.devices.empty()) {
    set.emplace_back("PADDLE_DISTRI_BACKEND", "gloo");  // Paddle's choice without devices
  } else {
    // Paddle's device index: the listed one where CUDA_VISIBLE_DEVICES is left alone
    // (--selected_gpus), 0 where --gpus narrowed it to that one device.
    set.emplace_back("FLAGS_selected_gpus",
                     options_.paddle_devices
                         ? options_.devices.at(static_cast<std::size_t>(local_rank))
                         : std::string("0"));
  }
}

std::vector<std::string> Session::worker_env(const Assignment& a, int local_rank) const {
  const NodeSlot& me = a.self();
  const std::string rank = std::to_string(me.first_rank + local_rank);
  const std::string world = std::to_string(a.world_size);
  const std::string restarts = std::to_string(a.round);
  std::vector<std::pair<std::string_view, std::string>> set = {
      {"RANK", rank},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(me.nproc)},
      {"GROUP_RANK", std::to_string(a.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(a.nnodes())},
      {"ROLE_RANK", rank},
      {"ROLE_WORLD_SIZE", world},
      {"ROLE_NAME", options_.role},
      {"MASTER_ADDR", a.master_addr},
      {"MASTER_PORT", std::to_string(a.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", restarts},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options_.max_restarts)},
      {"TORCHELASTIC_RUN_ID", run_id_},
      {"TANDEM_STORE_TOKEN", token_},
      {"TANDEM_STORE_ADDR", store_address()},
      {"TANDEM_RUN_ID", run_id_},
      {"TANDEM_RESTART_COUNT", restarts},
  };
  if (!options_.devices.empty() && !options_.paddle_devices)
    set.emplace_back("CUDA_VISIBLE_DEVICES",
                     options_.devices.at(static_cast<std::size_t>(local_rank)));
  add_paddle_env(a, local_rank, set);
  std::set<std::string_view> names;
  for (const auto& [k, v] : set) names.insert(k);
  // Never inherited: with it a PyTorch worker would expect the launcher's store at
  // MASTER_PORT, which is the workers' own.
  names.insert("TORCHELASTIC_USE_AGENT_STORE");

  std::vector<std::string> env;
  bool has_omp = false;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const std::string_view name = kv.substr(0, kv.find('='));
    if (names.contains(name)) continue;
    if (name == "OMP_NUM_THREADS") {
      if (kv.size() == name.size() + 1) continue;  // set but empty: as unset
      has_omp = true;
    }
    env.emplace_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(fmt::format("{}={}", k, v));
  // The Python package of this build (backend "tandem" for torch.distributed), so that
  // `import tandem.torch` works in every worker without installing anything.
  if (const auto package = python_package_dir(); !package.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    std::erase_if(env, [](const std::string& kv) { return kv.starts_with("PYTHONPATH="); });
    env.push_back(old != nullptr && *old != '\0' ? fmt::format("PYTHONPATH={}:{}", package, old)
                                                 : fmt::format("PYTHONPATH={}", package));
  }
  // As torchrun: N workers each running a full OpenMP team would oversubscribe the host.
  if (!has_omp) env.emplace_back("OMP_NUM_THREADS=1");
  return env;
}

namespace {

fs::path make_log_dir(const fs::path& dir, std::string_view flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    TANDEM_THROW(ErrorCode::Io, "cannot create the log directory {}: {} (check {})", dir.string(),
                 ec.message(), flag);
  }
  return dir;
}

}  // namespace

std::string Session::log_path(int rank, int local_rank) const {
  if (!options_.paddle_log_dir.empty()) {
    return (make_log_dir(options_.paddle_log_dir, "--log_dir") /
            fmt::format("workerlog.{}", local_rank))
        .string();
  }
  if (options_.log_dir.empty()) return {};
  return (make_log_dir(fs::path(options_.log_dir) / run_id_, "--log-dir") /
          fmt::format("rank_{}.log", rank))
      .string();
}

int Session::remove_shm_segments() const {
  const std::string prefix = fmt::format("tandem-{}-", run_id_);
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/dev/shm", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) {
      ++removed;
    } else if (rm) {
      TANDEM_WARN(run, "tandemrun: cannot remove leftover segment {}: {}", it->path().string(),
                  rm.message());
    }
  }
  if (removed > 0)
    TANDEM_INFO(run, "tandemrun: removed {} leftover shared-memory segment(s) of run {}", removed,
                run_id_);
  return removed;
}

}  // namespace tandem::tools::tandemrun
