#include "options.hpp"

#include <tandem/settings.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <utility>

namespace tandem::tools::perf {
namespace {

constexpr std::array<std::pair<std::string_view, Bench>, 8> kBenches{{
    {"allreduce", Bench::allreduce},
    {"broadcast", Bench::broadcast},
    {"reduce", Bench::reduce},
    {"allgather", Bench::allgather},
    {"reduce_scatter", Bench::reduce_scatter},
    {"alltoall", Bench::alltoall},
    {"sendrecv", Bench::sendrecv},
    {"barrier", Bench::barrier},
}};

class BadValue : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Bench parse_bench(std::string text) {
  for (char& c : text)
    if (c == '-') c = '_';
  for (const auto& [name, b] : kBenches)
    if (name == text) return b;
  throw BadValue(
      fmt::format("-c '{}': unknown collective; use allreduce, broadcast, reduce, allgather, "
                  "reduce_scatter, alltoall, sendrecv or barrier",
                  text));
}

std::size_t parse_size(const std::string& text, std::string_view flag) {
  const auto v = settings::parse_bytes(text);
  if (!v) {
    throw BadValue(fmt::format("{} '{}' is not a size (examples: 8, 64K, 128M, 1G; binary units)",
                               flag, text));
  }
  return static_cast<std::size_t>(*v);
}

std::vector<DataType> parse_dtypes(const std::string& text) {
  if (text == "all") return {std::begin(kAllDataTypes), std::end(kAllDataTypes)};
  const auto t = parse_dtype(text);
  if (!t) {
    throw BadValue(fmt::format(
        "-d '{}': unknown data type; use f32, f64, f16, bf16, i8, u8, i32, i64 or all", text));
  }
  return {*t};
}

std::vector<ReduceOp> parse_ops(const std::string& text) {
  if (text == "all") return {std::begin(kAllReduceOps), std::end(kAllReduceOps)};
  const auto op = parse_reduce_op(text);
  if (!op)
    throw BadValue(fmt::format(
        "-o '{}': unknown op; use sum, prod, min, max, avg, band, bor, bxor or all", text));
  return {*op};
}

// The flags as given, before they are checked.
struct RawFlags {
  std::string coll = "allreduce", minb = "8", maxb = "64M", dtype = "f32", op = "sum";
  double margin_percent = 0;
};

void add_flags(CLI::App& app, RawFlags& raw, PerfOptions& o) {
  app.add_option("-c,--collective", raw.coll,
                 "allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall, sendrecv "
                 "or barrier")
      ->capture_default_str();
  app.add_option("-b,--minbytes", raw.minb, "Smallest size")->capture_default_str();
  app.add_option("-e,--maxbytes", raw.maxb, "Largest size")->capture_default_str();
  app.add_option("-f,--stepfactor", o.factor, "Multiply the size by this each step")
      ->capture_default_str();
  app.add_option("-d,--datatype", raw.dtype, "f32, f64, f16, bf16, i8, u8, i32, i64 or all")
      ->capture_default_str();
  app.add_option(
         "-o,--op", raw.op,
         "sum, prod, min, max, avg, band, bor, bxor (integer dtypes) or all (the first five)")
      ->capture_default_str();
  app.add_option("-r,--root", o.root, "Root of broadcast and reduce")->capture_default_str();
  app.add_option("-n,--iters", o.iters, "Timed iterations per size")->capture_default_str();
  app.add_option("-w,--warmup_iters,--warmup-iters", o.warmup, "Untimed iterations before them")
      ->capture_default_str();
  app.add_option("-a,--algo", o.algorithm,
                 "Algorithm to force for every call (fails if it does not apply); default: the "
                 "selector's choice");
  app.add_flag("--check,!--no-check", o.check,
               "Verify one iteration per size against a locally computed result")
      ->capture_default_str();
  app.add_flag("--registered", o.registered,
               "Use registered buffers (Communicator::allocate): one-copy collectives where the "
               "ranks share a host");
  app.add_option("--device", o.device,
                 "Where the buffers live: cpu, or cuda (GPU = the rank's local rank) or cuda:N, "
                 "through the NCCL backend")
      ->capture_default_str();
  app.add_option(
         "--json", o.json_path,
         "Also write every row to this JSON file (rank 0), with every timed iteration's time")
      ->type_name("FILE");
  raw.margin_percent = o.tune_margin * 100;
  app.add_flag("--tune", o.tune,
               "Time every algorithm of each collective (of -c, else of every collective with "
               "several) at each power of two from -b to -e and write the fastest per size "
               "to a tuning file for TANDEM_TUNING_FILE");
  app.add_option("--tune-out", o.tune_out,
                 "Tuning file to write (rank 0); an entry measured in another context (world "
                 "size, hosts, transport) already in it is kept")
      ->type_name("FILE")
      ->capture_default_str();
  app.add_option("--tune-margin", raw.margin_percent,
                 "Percent by which an algorithm must beat the built-in choice to replace it "
                 "(so that noise does not flip choices)")
      ->capture_default_str();
}

// Checks the flags against each other and fills `o`; throws BadValue.
void finish(const CLI::App& app, const RawFlags& raw, PerfOptions& o) {
  o.bench = parse_bench(raw.coll);
  o.collective_given = app.count("-c") > 0;
  if (o.tune && !o.algorithm.empty()) throw BadValue("--tune times every algorithm: leave out -a");
  if (!(raw.margin_percent >= 0 && raw.margin_percent < 100))
    throw BadValue(fmt::format("--tune-margin {}: use 0 to 100 (percent)", raw.margin_percent));
  o.tune_margin = raw.margin_percent / 100;
  if (o.tune && o.tune_out.empty()) throw BadValue("--tune-out: name a file");
  o.min_bytes = parse_size(raw.minb, "-b");
  o.max_bytes = parse_size(raw.maxb, "-e");
  if (o.max_bytes < o.min_bytes)
    throw BadValue(fmt::format("-e {} is smaller than -b {}", raw.maxb, raw.minb));
  if (!(o.factor > 1) && o.max_bytes != o.min_bytes)
    throw BadValue(fmt::format("-f {}: the step factor must be greater than 1", o.factor));
  if (!(o.factor < 1e6)) throw BadValue(fmt::format("-f {}: too large", o.factor));
  o.dtypes = parse_dtypes(raw.dtype);
  o.ops = parse_ops(raw.op);
  for (ReduceOp op : o.ops)
    for (DataType t : o.dtypes)
      if (!applies_to(op, t))
        throw BadValue(
            fmt::format("-o {} -d {}: {} is a bitwise op, for integer dtypes (-d i8, "
                        "u8, i32 or i64)",
                        to_string(op), to_string(t), to_string(op)));
  if (o.iters < 1 || o.iters > 1000000)
    throw BadValue(fmt::format("-n {}: use 1 to 1000000 iterations", o.iters));
  if (o.warmup < 0 || o.warmup > 1000000)
    throw BadValue(fmt::format("-w {}: use 0 to 1000000 iterations", o.warmup));
  if (o.root < 0) throw BadValue(fmt::format("-r {}: a root is a rank (0 or more)", o.root));
  if (o.device != "cpu" && o.device != "cuda" && !o.device.starts_with("cuda:"))
    throw BadValue(fmt::format("--device {}: use cpu, cuda or cuda:N", o.device));
  if (o.device != "cpu" && o.registered)
    throw BadValue("--registered: registered buffers are host memory; leave it out with --device");
  if (o.device != "cpu" && o.tune)
    throw BadValue("--tune times tandem's host algorithms; leave out --device");
}

}  // namespace

std::string_view to_string(Bench b) noexcept {
  for (const auto& [name, x] : kBenches)
    if (x == b) return name;
  return "?";
}

bool has_op(Bench b) noexcept {
  return b == Bench::allreduce || b == Bench::reduce || b == Bench::reduce_scatter;
}

bool has_root(Bench b) noexcept {
  return b == Bench::broadcast || b == Bench::reduce;
}

ParseResult parse_command_line(int argc, char** argv, bool print) {
  CLI::App app{
      "tandem-perf: measures one collective over a range of sizes on every rank of a "
      "communicator (start it with tandemrun), printing the columns of nccl-tests.",
      "tandem-perf"};
  app.footer(
      "Sizes are bytes with optional binary K/M/G. For allgather, reduce_scatter and alltoall "
      "the size is the whole buffer, as in nccl-tests (count per rank = size / ranks / element "
      "size).\nbusbw = algbw x 2(n-1)/n for allreduce, x (n-1)/n for allgather, reduce_scatter "
      "and alltoall, x 1 otherwise.\nExit status: 0, 1 when any result is wrong or a "
      "collective fails, 2 for a bad flag.\n"
      "Example: tandemrun --nproc-per-node 2 tandem-perf -c allreduce -b 8 -e 128M -f 4");
  PerfOptions o;
  RawFlags raw;
  add_flags(app, raw, o);

  ParseResult result;
  try {
    app.parse(argc, argv);
    finish(app, raw, o);
  } catch (const CLI::CallForHelp&) {
    if (print) std::fputs(app.help().c_str(), stdout);
    return result;
  } catch (const CLI::ParseError& e) {
    if (print)
      std::fprintf(stderr, "tandem-perf: %s\nRun 'tandem-perf --help' for every flag.\n", e.what());
    result.exit_code = 2;
    return result;
  } catch (const BadValue& e) {
    if (print) std::fprintf(stderr, "tandem-perf: %s\n", e.what());
    result.exit_code = 2;
    return result;
  }
  result.options = std::move(o);
  return result;
}

}  // namespace tandem::tools::perf
