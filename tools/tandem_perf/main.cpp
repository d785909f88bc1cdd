// tandem-perf: the collective benchmark, modelled on nccl-tests. Every rank runs it (start
// it with tandemrun); rank 0 prints the table. See --help.
#include "options.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "tune.hpp"

#include <tandem/communicator.hpp>
#include <tandem/error.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

using namespace tandem::tools::perf;

// Before the communicator exists: is this the rank that prints? (RANK as set by tandemrun
// and torchrun, or the Slurm / Open MPI / PMI equivalents.)
bool is_first_rank() {
  for (const char* name : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    if (const char* v = std::getenv(name)) return std::string_view(v) == "0";
  }
  return true;
}

std::size_t next_size(std::size_t size, double factor) {
  const double next = static_cast<double>(size) * factor;
  return next >= 1.8e19 ? SIZE_MAX : std::max(size + 1, static_cast<std::size_t>(next));
}

int bench(tandem::Communicator& comm, const PerfOptions& o) {
  Runner runner(comm, o);
  Report report(comm, o);
  report.header();
  const std::vector<tandem::ReduceOp> ops =
      has_op(o.bench) ? o.ops : std::vector<tandem::ReduceOp>{tandem::ReduceOp::sum};
  for (tandem::DataType t : o.dtypes) {
    for (tandem::ReduceOp op : ops) {
      if (o.bench == Bench::barrier) {
        report.row(runner.run(0, t, op));
        continue;
      }
      for (std::size_t size = o.min_bytes; size <= o.max_bytes; size = next_size(size, o.factor)) {
        const Row row = runner.run(size, t, op);
        if (row.count > 0) report.row(row);
        if (size == SIZE_MAX) break;
      }
    }
    if (o.bench == Bench::barrier) break;  // one row says it all
  }
  if (const double gbps = runner.device_copy_gbps(); gbps > 0)
    report.set_device_copy(o.max_bytes, gbps);
  const std::size_t wrong = report.footer();
  if (!o.json_path.empty()) report.write_json(o.json_path);
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool first = is_first_rank();
  const ParseResult parsed = parse_command_line(argc, argv, first);
  if (!parsed.options) return parsed.exit_code;
  const PerfOptions& o = *parsed.options;
  std::shared_ptr<tandem::Communicator> comm;
  try {
    comm = tandem::Communicator::from_env();
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "tandem-perf: cannot join the communicator: %s\n", e.message().c_str());
    return 1;
  }
  const int world = comm->size();
  if (has_root(o.bench) && o.root >= world) {
    if (comm->rank() == 0)
      std::fprintf(stderr, "tandem-perf: -r %d: the root must be a rank below %d\n", o.root, world);
    return 2;
  }
  if (o.bench == Bench::sendrecv && world < 2) {
    if (comm->rank() == 0) std::fprintf(stderr, "tandem-perf: sendrecv needs at least 2 ranks\n");
    return 2;
  }
  try {
    return o.tune ? tune(*comm, o) : bench(*comm, o);
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "tandem-perf: rank %d: %s\n", comm->rank(), e.what());
    if (e.code() == tandem::ErrorCode::InvalidArgument) return 2;
    return 1;
  }
}
