// tandem-topo: what tandem sees of this machine (or of an hwloc XML file): GPUs and NICs with
// the paths between them as `nvidia-smi topo -m` prints them, the transport and CPU set of
// each local rank, and with --measure the bandwidth between ranks' CPU sets. See --help.
#include "measure.hpp"
#include "report.hpp"

#include <tandem/error.hpp>
#include <tandem/settings.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <limits>

namespace {

namespace tools_api = tandem::tools_api;
using namespace tandem::tools::topo_tool;

struct Options {
  std::string xml;
  std::string save_xml;
  int nproc = 0;  // 0: one per GPU, else one per core
  std::string cpu_bind = "core";
  bool measure = false;
  std::string measure_bytes = "64M";
  bool json = false;
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "tandem-topo: %s\nRun tandem-topo --help for the options.\n",
               message.c_str());
  return 2;
}

constexpr std::size_t kAllPairs = 8;

Measurements measure(const tools_api::Topology& t, const RankPlan& plan, std::size_t bytes) {
  Measurements m;
  m.done = true;
  m.bytes = bytes;
  MeasureOptions o;
  o.bytes = bytes;
  const auto n = static_cast<std::size_t>(plan.nproc);
  m.pair_gbps.assign(n, std::vector<double>(n, std::numeric_limits<double>::quiet_NaN()));
  // Every pair up to kAllPairs ranks; beyond, rank 0 with each other rank (n^2 runs of a
  // second or so would take too long), and the diagonal.
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = 0; b < n; ++b)
      if (n <= kAllPairs || a == 0 || b == 0 || a == b)
        m.pair_gbps[a][b] = pair_bandwidth(plan.binding.cpus[a], plan.binding.cpus[b], o);
  for (const tools_api::NumaNode* node : t.cpu_nodes())
    m.node_gbps.emplace_back(node->os_index, node_bandwidth(t, *node, o));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tandem-topo: the topology tandem sees: NUMA nodes, cores, caches, GPUs and NICs with the "
      "path between each pair (X, NV#, PIX, PXB, PHB, NODE, SYS as nvidia-smi topo -m names "
      "them), the transport between each pair of local ranks and the CPUs each would be bound "
      "to (tandemrun --cpu-bind).",
      "tandem-topo"};
  Options o;
  app.add_option("--xml", o.xml,
                 "Show the topology in this hwloc XML file (lstopo-no-graphics --of xml) "
                 "instead of this machine's");
  app.add_option("--save-xml", o.save_xml,
                 "Write this machine's topology (with NVML's NVLinks) to FILE for --xml elsewhere, "
                 "then show it");
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc,
                 "Local ranks to show (default: one per GPU, else one per core)");
  app.add_option("--cpu-bind,--cpu_bind", o.cpu_bind,
                 "Binding policy to show: core, numa or none (as tandemrun --cpu-bind)")
      ->capture_default_str();
  app.add_flag("--measure", o.measure,
               "Measure the bandwidth between each pair of ranks' CPU sets and the memory "
               "bandwidth of each NUMA node (this machine only; takes seconds)");
  app.add_option("--measure-bytes", o.measure_bytes, "Bytes per measured pass (e.g. 64M)")
      ->capture_default_str();
  app.add_flag("--json", o.json, "Print one JSON document instead of text");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const auto policy = tools_api::parse_cpu_bind(o.cpu_bind);
  if (!policy)
    return usage_error(
        fmt::format("--cpu-bind '{}' is not a policy: use core, numa or none", o.cpu_bind));
  if (app.count("--nproc-per-node") > 0 && o.nproc < 1)
    return usage_error(fmt::format("--nproc-per-node must be at least 1 (got {})", o.nproc));
  const auto bytes = tandem::settings::parse_bytes(o.measure_bytes);
  if (!bytes || *bytes < (1u << 20) || *bytes > (std::uint64_t{16} << 30))
    return usage_error(fmt::format(
        "--measure-bytes '{}' is not a size between 1M and 16G (e.g. 64M)", o.measure_bytes));
  if (!o.save_xml.empty() && !o.xml.empty())
    return usage_error(
        "--save-xml writes this machine's topology; it cannot be combined with --xml");
  if (o.measure && !o.xml.empty())
    return usage_error("--measure measures this machine; it cannot be combined with --xml");

  try {
    if (!o.save_xml.empty()) tools_api::save_xml(o.save_xml);
    const tools_api::Topology t =
        o.xml.empty() ? tools_api::discover() : tools_api::from_xml(o.xml);
    RankPlan plan;
    plan.nproc =
        o.nproc > 0 ? o.nproc : static_cast<int>(t.gpus.empty() ? t.cores.size() : t.gpus.size());
    plan.policy = *policy;
    plan.binding = tools_api::bind_local_ranks(t, *policy, plan.nproc);
    plan.shm = !tandem::settings::get_bool("TANDEM_SHM_DISABLE");
    const Measurements m = o.measure ? measure(t, plan, *bytes) : Measurements{};
    if (o.json)
      std::fputs((json_report(t, plan, m).dump(2) + "\n").c_str(), stdout);
    else
      std::fputs(text_report(t, plan, m).c_str(), stdout);
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "tandem-topo: %s\n", e.message().c_str());
    return e.code() == tandem::ErrorCode::InvalidArgument ? 2 : 1;
  }
  return 0;
}
