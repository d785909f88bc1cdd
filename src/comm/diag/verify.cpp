#include "comm/diag/verify.hpp"

#include "comm/diag/validate.hpp"
#include "comm/setup/bootstrap.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <cstring>
#include <vector>

namespace tandem::comm {
namespace {

// The same layout on every rank (the ranks of a communicator run one build of tandem).
struct CallRecord {
  std::uint8_t kind = 0;
  std::uint8_t dtype = 0;
  std::uint8_t op = 0;
  std::uint8_t reserved = 0;
  std::int32_t root = 0;
  std::uint64_t count = 0;
  std::uint64_t seq = 0;

  friend bool operator==(const CallRecord&, const CallRecord&) = default;
};

bool reduces(CollectiveKind k) {
  return k == CollectiveKind::allreduce || k == CollectiveKind::reduce ||
         k == CollectiveKind::reduce_scatter;
}

bool rooted(CollectiveKind k) {
  return k == CollectiveKind::broadcast || k == CollectiveKind::reduce ||
         k == CollectiveKind::gather || k == CollectiveKind::scatter;
}

CallRecord record_of(const algorithms::Call& c) {
  CallRecord r;
  r.kind = static_cast<std::uint8_t>(c.kind);
  r.dtype = static_cast<std::uint8_t>(shape_dtype(c));
  r.op = reduces(c.kind) ? static_cast<std::uint8_t>(c.op) : 0;
  r.root = rooted(c.kind) ? c.root : 0;
  r.count = shape_count(c);
  r.seq = c.seq;
  return r;
}

std::string describe(const CallRecord& r) {
  if (r.kind > static_cast<std::uint8_t>(CollectiveKind::barrier) ||
      r.dtype > static_cast<std::uint8_t>(DataType::i64) ||
      r.op > static_cast<std::uint8_t>(ReduceOp::avg))
    return fmt::format("an unreadable call record (kind {}, dtype {}, op {})", r.kind, r.dtype,
                       r.op);
  const auto kind = static_cast<CollectiveKind>(r.kind);
  std::string s = fmt::format("{} #{} {} x {}", to_string(kind), r.seq,
                              to_string(static_cast<DataType>(r.dtype)), r.count);
  if (reduces(kind)) s += fmt::format(" {}", to_string(static_cast<ReduceOp>(r.op)));
  if (rooted(kind)) s += fmt::format(" root {}", r.root);
  return s;
}

}  // namespace

void verify_call(transport::Mesh& mesh, const algorithms::Call& call) {
  const int n = mesh.size();
  const int me = mesh.rank();
  const auto count = static_cast<std::size_t>(n);
  std::vector<CallRecord> records(count);
  records[static_cast<std::size_t>(me)] = record_of(call);
  // The tag depends on the sequence number only: the records always match in tag and size.
  const std::uint32_t tag = algorithms::fingerprint(CollectiveKind::barrier, DataType::u8,
                                                    sizeof(CallRecord), -1, call.seq);
  std::vector<transport::Request> requests;
  requests.reserve(2 * count);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    requests.push_back(transport::Request::make_recv(p, tag, &records[static_cast<std::size_t>(p)],
                                                     sizeof(CallRecord)));
    requests.push_back(transport::Request::make_send(p, tag, &records[static_cast<std::size_t>(me)],
                                                     sizeof(CallRecord)));
  }
  std::vector<transport::Request*> pending;
  for (auto& r : requests) {
    mesh.post(r);
    pending.push_back(&r);
  }
  mesh.wait(pending, call.deadline);

  bool same = true;
  for (const auto& r : records) same = same && r == records.front();
  if (same) return;
  // Group the ranks by call: "ranks 0-1: allreduce #0 f32 x 1000 sum; rank 2: broadcast ...".
  std::vector<bool> listed(count, false);
  std::string calls;
  for (std::size_t i = 0; i < count; ++i) {
    if (listed[i]) continue;
    std::vector<int> ranks;
    for (std::size_t j = i; j < count; ++j) {
      if (!listed[j] && records[j] == records[i]) {
        listed[j] = true;
        ranks.push_back(static_cast<int>(j));
      }
    }
    calls += fmt::format("{}rank{} {}: {}", calls.empty() ? "" : "; ", ranks.size() > 1 ? "s" : "",
                         format_ranks(ranks), describe(records[i]));
  }
  TANDEM_THROW(ErrorCode::Mismatch,
               "the ranks called different collectives (checked because TANDEM_DEBUG=DETAIL): {}. "
               "Every rank must call the same collectives in the same order with the same "
               "count, dtype, op and root",
               calls);
}

}  // namespace tandem::comm
