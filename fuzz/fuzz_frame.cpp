// The data path's view of what a peer wrote, through the real endpoints:
//  - tcp: a tcp::Endpoint with one or two data streams (socket pairs) receives into posted
//    requests whatever bytes the "peer" wrote: frame headers, payloads, striping;
//  - shm: a segment whose header and channel table the peer wrote is checked with
//    view_segment/find_channel, then a shm::Endpoint consumes slot headers (tag, sizes) the
//    peer filled in.
// The first byte picks the link and the requests; the rest is what the peer sent. Expected
// outcomes: the requests complete, or tandem::Error (mismatch, protocol violation, peer
// gone). Anything else escapes and is reported.

#include "transport/shm/endpoint.hpp"
#include "transport/shm/wire.hpp"
#include "transport/tcp/endpoint.hpp"
#include "transport/tcp/wire.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace {

using namespace tandem;
using namespace tandem::transport;

class Failures final : public PeerFailureHandler {
 protected:
  void raise_peer_closed(int peer, std::string_view detail) override {
    TANDEM_THROW(ErrorCode::PeerLost, "rank {}: {}", peer, detail);
  }
};

// Pops little-endian integers off the front of the input (zero once it runs out).
struct Input {
  std::span<const std::uint8_t> rest;
  template <class T>
  T take() {
    T v{};
    const std::size_t n = std::min(sizeof v, rest.size());
    std::memcpy(&v, rest.data(), n);
    rest = rest.subspan(n);
    return v;
  }
};

struct Posted {
  std::vector<std::byte> dst;
  std::vector<std::byte> local;
  Request req;
};

// One or two receives, as the algorithms post them: sizes, tags, kinds from the input.
std::vector<std::unique_ptr<Posted>> make_requests(Input& in, int peer, std::size_t max_bytes) {
  std::vector<std::unique_ptr<Posted>> out;
  const int n = 1 + (in.take<std::uint8_t>() & 1);
  for (int i = 0; i < n; ++i) {
    const auto mode = in.take<std::uint8_t>();
    const auto tag = in.take<std::uint32_t>();
    const std::size_t bytes = in.take<std::uint32_t>() % (max_bytes + 1);
    auto p = std::make_unique<Posted>();
    p->dst.resize(bytes);
    if ((mode & 1) == 0) {
      p->req = Request::make_recv(peer, tag, p->dst.data(), bytes);
    } else {
      const DataType dt = kAllDataTypes[(mode >> 1) % std::size(kAllDataTypes)];
      const ReduceOp op = kAllReduceOps[(mode >> 4) % std::size(kAllReduceOps)];
      const std::size_t count = bytes / dtype_size(dt);
      p->local.assign(count * dtype_size(dt), std::byte{0x3c});
      p->req = Request::make_recv_reduce(peer, tag, p->dst.data(), p->local.data(), count, dt, op);
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Runs progress() until every request completed or nothing moves any more.
void drive(transport::Endpoint& ep, const std::vector<std::unique_ptr<Posted>>& reqs) {
  for (int idle = 0; idle < 4;) {
    if (std::all_of(reqs.begin(), reqs.end(), [](const auto& p) { return p->req.complete; }))
      return;
    idle = ep.progress() ? 0 : idle + 1;
  }
}

void fuzz_tcp(Input in) {
  const int streams = 1 + (in.take<std::uint8_t>() & 1);
  // Sizes up to just past kStripeMin, so that striping over two streams is reachable.
  const std::size_t max_bytes = (in.take<std::uint8_t>() & 1) != 0 ? tcp::kStripeMin + 4096 : 512;
  auto reqs = make_requests(in, 1, max_bytes);
  // The peer's bytes: stream 0 gets a length-prefixed part, stream 1 the rest.
  std::vector<std::span<const std::uint8_t>> sent(static_cast<std::size_t>(streams));
  const std::size_t first = streams == 1 ? in.rest.size() : in.take<std::uint16_t>();
  sent[0] = in.rest.first(std::min(first, in.rest.size()));
  if (streams == 2) sent[1] = in.rest.subspan(sent[0].size());

  std::vector<net::Fd> ours;
  for (const auto& bytes : sent) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
    net::Fd theirs(sv[1]);
    ours.emplace_back(sv[0]);
    // Fuzz inputs stay far below a socket buffer, so this never blocks.
    if (!bytes.empty() && ::send(theirs.get(), bytes.data(), bytes.size(), MSG_DONTWAIT) !=
                              static_cast<ssize_t>(bytes.size()))
      return;
  }  // the peer's ends close here: after its bytes, the streams reach end of file

  Failures failures;
  tcp::Endpoint ep(1, failures, std::move(ours));
  for (auto& p : reqs) ep.post(p->req);
  try {
    drive(ep, reqs);
  } catch (const Error&) {
    ep.drop();
    throw;
  }
}

struct FreeAligned {
  void operator()(std::byte* p) const noexcept { std::free(p); }
};

void fuzz_shm(Input in) {
  constexpr int kOwner = 0;
  constexpr int kSender = 1;
  const shm::Geometry g = shm::geometry_for(4096);
  const int senders_list[] = {kSender, 2};
  const std::size_t file_bytes = shm::segment_bytes(2, g);
  std::unique_ptr<std::byte, FreeAligned> seg(
      static_cast<std::byte*>(std::aligned_alloc(4096, file_bytes)));
  std::unique_ptr<std::byte, FreeAligned> out(
      static_cast<std::byte*>(std::aligned_alloc(4096, file_bytes)));
  if (!seg || !out) std::abort();
  std::memset(seg.get(), 0, file_bytes);
  std::memset(out.get(), 0, file_bytes);
  shm::format_segment(seg.get(), kOwner, senders_list, g);
  shm::format_segment(out.get(), kSender, std::span(senders_list).first(0), g);

  auto reqs = make_requests(in, kSender, 2048);
  // The peer overwrites bytes of the header and channel table: (offset, byte) pairs.
  const std::size_t header_edits = in.take<std::uint8_t>() % 16;
  for (std::size_t i = 0; i < header_edits; ++i) {
    const auto at = in.take<std::uint16_t>() % 256;
    seg.get()[at] = std::byte{in.take<std::uint8_t>()};
  }
  const std::size_t mapped = std::min(file_bytes, shm::max_header_bytes());
  const shm::SegmentView view = shm::view_segment(seg.get(), mapped, file_bytes, kOwner, "fuzz");
  const shm::ChannelDesc desc = shm::find_channel(view, file_bytes, kSender, "fuzz");
  const shm::ChannelView inbound = shm::channel_view(seg.get() + desc.offset, desc);

  // The peer publishes chunks: each slot header from the input, with the sequence number
  // that makes the receiver take it.
  for (std::uint32_t k = 0; k < inbound.slot_count && in.rest.size() >= 16; ++k) {
    shm::SlotHeader* s = inbound.slot(k);
    s->tag = in.take<std::uint32_t>();
    s->chunk_bytes = in.take<std::uint32_t>();
    s->msg_bytes = in.take<std::uint64_t>();
    const std::size_t inline_bytes = std::min(in.rest.size(), shm::kInlineBytes);
    std::memcpy(s->payload, in.rest.data(), inline_bytes);
    in.rest = in.rest.subspan(inline_bytes);
    s->seq.store(k + 1, std::memory_order_release);
  }

  const shm::SegmentView own = shm::view_segment(out.get(), file_bytes, file_bytes, kSender, "o");
  const shm::ChannelView outbound{};
  Failures failures;
  shm::Endpoint ep(kSender, failures, outbound, inbound,
                   shm::Wake{&own.doorbell->value, &own.sleeping->value});
  for (auto& p : reqs) ep.post(p->req);
  try {
    drive(ep, reqs);
  } catch (const Error&) {
    ep.drop();
    throw;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > (64u << 10)) return 0;
  Input in{std::span(data + 1, size - 1)};
  try {
    if ((data[0] & 1) == 0)
      fuzz_tcp(in);
    else
      fuzz_shm(in);
  } catch (const Error&) {
    // Rejected, as it should be.
  }
  return 0;
}
