#include "options.hpp"

#include "host_info.hpp"
#include "tools_api/net.hpp"

#include <tandem/error.hpp>
#include <tandem/settings.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string_view>

namespace tandem::tools::tandemrun {
namespace {

constexpr int kMaxProcs = 4096;
constexpr int kMaxNodes = 4096;
constexpr std::uint16_t kMultiNodePort = 29500;  // torchrun's default

// A bad value: one line says what is wrong with it.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A malformed command line: the line is followed by the usage.
class SyntaxError : public UsageError {
 public:
  using UsageError::UsageError;
};

class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return fmt::format("Usage: {} [OPTIONS] [--] PROGRAM [ARGS...]\n", name);
  }
};

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  while (true) {
    const auto comma = text.find(',');
    out.emplace_back(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

int parse_nproc(const std::string& text) {
  if (text == "cpu") return available_cpus();
  if (text == "gpu" || text == "auto") {
    const int gpus = count_gpus();
    if (gpus > 0) return gpus;
    if (text == "auto") return available_cpus();
    throw UsageError(
        "--nproc-per-node gpu: no NVIDIA GPU found (no /proc/driver/nvidia/gpus, and nvidia-smi "
        "-L lists none); give a number of workers, or 'cpu'");
  }
  const auto n = parse_int(text);
  if (!n) {
    throw UsageError(fmt::format(
        "--nproc-per-node '{}' is not a number of workers (use e.g. 4, 'auto', 'cpu' or 'gpu')",
        text));
  }
  if (*n < 1) throw UsageError(fmt::format("--nproc-per-node must be at least 1 (got {})", *n));
  if (*n > kMaxProcs)
    throw UsageError(fmt::format("--nproc-per-node {} is more than {} workers", *n, kMaxProcs));
  return *n;
}

void parse_nnodes(const std::string& text, LaunchOptions& o) {
  const auto colon = text.find(':');
  const auto lo = parse_int(std::string_view(text).substr(0, colon));
  const auto hi =
      colon == std::string::npos ? lo : parse_int(std::string_view(text).substr(colon + 1));
  if (!lo || !hi || *lo < 1 || *hi < *lo || *hi > kMaxNodes) {
    throw UsageError(fmt::format(
        "--nnodes '{}': give a number of nodes N (1..{}) or MIN:MAX with 1 <= MIN <= MAX", text,
        kMaxNodes));
  }
  o.min_nodes = *lo;
  o.max_nodes = *hi;
}

int parse_mask(std::string_view text, std::string_view flag) {
  const auto v = parse_int(text);
  if (!v || *v < 0 || *v > 3) {
    throw UsageError(fmt::format(
        "{} '{}': expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), optionally per "
        "local rank as 0:3,1:2",
        flag, text));
  }
  return *v;
}

StreamMask parse_stream_mask(const std::string& text, std::string_view flag) {
  StreamMask m;
  if (text.find(':') == std::string::npos) {
    m.by_default = parse_mask(text, flag);
    return m;
  }
  for (const auto& item : split_list(text)) {
    const auto colon = item.find(':');
    const auto rank = colon == std::string::npos
                          ? std::nullopt
                          : parse_int(std::string_view(item).substr(0, colon));
    if (!rank || *rank < 0)
      throw UsageError(fmt::format("{} '{}': '{}' is not LOCAL_RANK:MASK", flag, text, item));
    m.per_rank.emplace_back(*rank, parse_mask(std::string_view(item).substr(colon + 1), flag));
  }
  return m;
}

std::vector<int> parse_rank_list(const std::string& text) {
  std::vector<int> out;
  for (const auto& item : split_list(text)) {
    const auto r = parse_int(item);
    if (!r || *r < 0) {
      throw UsageError(fmt::format(
          "--local-ranks-filter '{}': '{}' is not a local rank (give e.g. 0 or 0,2)", text, item));
    }
    out.push_back(*r);
  }
  return out;
}

void check_run_id(const std::string& id) {
  const bool ok = !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
  if (!ok) {
    throw UsageError(fmt::format(
        "--run-id '{}': use 1 to 64 letters, digits, '.', '_' or '-' (it names shared-memory "
        "segments, store keys and log folders)",
        id));
  }
}

std::chrono::milliseconds seconds_option(double s, std::string_view flag, double min, double max) {
  if (!(s >= min) || s > max)
    throw UsageError(fmt::format("{} {}: use {:g} to {:g} seconds", flag, s, min, max));
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(s * 1000)));
}

// torchrun's --rdzv-conf: the keys that mean something here; any other is refused.
void parse_rdzv_conf(const std::string& text, LaunchOptions& o) {
  if (text.empty()) return;
  for (const auto& item : split_list(text)) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    double value = 0;
    const char* v = eq == std::string::npos ? nullptr : item.c_str() + eq + 1;
    const auto parsed = v == nullptr ? std::from_chars_result{nullptr, std::errc::invalid_argument}
                                     : std::from_chars(v, item.c_str() + item.size(), value);
    if (parsed.ec != std::errc() || parsed.ptr != item.c_str() + item.size()) {
      throw UsageError(
          fmt::format("--rdzv-conf '{}': give KEY=SECONDS pairs separated by commas", text));
    }
    if (key == "join_timeout") {
      o.rdzv_timeout = seconds_option(value, "--rdzv-conf join_timeout", 0.1, 86400 * 7);
    } else if (key == "last_call_timeout") {
      o.last_call = seconds_option(value, "--rdzv-conf last_call_timeout", 0, 86400);
    } else {
      throw UsageError(fmt::format(
          "--rdzv-conf: unknown key '{}' (known: join_timeout, last_call_timeout)", key));
    }
  }
}

void print_usage_error(const CLI::App& app, std::string_view what, bool with_usage) {
  std::fprintf(stderr, "tandemrun: %.*s\n", static_cast<int>(what.size()), what.data());
  if (with_usage) {
    std::fprintf(stderr, "%sRun 'tandemrun --help' for every option.\n",
                 Formatter().make_usage(&app, "tandemrun").c_str());
  }
}

// Raw values of the flags, before they are checked against each other.
struct Raw {
  std::string nproc, nnodes = "1", master_port, run_id, rdzv_endpoint, rdzv_backend = "static";
  std::string rdzv_conf;
  std::string redirects, tee, gpus, selected_gpus, ips, start_port, ranks_filter, cpu_bind = "none";
  int node_rank = -1, max_restarts = 0, max_replacements = 0;
  std::string on_worker_loss = "restart";
  double grace_s = 10, rdzv_timeout_s = 900, monitor_s = 1;
  bool standalone = false, no_python = false, module = false, use_env = false;
};

// The options of each --help group, in the order --help lists them.
void add_worker_options(CLI::App& app, Raw& raw, LaunchOptions& o) {
  const std::string workers = "Workers";
  app.add_option("--nproc-per-node,--nproc_per_node", raw.nproc,
                 "Workers on this node: a number; 'cpu' (one per CPU); 'gpu' (one per NVIDIA "
                 "GPU); 'auto' (GPUs if any, else CPUs)")
      ->group(workers)
      ->type_name("N")
      ->option_text("N|auto|cpu|gpu (required unless --gpus)");
  app.add_option("--gpus,--devices", raw.gpus,
                 "Paddle style: one worker per listed device; local rank i gets "
                 "CUDA_VISIBLE_DEVICES=<i-th entry>")
      ->group(workers)
      ->type_name("LIST")
      ->option_text("0,1,... (default: none)");
  app.add_option("--selected_gpus,--selected-gpus", raw.selected_gpus,
                 "Paddle's meaning: one worker per listed device; local rank i gets "
                 "FLAGS_selected_gpus=<i-th entry>, CUDA_VISIBLE_DEVICES stays as it is")
      ->group(workers)
      ->type_name("LIST");
  app.add_option("--start_port,--start-port", raw.start_port,
                 "Paddle's endpoints: local rank i's port in PADDLE_TRAINER_ENDPOINTS is this + "
                 "i (default: FLAGS_START_PORT, else PADDLE_START_PORT, else 6070)")
      ->group(workers)
      ->type_name("PORT");
  app.add_option("--cpu-bind,--cpu_bind", raw.cpu_bind,
                 "Bind each local rank before it starts: 'core' (its own cores, ranks spread over "
                 "NUMA nodes), 'numa' (every CPU of one NUMA node, round robin) or 'none'")
      ->option_text("core|numa|none (default none)");
  app.add_option("--role", o.role, "ROLE_NAME given to the workers")
      ->group(workers)
      ->capture_default_str();
  app.add_flag("--no-python,--no_python", raw.no_python,
               "Run PROGRAM directly even when it is a .py file (default: a .py PROGRAM runs "
               "with $TANDEM_PYTHON, else python3 from PATH, as torchrun does)")
      ->group(workers);
  app.add_flag("-m,--module", raw.module,
               "PROGRAM is a Python module, run as `python3 -u -m PROGRAM` (torchrun's -m)")
      ->group(workers);
  app.add_flag("--pass-local-rank,--pass_local_rank", o.pass_local_rank,
               "Append --local_rank=N to each worker's arguments (torch.distributed.launch's "
               "convention for scripts that parse it)")
      ->group(workers);
  app.add_flag("--check", o.check,
               "Check instead of running: the store, the nodes, the tandem version, the "
               "interface, /dev/shm, GPUs and clocks, on every node (same flags as the real "
               "run); one line per check and node, exit 1 if any failed")
      ->group(workers);
  app.add_flag("--use-env,--use_env", raw.use_env,
               "Accepted for torch.distributed.launch compatibility: LOCAL_RANK is always set")
      ->group(workers);
}

void add_node_options(CLI::App& app, Raw& raw, LaunchOptions& o) {
  const std::string nodes = "Nodes and rendezvous";
  app.add_option("--nnodes", raw.nnodes,
                 "Number of nodes, or MIN:MAX (the round closes at MAX, or at --rdzv-timeout "
                 "with at least MIN)")
      ->group(nodes)
      ->type_name("N|MIN:MAX")
      ->capture_default_str();
  app.add_option("--node-rank,--node_rank", raw.node_rank,
                 "Rank of this node (0 hosts the store); default: from --ips, else node 0 is "
                 "the host of --master-addr and the others follow in order of arrival")
      ->group(nodes)
      ->type_name("R")
      ->option_text("R (default: automatic)");
  app.add_option("--ips", raw.ips,
                 "Paddle style: every node's address, the same list on every node; --nnodes is "
                 "its length, --master-addr its first entry, and each node finds its rank in it")
      ->group(nodes)
      ->type_name("A,B,...");
  app.add_option("--master-addr,--master_addr", o.master_addr,
                 "Address of node 0, where its tandemrun hosts the rendezvous store (an address "
                 "of node 0, reachable from every node)")
      ->group(nodes)
      ->capture_default_str();
  app.add_option("--master-port,--master_port", raw.master_port,
                 "Port of the rendezvous store on node 0")
      ->group(nodes)
      ->option_text(
          fmt::format("PORT (default: a free port on one node, {} on several)", kMultiNodePort));
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", raw.rdzv_endpoint,
                 "HOST[:PORT]: same as --master-addr/--master-port")
      ->group(nodes)
      ->type_name("HOST[:PORT]");
  app.add_option("--run-id,--run_id,--rdzv-id,--rdzv_id", raw.run_id,
                 "Name of this run, the same on every node (TANDEM_RUN_ID, TORCHELASTIC_RUN_ID); "
                 "default: generated by node 0")
      ->group(nodes)
      ->type_name("ID");
  app.add_option("--rdzv-timeout,--rdzv_timeout", raw.rdzv_timeout_s,
                 "Seconds to wait for node 0's store and for the other nodes to join")
      ->group(nodes)
      ->type_name("SECONDS")
      ->capture_default_str();
  app.add_option("--rdzv-conf,--rdzv_conf", raw.rdzv_conf,
                 "KEY=VALUE,...: join_timeout=SECONDS (as --rdzv-timeout), last_call_timeout="
                 "SECONDS (how long a round stays open for more nodes once MIN of --nnodes "
                 "MIN:MAX joined; default 30)")
      ->group(nodes)
      ->type_name("KEY=VALUE,...");
  app.add_option("--rdzv-backend,--rdzv_backend", raw.rdzv_backend,
                 "Accepted for torchrun compatibility: static or c10d (node 0 hosts the store)")
      ->group(nodes)
      ->capture_default_str();
  app.add_flag("--standalone", raw.standalone,
               "One node, store on loopback at a free port (the defaults)")
      ->group(nodes);
}

void add_output_options(CLI::App& app, Raw& raw, LaunchOptions& o) {
  const std::string out = "Output";
  app.add_option("--log-dir", o.log_dir,
                 "Also write each worker's output to DIR/RUN_ID/rank_N.log (N: global rank)")
      ->group(out)
      ->type_name("DIR");
  app.add_option("--log_dir", o.paddle_log_dir,
                 "Paddle's layout: also write each worker's output to DIR/workerlog.N (N: local "
                 "rank)")
      ->group(out)
      ->type_name("DIR");
  app.add_option("-r,--redirects", raw.redirects,
                 "Streams written only to the log files, not the console: 0 none, 1 stdout, "
                 "2 stderr, 3 both, or per local rank (0:3,1:2); needs --log-dir")
      ->group(out)
      ->type_name("MASK")
      ->option_text("MASK (default: 0)");
  app.add_option("-t,--tee", raw.tee,
                 "Accepted for torchrun compatibility: output reaches the console and, with "
                 "--log-dir, the log files")
      ->group(out)
      ->type_name("MASK");
  app.add_option("--local-ranks-filter,--local_ranks_filter", raw.ranks_filter,
                 "Only these local ranks' output reaches the console (log files get all)")
      ->group(out)
      ->type_name("R,...")
      ->option_text("R,... (default: all)");
}

void add_supervision_options(CLI::App& app, Raw& raw) {
  const std::string sup = "Supervision";
  app.add_option("--max-restarts,--max_restarts", raw.max_restarts,
                 "Times every worker on every node is restarted after a worker fails")
      ->group(sup)
      ->capture_default_str();
  app.add_option("--on-worker-loss,--on_worker_loss", raw.on_worker_loss,
                 "restart: a worker's death stops every worker (and restarts them, with "
                 "--max-restarts); continue: a worker killed by a signal leaves the others "
                 "running, to go on without it")
      ->group(sup)
      ->check(CLI::IsMember({"restart", "continue"}))
      ->capture_default_str();
  app.add_option("--max-replacements,--max_replacements", raw.max_replacements,
                 "With --on-worker-loss continue: lost workers (in all, on this node) replaced "
                 "by a new process that joins the running group (TANDEM_JOIN=1) and takes its "
                 "state from a peer")
      ->group(sup)
      ->capture_default_str();
  app.add_option("--monitor-interval,--monitor_interval", raw.monitor_s,
                 "Seconds between heartbeats of the nodes' tandemruns (a node silent for "
                 "5 intervals, at least 5 s, is lost)")
      ->group(sup)
      ->type_name("SECONDS")
      ->capture_default_str();
  app.add_option("--grace-period,--grace_period", raw.grace_s,
                 "Seconds the workers get to exit after SIGTERM before SIGKILL")
      ->group(sup)
      ->type_name("SECONDS")
      ->capture_default_str();
}

void add_options(CLI::App& app, Raw& raw, LaunchOptions& o) {
  add_worker_options(app, raw, o);
  add_node_options(app, raw, o);
  add_output_options(app, raw, o);
  add_supervision_options(app, raw);
}

// A Python PROGRAM (a .py file, or a module with -m) runs behind the interpreter, as under
// torchrun; anything else runs directly.
std::vector<std::string> python_command(std::vector<std::string> command, const Raw& raw) {
  if (raw.no_python && raw.module)
    throw UsageError("--no-python and -m exclude each other: a module needs the interpreter");
  const std::string& program = command.front();
  const bool script = program.size() > 3 && program.ends_with(".py");
  if (raw.no_python || (!raw.module && !script)) return command;
  std::string python = settings::get_string("TANDEM_PYTHON");
  if (python.empty()) python = "python3";
  std::vector<std::string> out{python, "-u"};
  if (raw.module) out.emplace_back("-m");
  out.insert(out.end(), std::make_move_iterator(command.begin()),
             std::make_move_iterator(command.end()));
  return out;
}

// The devices of --gpus or --selected_gpus.
std::vector<std::string> device_list(const std::string& text, std::string_view flag) {
  auto devices = split_list(text);
  for (const auto& d : devices) {
    if (d.empty())
      throw UsageError(fmt::format("{} '{}': an empty entry (give e.g. 0,1)", flag, text));
  }
  if (devices.size() > static_cast<std::size_t>(kMaxProcs))
    throw UsageError(fmt::format("{} lists more than {} devices", flag, kMaxProcs));
  return devices;
}

// The workers of this node: --nproc-per-node, the devices, the CPU binding.
void finish_workers(const Raw& raw, LaunchOptions& o) {
  if (!raw.selected_gpus.empty() && !raw.gpus.empty())
    throw UsageError("--gpus and --selected_gpus both list devices: give one of them");
  if (!raw.gpus.empty()) o.devices = device_list(raw.gpus, "--gpus");
  if (!raw.selected_gpus.empty()) {
    o.devices = device_list(raw.selected_gpus, "--selected_gpus");
    o.paddle_devices = true;
  }
  const auto bind = tools_api::parse_cpu_bind(raw.cpu_bind);
  if (!bind) {
    throw UsageError(fmt::format("--cpu-bind '{}' is not a binding policy: use core, numa or none",
                                 raw.cpu_bind));
  }
  o.cpu_bind = *bind;
  if (raw.nproc.empty() && o.devices.empty())
    throw SyntaxError("--nproc-per-node is required (e.g. --nproc-per-node 4)");
  if (!raw.nproc.empty()) o.nproc_per_node = parse_nproc(raw.nproc);
  if (!o.devices.empty()) {
    const int n = static_cast<int>(o.devices.size());
    if (!raw.nproc.empty() && o.nproc_per_node != n) {
      throw UsageError(
          fmt::format("--nproc-per-node {} and --gpus {} ({} devices) disagree; give one of them",
                      raw.nproc, raw.gpus, n));
    }
    o.nproc_per_node = n;
  }
}

// --rdzv-endpoint HOST[:PORT]: --master-addr and --master-port unless they are given.
void apply_rdzv_endpoint(const Raw& raw, LaunchOptions& o, bool addr_given) {
  if (raw.rdzv_endpoint.empty()) return;
  tools_api::HostPort hp;
  try {
    hp = tools_api::parse_host_port(raw.rdzv_endpoint, std::uint16_t{kMultiNodePort});
  } catch (const Error& e) {
    throw UsageError(fmt::format("--rdzv-endpoint: {}", e.message()));
  }
  if (!addr_given) o.master_addr = hp.host;
  if (raw.master_port.empty()) o.master_port = hp.port;
}

// --ips (Paddle's): the nodes, node 0's address, and this node's rank among them.
void apply_ips(const CLI::App& app, const Raw& raw, LaunchOptions& o, bool addr_given) {
  if (raw.ips.empty()) return;
  const auto ips = split_list(raw.ips);
  o.ips = ips;
  for (std::size_t i = 0; i < ips.size(); ++i) {
    if (ips[i].empty())
      throw UsageError(
          fmt::format("--ips '{}': an empty entry (give e.g. 10.0.0.1,10.0.0.2)", raw.ips));
    if (std::find(ips.begin(), ips.begin() + static_cast<std::ptrdiff_t>(i), ips[i]) !=
        ips.begin() + static_cast<std::ptrdiff_t>(i))
      throw UsageError(fmt::format("--ips '{}': {} is listed twice", raw.ips, ips[i]));
  }
  const int n = static_cast<int>(ips.size());
  if (app.count("--nnodes") > 0 && (o.min_nodes != n || o.max_nodes != n)) {
    throw UsageError(fmt::format("--nnodes {} and --ips {} ({} nodes) disagree; give one of them",
                                 raw.nnodes, raw.ips, n));
  }
  o.min_nodes = o.max_nodes = n;
  if (!addr_given && raw.rdzv_endpoint.empty()) o.master_addr = ips.front();
  if (raw.node_rank < 0) {
    try {
      o.node_rank = index_of_this_host(ips);
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());
    }
  }
}

// The nodes: how many, which one this is, where node 0 is.
void finish_nodes(const CLI::App& app, const Raw& raw, LaunchOptions& o) {
  parse_nnodes(raw.nnodes, o);
  if (raw.rdzv_backend != "static" && raw.rdzv_backend != "c10d") {
    throw UsageError(
        fmt::format("--rdzv-backend '{}': use static or c10d (both mean: node 0 hosts the store)",
                    raw.rdzv_backend));
  }
  const bool addr_given = app.count("--master-addr") > 0;
  apply_rdzv_endpoint(raw, o, addr_given);
  apply_ips(app, raw, o, addr_given);
  if (raw.standalone) {
    if (o.max_nodes > 1) {
      throw UsageError(fmt::format(
          "--standalone runs one node, but --nnodes is {}: drop one of them", raw.nnodes));
    }
    if (!addr_given) o.master_addr = "127.0.0.1";
  }
  if (raw.node_rank >= 0) o.node_rank = raw.node_rank;
  if (app.count("--node-rank") > 0 && raw.node_rank < 0)
    throw UsageError(fmt::format("--node-rank {} is negative", raw.node_rank));
  if (o.node_rank && *o.node_rank >= o.max_nodes) {
    throw UsageError(fmt::format("--node-rank {} is not below --nnodes {} (node ranks are 0..{})",
                                 *o.node_rank, raw.nnodes, o.max_nodes - 1));
  }
  if (o.max_nodes == 1) o.node_rank = 0;
}

// Paddle's endpoints: the flag, else the variables Paddle's launchers read.
void finish_start_port(const Raw& raw, LaunchOptions& o) {
  std::string text = raw.start_port, source = "--start_port";
  for (const char* name : {"FLAGS_START_PORT", "PADDLE_START_PORT"}) {
    const char* v = std::getenv(name);
    if (text.empty() && v != nullptr && *v != '\0') {
      text = v;
      source = name;
    }
  }
  if (!text.empty()) {
    const auto p = tools_api::parse_port(text);
    if (!p || *p + o.nproc_per_node - 1 > 65535)
      throw UsageError(
          fmt::format("{} '{}' is not a port from which {} worker port(s) fit below 65536", source,
                      text, o.nproc_per_node));
    o.start_port = *p;
  }
}

// The store's port on node 0, and Paddle's worker ports.
void finish_ports(const Raw& raw, LaunchOptions& o) {
  if (!raw.master_port.empty()) {
    const auto p = tools_api::parse_port(raw.master_port, /*allow_zero=*/true);
    if (!p)
      throw UsageError(
          fmt::format("--master-port '{}' is not a port number (0..65535)", raw.master_port));
    o.master_port = *p;
  }
  if (o.multi_node() && o.master_port == 0) {
    if (!raw.master_port.empty())
      throw UsageError("--master-port 0: several nodes must agree on a port; give one");
    o.master_port = kMultiNodePort;
  }
  if (o.master_addr.empty()) throw UsageError("--master-addr must not be empty");
  finish_start_port(raw, o);
}

// The run id, the timeouts and the restarts.
void finish_supervision(const Raw& raw, LaunchOptions& o) {
  if (!raw.run_id.empty()) check_run_id(raw.run_id);
  o.run_id = raw.run_id;

  o.rdzv_timeout = seconds_option(raw.rdzv_timeout_s, "--rdzv-timeout", 0.1, 86400 * 7);
  parse_rdzv_conf(raw.rdzv_conf, o);
  o.monitor_interval = seconds_option(raw.monitor_s, "--monitor-interval", 0.05, 60);
  o.grace_period = seconds_option(raw.grace_s, "--grace-period", 0, 3600);
  if (raw.max_restarts < 0 || raw.max_restarts > 1000000)
    throw UsageError(fmt::format("--max-restarts {}: use 0 or more", raw.max_restarts));
  o.max_restarts = raw.max_restarts;
  o.continue_on_worker_loss = raw.on_worker_loss == "continue";
  if (raw.max_replacements < 0 || raw.max_replacements > 1000000)
    throw UsageError(fmt::format("--max-replacements {}: use 0 or more", raw.max_replacements));
  if (raw.max_replacements > 0 && !o.continue_on_worker_loss)
    throw UsageError(
        "--max-replacements replaces a worker lost while the others go on: add --on-worker-loss "
        "continue (with the default, restart, a lost worker restarts them all: --max-restarts)");
  o.max_replacements = raw.max_replacements;
}

// Where the workers' output goes.
void finish_output(const Raw& raw, LaunchOptions& o) {
  if (!raw.redirects.empty()) {
    o.redirects = parse_stream_mask(raw.redirects, "--redirects");
    if (o.log_dir.empty() && o.paddle_log_dir.empty())
      throw UsageError("--redirects needs --log-dir (where the redirected output goes)");
  }
  if (!o.log_dir.empty() && !o.paddle_log_dir.empty())
    throw UsageError(
        "--log-dir and --log_dir (Paddle's layout, workerlog.N) both name where the "
        "output goes: give one of them");
  if (!raw.tee.empty()) parse_stream_mask(raw.tee, "--tee");
  if (!raw.ranks_filter.empty()) o.local_ranks_filter = parse_rank_list(raw.ranks_filter);
}

void check_store_token(const Raw& raw, const LaunchOptions& o) {
  if (o.multi_node() && settings::get_string("TANDEM_STORE_TOKEN").empty()) {
    throw UsageError(fmt::format(
        "--nnodes {} needs the same secret TANDEM_STORE_TOKEN on every node (it authenticates "
        "the store and the workers' connections); run on every node: export "
        "TANDEM_STORE_TOKEN=<the same value>, e.g. one made once with: "
        "od -An -tx1 -N16 /dev/urandom | tr -d ' \\n'",
        raw.nnodes));
  }
}

// Cross-checks the raw values and fills `o` (the first problem found is the one reported).
void finish(const CLI::App& app, const Raw& raw, LaunchOptions& o) {
  finish_workers(raw, o);
  finish_nodes(app, raw, o);
  finish_ports(raw, o);
  finish_supervision(raw, o);
  finish_output(raw, o);
  check_store_token(raw, o);
}

}  // namespace

int StreamMask::for_rank(int local_rank) const {
  for (const auto& [r, m] : per_rank)
    if (r == local_rank) return m;
  return by_default;
}

bool LaunchOptions::on_console(int local_rank) const {
  return local_ranks_filter.empty() ||
         std::find(local_ranks_filter.begin(), local_ranks_filter.end(), local_rank) !=
             local_ranks_filter.end();
}

ParseResult parse_command_line(int argc, char** argv) {
  CLI::App app{
      "tandemrun: starts PROGRAM as N worker processes on each node, with the environment of "
      "torchrun (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...). Run the same "
      "command on every node: node 0 hosts the rendezvous store, the nodes agree on global "
      "ranks, every node prefixes its workers' output with \"[rank N]: \", and when a worker "
      "fails anywhere every worker everywhere is stopped (and restarted, with --max-restarts).",
      "tandemrun"};
  app.formatter(std::make_shared<Formatter>());
  app.prefix_command();
  app.footer(
      "PROGRAM runs directly (no shell); its stdin is /dev/null. Each worker is its own process "
      "group and dies with tandemrun.\n"
      "Several nodes need TANDEM_STORE_TOKEN set to the same secret on every node.\n"
      "TANDEM_TRACE=FILE: the workers' timelines are merged into FILE when the job ends; "
      "`tandemrun --merge-trace FILE` merges parts left by a run without tandemrun.\n"
      "Exit status: 0 when every worker exits 0; else the root-cause worker's exit code "
      "(128+N when killed by signal N), the same on every node; 1 when a node is lost; "
      "130/143 after SIGINT/SIGTERM; 2 for a usage error.\n"
      "Examples:\n"
      "  tandemrun --nproc-per-node 4 ./train --epochs 3\n"
      "  tandemrun --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 4 ./train  "
      "(node 1: --node-rank 1)");

  Raw raw;
  LaunchOptions o;
  add_options(app, raw, o);

  ParseResult result;
  try {
    app.parse(argc, argv);
    finish(app, raw, o);
    auto rest = app.remaining();
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    if (rest.empty() && !o.check) throw SyntaxError("no PROGRAM given");
    if (!rest.empty()) {
      if (rest.front().size() > 1 && rest.front().front() == '-' && app.remaining().front() != "--")
        throw SyntaxError(fmt::format("unknown option '{}'", rest.front()));
      o.command = python_command(std::move(rest), raw);
    }
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return result;
  } catch (const CLI::ParseError& e) {
    print_usage_error(app, e.what(), true);
    result.exit_code = 2;
    return result;
  } catch (const UsageError& e) {
    print_usage_error(app, e.what(), dynamic_cast<const SyntaxError*>(&e) != nullptr);
    result.exit_code = 2;
    return result;
  } catch (const Error& e) {  // a malformed TANDEM_* setting
    print_usage_error(app, e.message(), false);
    result.exit_code = 2;
    return result;
  }
  result.options = std::move(o);
  return result;
}

}  // namespace tandem::tools::tandemrun
