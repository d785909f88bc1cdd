// Communicator::from_env: the launcher conventions users already have. torchrun and
// tandemrun (RANK, WORLD_SIZE, ...; tandemrun's store at TANDEM_STORE_ADDR), Slurm's srun
// (SLURM_*), Open MPI's mpirun (OMPI_COMM_WORLD_*), MPICH/PMI (PMI_*), in that order of preference.

#include "comm/impl.hpp"
#include "comm/setup/bootstrap.hpp"
#include "core/net.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>

namespace tandem {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int parse_number(const char* name, const std::string& value, long min, long max) {
  long n = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  const auto [end, ec] = std::from_chars(first, last, n);
  if (ec != std::errc{} || end != last || n < min || n > max) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "{}='{}' is not a number in [{}, {}]: fix the launcher's environment", name, value,
                 min, max);
  }
  return static_cast<int>(n);
}

// Slurm writes per-node task counts as "4" or "2(x3),1": the first node's count.
std::optional<int> leading_number(const std::optional<std::string>& value) {
  if (!value) return std::nullopt;
  int n = 0;
  const auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), n);
  if (ec != std::errc{} || end == value->data()) return std::nullopt;
  return n;
}

struct Launch {
  int rank = 0;
  int size = 1;
  std::optional<int> local_rank;
  std::optional<int> local_size;
  const char* source = "";
  const char* rank_var = "";
  const char* size_var = "";
};

constexpr long kMaxRanks = 1 << 24;

std::optional<Launch> read_launch(const char* source, const char* rank_var, const char* size_var,
                                  const char* local_rank_var, const char* local_size_var) {
  const auto size = env(size_var);
  if (!size) return std::nullopt;
  const auto rank = env(rank_var);
  TANDEM_CHECK_ARG(rank.has_value(), "{} is set ({}) but {} is not: set both, or neither", size_var,
                   *size, rank_var);
  Launch l;
  l.source = source;
  l.rank_var = rank_var;
  l.size_var = size_var;
  l.size = parse_number(size_var, *size, 1, kMaxRanks);
  l.rank = parse_number(rank_var, *rank, 0, kMaxRanks);
  TANDEM_CHECK_ARG(l.rank < l.size, "{}={} is not below {}={}: fix the launcher's environment",
                   rank_var, l.rank, size_var, l.size);
  if (local_rank_var != nullptr) {
    if (auto v = env(local_rank_var)) l.local_rank = parse_number(local_rank_var, *v, 0, kMaxRanks);
  }
  if (local_size_var != nullptr) {
    if (auto v = env(local_size_var)) l.local_size = parse_number(local_size_var, *v, 1, kMaxRanks);
  }
  return l;
}

std::optional<Launch> detect_launch() {
  if (auto l =
          read_launch("torchrun/tandemrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))
    return l;
  if (auto rank = env("RANK")) {
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "RANK is set ({}) but WORLD_SIZE is not: set both (or launch with tandemrun)",
                 *rank);
  }
  if (auto l = read_launch("Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr)) {
    l->local_size = leading_number(env("SLURM_NTASKS_PER_NODE"));
    if (!l->local_size) l->local_size = leading_number(env("SLURM_STEP_TASKS_PER_NODE"));
    return l;
  }
  if (auto l = read_launch("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"))
    return l;
  return read_launch("MPICH/PMI", "PMI_RANK", "PMI_SIZE", nullptr, nullptr);
}

std::string store_address(const std::string& addr) {
  // "localhost" may resolve to ::1 on one side and 127.0.0.1 on the other.
  return addr == "localhost" ? std::string("127.0.0.1") : addr;
}

}  // namespace

std::shared_ptr<Communicator> Communicator::from_env(CommOptions options) {
  const auto launch = detect_launch();
  if (!launch || launch->size == 1) {
    TANDEM_INFO(init, "{}: running as a single rank",
                launch ? fmt::format("{}=1 ({})", launch->size_var, launch->source)
                       : std::string("no launcher environment (RANK/WORLD_SIZE, SLURM_PROCID/"
                                     "SLURM_NTASKS, OMPI_COMM_WORLD_*, PMI_*)"));
    return create(std::make_shared<store::HashStore>(), 0, 1, std::move(options));
  }
  const int rank = launch->rank;
  const int size = launch->size;
  const auto timeout = comm::timeout_from(options);
  const std::string token = settings::get_string("TANDEM_STORE_TOKEN");

  // Under tandemrun every rank joins the launcher's store (TANDEM_STORE_ADDR); MASTER_PORT
  // is then the workers' own port (what a PyTorch rank 0 binds), unused here. Otherwise rank
  // 0 hosts the store at MASTER_ADDR:MASTER_PORT.
  const std::string launcher_store = settings::get_string("TANDEM_STORE_ADDR");
  std::string addr;
  std::uint16_t port = 0;
  if (!launcher_store.empty()) {
    try {
      const auto hp = net::parse_host_port(launcher_store);
      addr = store_address(hp.host);
      port = hp.port;
    } catch (const Error& e) {
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "TANDEM_STORE_ADDR='{}' is not host:port ({}): fix or unset it", launcher_store,
                   e.message());
    }
  } else {
    addr = store_address(env("MASTER_ADDR").value_or("127.0.0.1"));
    const auto port_text = env("MASTER_PORT");
    TANDEM_CHECK_ARG(port_text.has_value(),
                     "{}={} ranks from {} but MASTER_PORT is not set: set MASTER_ADDR and "
                     "MASTER_PORT, or launch with tandemrun",
                     launch->size_var, size, launch->source);
    port = static_cast<std::uint16_t>(parse_number("MASTER_PORT", *port_text, 1, 65535));
  }

  // A replacement (TANDEM_JOIN=1) joins the running group; it never hosts the store.
  const bool joining = settings::get_bool("TANDEM_JOIN");
  std::unique_ptr<store::TcpStoreServer> server;
  if (launcher_store.empty() && rank == 0 && !joining) {
    store::TcpStoreServerOptions so;
    so.bind_address = addr;
    so.port = port;
    so.token = token;
    so.max_connections = std::max(so.max_connections, 2 * static_cast<std::size_t>(size) + 64);
    try {
      server = std::make_unique<store::TcpStoreServer>(so);
    } catch (const Error& e) {
      throw Error(e.code(),
                  fmt::format("rank 0 hosts the store at MASTER_ADDR:MASTER_PORT ({}:{}) and "
                              "could not: {}",
                              addr, port, e.message()),
                  __FILE__, __LINE__);
    }
  }
  store::TcpStoreOptions co;
  co.token = token;
  co.connect_timeout = timeout;
  co.timeout = timeout;
  auto store = std::make_shared<store::TcpStore>(addr, port, co);
  TANDEM_INFO(init, "from_env: rank {} of {} ({}), store {}:{}{}", rank, size, launch->source, addr,
              port,
              server                   ? " hosted by this rank"
              : launcher_store.empty() ? " hosted by rank 0"
                                       : " hosted by tandemrun");

  if (!options.timeout) options.timeout = timeout;
  if (joining) return join(std::move(store), std::move(options));
  auto impl = comm::build(std::move(store), rank, size, std::move(options), true);
  impl->rendezvous.server = std::move(server);
  if (launch->local_rank && *launch->local_rank != impl->id.local_rank)
    TANDEM_WARN(init,
                "the launcher says local rank {} but this host runs ranks such that this one is "
                "local rank {} of {}; using the latter",
                *launch->local_rank, impl->id.local_rank, impl->id.local_size);
  else if (launch->local_size && *launch->local_size != impl->id.local_size)
    TANDEM_INFO(init, "the launcher says {} ranks per host; this host runs {}", *launch->local_size,
                impl->id.local_size);
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

}  // namespace tandem
