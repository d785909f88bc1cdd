#include "comm/setup/bootstrap.hpp"

#include "algorithms/direct.hpp"
#include "comm/choice/tuning.hpp"
#include "comm/diag/validate.hpp"
#include "comm/impl.hpp"
#include "core/futex.hpp"
#include "core/memory.hpp"
#include "core/net.hpp"
#include "core/prefault.hpp"
#include "core/reduce.hpp"
#include "core/trace.hpp"
#include "transport/bootstrap.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <unistd.h>

namespace tandem::comm {
std::chrono::milliseconds timeout_from(const CommOptions& o) {
  if (o.timeout) {
    TANDEM_CHECK_ARG(o.timeout->count() > 0, "CommOptions::timeout must be positive (got {} ms)",
                     o.timeout->count());
    return *o.timeout;
  }
  const auto t =
      std::chrono::ceil<std::chrono::milliseconds>(settings::get_seconds("TANDEM_TIMEOUT"));
  TANDEM_CHECK_ARG(t.count() > 0, "TANDEM_TIMEOUT must be positive (example: TANDEM_TIMEOUT=600)");
  return t;
}

namespace {

// Scratch mapped at setup (Communicator::Impl::scratch): covers the small and medium calls.
constexpr std::size_t kScratchReserve = 256u << 10;

transport::MeshOptions mesh_options(const CommOptions& o, std::chrono::milliseconds timeout) {
  transport::MeshOptions m;
  m.shm_disable = o.shm_disable ? *o.shm_disable : settings::get_bool("TANDEM_SHM_DISABLE");
  const std::string transport = settings::get_string("TANDEM_TRANSPORT");
  if (transport == "ucx") {
    m.transport = transport::NetTransport::ucx;
  } else if (transport == "tcp") {
    m.transport = transport::NetTransport::tcp;
  } else {
    TANDEM_CHECK_ARG(transport == "auto" || transport.empty(),
                     "TANDEM_TRANSPORT={:?}: use ucx, tcp or auto (UCX where an RDMA device is, "
                     "tcp elsewhere)",
                     transport);
  }
  const transport::IfnameSetting ifname = transport::socket_ifname_setting();
  m.socket_ifname = ifname.list;
  m.socket_ifname_source = ifname.variable;
  m.token = settings::get_string("TANDEM_STORE_TOKEN");
  const std::string spin = settings::get_string("TANDEM_SPIN_US");
  m.spin_auto = spin == "auto";
  if (!m.spin_auto) {
    std::int64_t spin_us = -1;
    const auto [end, ec] = std::from_chars(spin.data(), spin.data() + spin.size(), spin_us);
    TANDEM_CHECK_ARG(ec == std::errc() && end == spin.data() + spin.size() && spin_us >= 0,
                     "TANDEM_SPIN_US={:?} must be auto or microseconds >= 0 (0 blocks at once)",
                     spin);
    m.spin_time = std::chrono::microseconds(spin_us);
  }
  m.shm_buffer_bytes = transport::shm_buffer_setting();
  const auto sockets = settings::get_int("TANDEM_SOCKETS_PER_PEER");
  TANDEM_CHECK_ARG(sockets >= 1 && sockets <= 64,
                   "TANDEM_SOCKETS_PER_PEER={} is out of range (1 to 64; default 1)", sockets);
  m.sockets_per_peer = static_cast<int>(sockets);
  m.connect_timeout = timeout;
  m.host_label = o.host_label;
  return m;
}

std::size_t chunk_bytes_from_settings() {
  const auto chunk = settings::get_bytes("TANDEM_CHUNK_SIZE");
  TANDEM_CHECK_ARG(chunk >= 64, "TANDEM_CHUNK_SIZE={} is too small (at least 64; default 1M)",
                   chunk);
  return static_cast<std::size_t>(chunk / 64 * 64);
}

// Process-wide: every communicator of the process reads the same environment.
void stream_threshold_from_settings() {
  core::set_stream_threshold(static_cast<std::size_t>(settings::get_bytes("TANDEM_STREAM_BYTES")));
}

// Ranks with this rank's host_id, in rank order, are its host's ranks.
void find_local(const transport::Mesh& mesh, Identity& id) {
  const std::string& mine = mesh.peer_info(id.rank).host_id;
  id.local_rank = 0;
  id.local_size = 0;
  for (int r = 0; r < id.size; ++r) {
    if (mesh.peer_info(r).host_id != mine) continue;
    if (r < id.rank) ++id.local_rank;
    ++id.local_size;
  }
}

void log_summary(const Communicator::Impl& impl) {
  if (!log::enabled(log::Level::info, log::Subsys::init)) return;
  std::string links;
  if (impl.runner.mesh) {
    for (auto link : {transport::Link::shm, transport::Link::tcp, transport::Link::ucx}) {
      std::vector<int> ranks;
      for (int r = 0; r < impl.id.size; ++r)
        if (r != impl.id.rank && impl.runner.mesh->link(r) == link) ranks.push_back(r);
      if (ranks.empty()) continue;
      links +=
          fmt::format("{}{} to rank{} {}", links.empty() ? "" : ", ", transport::to_string(link),
                      ranks.size() > 1 ? "s" : "", format_ranks(ranks));
    }
    if (impl.config.hosts.spans_hosts())
      links += impl.config.hosts.ranks_per_host > 0
                   ? fmt::format("; {} hosts of {} ranks", impl.config.hosts.hosts,
                                 impl.config.hosts.ranks_per_host)
                   : fmt::format("; {} hosts of different sizes", impl.config.hosts.hosts);
  } else {
    links = "no peers";
  }
  TANDEM_INFO(init,
              "communicator '{}': rank {} of {}, local rank {} of {}; {}; kernels {}; timeout {} "
              "s; chunk {}{}",
              impl.rendezvous.prefix, impl.id.rank, impl.id.size, impl.id.local_rank,
              impl.id.local_size, links, core::kernel_target(),
              impl.config.timeout().count() / 1000.0, format_bytes(impl.config.chunk_bytes),
              impl.config.policy.spec().empty()
                  ? ""
                  : fmt::format("; forced algorithms '{}'", impl.config.policy.spec()));
  if (impl.id.size > 1) {
    const auto& reg = algorithms::Registry::builtin();
    TANDEM_INFO(init, "communicator '{}': allreduce: {}; broadcast: {}", impl.rendezvous.prefix,
                describe_choices(impl.config.policy, reg, CollectiveKind::allreduce, impl.id.size,
                                 &impl.config.hosts),
                describe_choices(impl.config.policy, reg, CollectiveKind::broadcast, impl.id.size,
                                 &impl.config.hosts));
  }
}

// TANDEM_TUNING_FILE: applies the entry for this communicator's context, if any, and returns
// what it applied ("none", or the entry's digest).
std::string choose_tuning(Communicator::Impl& impl) {
  const std::string path = settings::get_string("TANDEM_TUNING_FILE");
  if (path.empty()) return "none";
  auto file = load_tuning_file(path);
  const TuningContext context = tuning_context(*impl.runner.mesh);
  if (const TuningEntry* entry = file->match(context)) {
    TANDEM_INFO(init, "communicator '{}': applies tuning {}", impl.rendezvous.prefix, entry->label);
    impl.config.policy.set_tuning(std::move(file), entry);
    return entry->digest();
  }
  static std::mutex mutex;
  static std::vector<std::string> logged;
  const std::string key = fmt::format("{}|{}", path, to_string(context));
  const std::lock_guard lock(mutex);
  if (std::find(logged.begin(), logged.end(), key) == logged.end()) {
    logged.push_back(key);
    TANDEM_INFO(init,
                "TANDEM_TUNING_FILE={}: no entry for {} (this communicator's context); the "
                "built-in choices apply. Run tandem-perf --tune in this setting to add one "
                "(logged once)",
                path, to_string(context));
  }
  return "none";
}

// The tag of apply_tuning()'s broadcast (outside the communicator's sequence of calls).
constexpr std::uint32_t kTuningTag = 0x74756e65;  // "tune"

// Every rank must choose alike: rank 0's choice (or that it failed, and why) reaches every rank
// over the mesh, a tree broadcast of a fixed-size record, and each compares it with its own, so
// ranks given different files or settings fail here rather than in a mismatched call. Rank 0
// learns of a rank that refused when that rank stops (PeerLost).
void apply_tuning(Communicator::Impl& impl) {
  constexpr std::string_view kFailed = "failed: ";
  std::string applied;
  std::optional<Error> failed;
  try {
    applied = choose_tuning(impl);
  } catch (const Error& e) {
    failed = e;  // thrown after the broadcast, which every rank must take part in
    applied = fmt::format("{}{}", kFailed, e.message());
  }
  // Rank 0's text, cut to the record's size (a choice is "none" or a digest; only a failure's
  // message can be longer).
  std::array<char, 1024> mine{};
  std::array<char, 1024> first{};
  const std::size_t len = std::min(applied.size(), mine.size() - 1);
  std::copy_n(applied.data(), len, mine.data());
  algorithms::Call c;
  c.kind = CollectiveKind::broadcast;
  c.in = BufferView::raw(mine.data(), mine.size(), DataType::u8);
  c.out = BufferView::raw(first.data(), first.size(), DataType::u8);
  c.hosts = &impl.config.hosts;
  c.tag = kTuningTag;
  c.deadline = deadline_in(impl.config.timeout());
  const algorithms::Algorithm* tree =
      algorithms::Registry::builtin().find(CollectiveKind::broadcast, "tree");
  TANDEM_CHECK(tree != nullptr, "no tree broadcast registered");
  tree->run(c, *impl.runner.context);
  impl.runner.context->ran = nullptr;
  if (failed) throw *failed;
  if (impl.id.rank == 0) return;
  const std::string_view theirs(first.data(), ::strnlen(first.data(), first.size()));
  if (theirs.starts_with(kFailed))
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "communicator '{}': rank 0 could not apply its tuning file ({}); every rank "
                 "must see the same valid TANDEM_TUNING_FILE",
                 impl.rendezvous.prefix, theirs.substr(kFailed.size()));
  if (theirs != std::string_view(mine.data()))
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "communicator '{}': rank 0 applies tuning '{}' but rank {} applies '{}'; every "
                 "rank must see the same TANDEM_TUNING_FILE (and TANDEM_SHM_DISABLE)",
                 impl.rendezvous.prefix, theirs, impl.id.rank, applied);
}

[[noreturn]] void throw_lost(const std::string& who) {
  TANDEM_THROW(ErrorCode::PeerLost,
               "{} died or lost its connection to the store before this rank was connected to "
               "it; this rank cannot continue without it. Check that rank's output and exit "
               "status (a crash, the OOM killer, a signal)",
               who);
}

// A rank that dies during setup never publishes what the others wait for. Its store
// connection closes, though: the store server sets lost_key then (if the store can). Setup's
// store reads end at once when it is set (read_keys); its other waits ask for it (check_peers)
// when a dial or a connection fails, or where no socket would tell (transport::MeshOptions).
void watch_peers(const Identity& id, Rendezvous& rdv, std::string lost_key,
                 transport::MeshOptions& mesh_opts) {
  if (lost_key.empty()) {
    lost_key = rdv.prefix + "/lost";
    try {
      rdv.registered_lost = rdv.base_store->set_on_disconnect(
          lost_key, fmt::format("rank {} of communicator '{}' on {} (pid {})", id.rank, rdv.prefix,
                                net::local_host_name(), ::getpid()));
    } catch (const Error& e) {
      TANDEM_WARN(init,
                  "communicator '{}': the store cannot watch this rank's liveness ({}); a rank "
                  "that dies during setup is then noticed only at the timeout",
                  rdv.prefix, e.message());
    }
  }
  rdv.lost_key = lost_key;
  mesh_opts.check_peers = [store = rdv.base_store, key = lost_key] {
    const std::string keys[] = {key};
    if (store->check(keys)) throw_lost(store->get(key, deadline_in(std::chrono::seconds(10))));
  };
  // lost_key is a key of base_store (a split communicator's is its parent's): read the keys
  // there too.
  mesh_opts.read_keys = [base = rdv.base_store, scoped = rdv.store, key = std::move(lost_key),
                         poll = transport::liveness_period(id.size)](
                            std::span<const std::string> keys, Deadline deadline) {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(scoped->base_key(k));
    auto got = base->multi_get_or_stop(full, key, deadline, poll);
    if (got.stop) throw_lost(*got.stop);
    return std::move(got.values);
  };
  rdv.check_peers = mesh_opts.check_peers;
}

// What the first small collective of each common kind pays once and every later one does
// not, paid here: its checks, the selector's first choice for that kind, and the first
// reduction of each width of the vector kernels. (The transport's path is the same for
// every kind; a program's first call still warms that.)
void warm_paths(const Communicator::Impl& impl) {
  alignas(64) float in[16] = {};
  alignas(64) float out[64] = {};
  const AlgoPolicy& policy = impl.config.policy;
  for (const auto kind :
       {CollectiveKind::allreduce, CollectiveKind::broadcast, CollectiveKind::allgather}) {
    const auto n = static_cast<std::size_t>(kind == CollectiveKind::allgather ? impl.id.size : 1);
    if (n > std::size(out)) continue;
    algorithms::Call c;
    c.kind = kind;
    c.in = BufferView::of(std::span<float>(in, 1));
    c.out = BufferView::of(std::span<float>(out, n));
    c.hosts = &impl.config.hosts;
    validate(c, impl.id.rank, impl.id.size);
    // A forced or tuned choice that does not apply logs that once: left to a real call.
    if (policy.forced(kind).empty() && policy.tuning() == nullptr)
      (void)policy.choose(algorithms::Registry::builtin(), c, impl.id.size, "");
  }
  for (const std::size_t n : {2, 16}) core::reduce(out, in, out, n, DataType::f32, ReduceOp::sum);
}

// The tag of warm_direct()'s messages: every rank sends and receives them all before its
// first call, so no call's message can be taken for one of them.
constexpr std::uint32_t kWarmTag = 0x7761726d;  // "warm"

// A process's first cross-memory attach costs the kernel extra work (its first access to the
// peer's address space, and some more on the second), which would make the first one-copy
// allgather or broadcast of a program many times slower than the next
// (docs/benchmarks-small.md). Where every peer is on this host, one allgather and one
// broadcast of one element run here through the one-copy algorithms, every rank alike
// (outside the communicator's sequence of calls: nothing is recorded), and pay it. A rank
// that may not use cross-memory attach takes those algorithms' fallback, as a call would; a
// refusal is logged here, once, instead of at the first call.
void warm_direct(Communicator::Impl& impl) {
  if (!algorithms::detail::all_shm(*impl.runner.mesh)) return;
  const auto size = static_cast<std::size_t>(impl.id.size);
  float in = 0;
  std::vector<float> out(size);
  algorithms::Call c;
  c.in = BufferView::of(std::span<float>(&in, 1));
  c.hosts = &impl.config.hosts;
  c.tag = kWarmTag;
  c.deadline = deadline_in(impl.config.timeout());
  for (const auto kind : {CollectiveKind::allgather, CollectiveKind::broadcast}) {
    c.kind = kind;
    c.out =
        BufferView::of(std::span<float>(out.data(), kind == CollectiveKind::broadcast ? 1 : size));
    const algorithms::Algorithm* a = algorithms::Registry::builtin().find(kind, "direct");
    TANDEM_CHECK(a != nullptr, "no direct {} registered", to_string(kind));
    a->run(c, *impl.runner.context);
  }
  impl.runner.context->ran = nullptr;
}

}  // namespace

std::string format_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ',';
    if (j >= i + 2) {
      s += fmt::format("{}-{}", ranks[i], ranks[j]);
      i = j + 1;
    } else {
      s += fmt::format("{}", ranks[i]);
      ++i;
    }
  }
  return s;
}

std::unique_ptr<Communicator::Impl> build(std::shared_ptr<store::Store> store, int rank, int size,
                                          CommOptions options, bool is_world,
                                          std::string lost_key) {
  TANDEM_CHECK_ARG(size >= 1, "Communicator::create: size {} must be at least 1", size);
  TANDEM_CHECK_ARG(rank >= 0 && rank < size,
                   "Communicator::create: rank {} is out of range [0, {}) for size {}", rank, size,
                   size);
  if (!store) {
    TANDEM_CHECK_ARG(size == 1,
                     "Communicator::create: store is null (a group of {} ranks rendezvous "
                     "through a store: pass a TcpStore, FileStore or HashStore)",
                     size);
    store = std::make_shared<store::HashStore>();
  }

  // The kernel's registration for asymmetric fences waits out an RCU grace period in a
  // process with threads: begun now, it overlaps the rendezvous.
  if (size > 1) core::start_fence_registration();
  auto impl = std::make_unique<Communicator::Impl>();
  impl->id.rank = rank;
  impl->id.size = size;
  impl->id.is_world = is_world;
  impl->config.set_timeout(timeout_from(options));
  impl->config.chunk_bytes = chunk_bytes_from_settings();
  stream_threshold_from_settings();
  // The vector kernels' first call picks the instruction set (CPUID, which traps to the
  // hypervisor in a VM): paid here, not by the first reduction of 8 elements or more
  // (docs/benchmarks-small.md).
  (void)core::kernel_target();
  core::prefault_library_code();
  // Scratch for the calls up to a few hundred KiB, mapped and faulted in here rather than by
  // the first call of each larger size.
  impl->runner.scratch.reserve(kScratchReserve);
  // Read here so that a malformed TANDEM_CMA fails the setup with the setting's own error
  // instead of quietly leaving cross-memory attach off at the first broadcast.
  (void)settings::get_bool("TANDEM_CMA");
  impl->config.verify_calls = log::enabled(log::Level::detail, log::Subsys::coll);
  const auto& reg = algorithms::Registry::builtin();
  if (options.algorithm) {
    impl->config.policy = AlgoPolicy(*options.algorithm, "CommOptions::algorithm", reg);
  } else {
    impl->config.policy = AlgoPolicy(settings::get_string("TANDEM_ALGO"), "TANDEM_ALGO", reg);
  }
  auto mesh_opts = mesh_options(options, impl->config.timeout());
  impl->config.spin_time = mesh_opts.spin_time;

  std::string prefix = group_prefix(options);
  const std::uint64_t requests_before = store->requests();  // setup's, for the INFO line
  if (size > 1) {
    // Every rank counts the communicators it created under this prefix; the n-th of each
    // rank belong together, so creating a second group over the same store does not read
    // the first one's keys.
    const auto generation = store->add(fmt::format("{}/generation/{}", prefix, rank), 1);
    if (generation > 1) prefix = fmt::format("{}/{}", prefix, generation);
  }
  impl->rendezvous.prefix = prefix;
  if (is_world) impl->rendezvous.join_point = prefix;  // grow() and join() override it
  impl->rendezvous.base_store = store;
  impl->rendezvous.store = std::make_shared<store::PrefixStore>(prefix, store);
  impl->rendezvous.store->share_timeout(impl->config.shared_timeout());
  impl->config.lazy_start = options.lazy_start;
  impl->config.options = std::move(options);
  if (is_world) log::set_rank(rank, size);
  if (auto* sink = core::trace::Sink::get()) {
    // One process track per rank of the world; a split communicator gets a thread track there.
    if (is_world) sink->set_rank(rank);
    const int pid = is_world ? rank : std::max(sink->rank(), 0);
    impl->runner.diag.trace = sink->open(
        pid, is_world ? std::string("collectives")
                      : fmt::format("collectives of '{}' (rank {} of {})", prefix, rank, size));
  }

  const auto setup_start = Clock::now();
  if (size > 1) {
    watch_peers(impl->id, impl->rendezvous, std::move(lost_key), mesh_opts);
    try {
      impl->runner.mesh = transport::connect_mesh(*impl->rendezvous.store, rank, size, mesh_opts);
    } catch (const Error& e) {
      throw Error(e.code(),
                  fmt::format("creating communicator '{}' (rank {} of {}): {}", prefix, rank, size,
                              e.message()),
                  __FILE__, __LINE__);
    }
    impl->runner.context.emplace(
        algorithms::Context{*impl->runner.mesh, impl->runner.scratch, impl->config.chunk_bytes});
    find_local(*impl->runner.mesh, impl->id);
    // The worker's waits follow the mesh's: no spinning where the host's ranks outnumber its CPUs.
    if (mesh_opts.spin_auto && transport::oversubscribed(impl->id.local_size))
      impl->config.spin_time = std::chrono::nanoseconds(0);
    impl->config.hosts = algorithms::HostLayout::of(*impl->runner.mesh);
    apply_tuning(*impl);
    warm_paths(*impl);
    try {
      warm_direct(*impl);
    } catch (const Error& e) {
      // The first exchange after connecting: a rank whose own setup failed (a check after
      // the mesh, such as the tuning file's) is noticed here by the others, as PeerLost.
      // Anything else (a timeout, say) is named as what it is.
      const std::string_view where = e.code() == ErrorCode::PeerLost
                                         ? "the ranks connected, then a peer stopped before "
                                           "setup was complete (its own output says why)"
                                         : "in setup's first exchange after connecting";
      throw Error(e.code(),
                  fmt::format("creating communicator '{}' (rank {} of {}): {}: {}", prefix, rank,
                              size, where, e.message()),
                  __FILE__, __LINE__);
    }
    impl->runner.diag.monitor =
        Monitor::start(impl->rendezvous.store, rank, size, prefix,
                       settings::get_seconds("TANDEM_STALL_WARN"), impl->config.shared_timeout());
    impl->runner.diag.monitor->on_mismatch([self = impl.get()](const std::string& what) {
      self->runner.poison(
          ErrorCode::Mismatch,
          fmt::format("the ranks called different collectives (seen in their progress "
                      "reports): {}. Every rank must call the same collectives in the "
                      "same order with the same count, dtype and root",
                      what));
    });
  }
  log_summary(*impl);
  if (size > 1 && log::enabled(log::Level::info, log::Subsys::init)) {
    const core::ProcessMemory memory = core::process_memory();
    constexpr double kMiB = 1 << 20;
    TANDEM_INFO(init,
                "communicator '{}': set up in {:.1f} ms with {} store requests; process memory "
                "{:.1f} MiB resident ({:.1f} MiB of it shared memory), peak {:.1f} MiB",
                prefix,
                std::chrono::duration<double, std::milli>(Clock::now() - setup_start).count(),
                store->requests() - requests_before, memory.resident / kMiB, memory.shared / kMiB,
                memory.peak / kMiB);
  }
  impl->exec->attach(impl->runner, impl->config.lazy_start, impl->config.spin_time);
  impl->exec->bias_to_caller(size);  // before any other thread can reach it
  return impl;
}

std::string group_prefix(const CommOptions& options) {
  return options.store_prefix.empty()
             ? fmt::format("tandem/r{}/world", settings::get_int("TANDEM_RESTART_COUNT"))
             : options.store_prefix;
}

std::shared_ptr<Communicator> after_barrier(std::shared_ptr<Communicator> comm,
                                            const std::string& who) {
  try {
    comm->barrier();
  } catch (const Error& e) {
    throw Error(
        e.code(),
        fmt::format("{} was lost while the new communicator was set up: {}", who, e.message()),
        __FILE__, __LINE__);
  }
  return comm;
}

}  // namespace tandem::comm

namespace tandem {

std::shared_ptr<Communicator> Communicator::create(std::shared_ptr<store::Store> store, int rank,
                                                   int size, CommOptions options) {
  auto impl = comm::build(std::move(store), rank, size, std::move(options), true);
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

}  // namespace tandem
