#include "tools_api/tuning.hpp"

#include "algorithms/algorithm.hpp"
#include "comm/choice/policy.hpp"
#include "comm/choice/tuning.hpp"
#include "transport/bootstrap.hpp"

#include <tandem/error.hpp>

#include <cstdint>
#include <span>

namespace tandem::tools_api {
namespace {

std::uint64_t fnv1a(std::string_view s) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

const algorithms::Algorithm& find(CollectiveKind kind, std::string_view name) {
  const algorithms::Algorithm* a = algorithms::Registry::builtin().find(kind, name);
  TANDEM_CHECK(a != nullptr, "no {} algorithm named {}", to_string(kind), name);
  return *a;
}

}  // namespace

TuningContext tuning_context(Communicator& comm) {
  auto mine = static_cast<std::int64_t>(fnv1a(transport::local_host_id()));
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(BufferView::of(std::span<std::int64_t>(&mine, 1)),
                 BufferView::of(std::span<std::int64_t>(all)));
  std::vector<std::string> ids;
  std::vector<transport::Link> links;
  for (int r = 0; r < comm.size(); ++r) {
    ids.push_back(std::to_string(all[static_cast<std::size_t>(r)]));
    const std::string_view t = comm.transport_to(r);
    links.push_back(r == comm.rank() ? transport::Link::self
                    : t == "shm"     ? transport::Link::shm
                                     : transport::Link::tcp);
  }
  comm::TuningContext c = comm::tuning_context(ids, comm.rank(), links);
  return {c.world_size, c.hosts, std::move(c.transport)};
}

std::string to_string(const TuningContext& c) {
  return comm::to_string(comm::TuningContext{c.world_size, c.hosts, c.transport});
}

std::vector<std::string> algorithm_names(CollectiveKind kind) {
  std::vector<std::string> out;
  for (const algorithms::Algorithm* a : algorithms::Registry::builtin().of(kind))
    out.emplace_back(a->name());
  return out;
}

bool algorithm_supports(CollectiveKind kind, std::string_view name, std::size_t bytes, int world) {
  return find(kind, name).supports(comm::probe_call(kind, bytes, world), world);
}

std::string builtin_algorithm(CollectiveKind kind, std::size_t bytes, int world) {
  const algorithms::Call call = comm::probe_call(kind, bytes, world);
  return std::string(algorithms::Registry::builtin().default_choice(call, world).name());
}

void check_tuning_file(std::string_view text, const std::string& path) {
  comm::parse_tuning(text, path, algorithms::Registry::builtin());
}

std::string format_bytes(std::size_t bytes) {
  return comm::format_bytes(bytes);
}

}  // namespace tandem::tools_api
