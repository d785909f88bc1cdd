#include "transport/shm/wire.hpp"

#include "transport/endpoint.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <new>

namespace tandem::transport::shm {
namespace {

constexpr std::size_t kPage = 4096;
// Slot count of a channel. 64 chunks of buffer/64 (64 KiB by default) let a stream of small
// messages run 64 ahead of a receiver that is late on a busy host; bandwidth does not depend
// on the slot count (docs/benchmarks-small.md).
constexpr std::uint32_t kSlots = 64;
constexpr std::uint64_t kMinSlotBytes = 4 * kLine;
constexpr std::uint64_t kMaxSlotBytes = 1ull << 30;  // SlotHeader::chunk_bytes is 32 bits
constexpr std::size_t kWordLines = 3;                // doorbell, sleeping, cpu
// The header, the word lines and the life line: the channel table starts there.
constexpr std::size_t kHeadBytes =
    sizeof(SegmentHeader) + kWordLines * sizeof(WordLine) + sizeof(LifeLine);

constexpr std::size_t round_up(std::size_t v, std::size_t a) noexcept {
  return (v + a - 1) / a * a;
}

std::size_t table_bytes(std::size_t channels) noexcept {
  return round_up(channels * sizeof(ChannelDesc), kLine);
}
std::size_t header_bytes(std::size_t channels) noexcept {
  return round_up(kHeadBytes + table_bytes(channels), kPage);
}
ChannelDesc* table(void* base) noexcept {
  return reinterpret_cast<ChannelDesc*>(static_cast<std::byte*>(base) + kHeadBytes);
}

// The consumed line and the slot headers, padded to a page: the small areas start there.
std::uint64_t headers_bytes(std::uint64_t slot_count) noexcept {
  return round_up(kLine + slot_count * kLine, kPage);
}
// The small areas, padded to a page: the data areas start after them.
std::uint64_t small_bytes(std::uint64_t slot_count) noexcept {
  return round_up(slot_count * kSmallBytes, kPage);
}

}  // namespace

std::uint64_t Geometry::channel_bytes() const noexcept {
  return round_up(headers_bytes(slot_count) + small_bytes(slot_count) +
                      static_cast<std::uint64_t>(slot_count) * slot_bytes,
                  kPage);
}

Geometry geometry_for(std::size_t buffer_bytes) noexcept {
  Geometry g;
  g.slot_count = kSlots;
  g.slot_bytes = std::clamp<std::uint64_t>(buffer_bytes / kSlots / kLine * kLine, kMinSlotBytes,
                                           kMaxSlotBytes);
  return g;
}

std::size_t segment_bytes(std::size_t channels, const Geometry& g) noexcept {
  return header_bytes(channels) + channels * g.channel_bytes();
}

void format_segment(void* base, int owner, std::span<const int> senders, const Geometry& g) {
  auto* h = new (base) SegmentHeader{};
  h->magic = kMagic;
  h->version = kVersion;
  h->owner_rank = owner;
  h->channel_count = static_cast<std::uint32_t>(senders.size());
  h->total_bytes = segment_bytes(senders.size(), g);
  auto* lines = reinterpret_cast<WordLine*>(h + 1);
  new (&lines[0]) WordLine{};
  new (&lines[1]) WordLine{};
  new (&lines[2]) WordLine{};
  auto* life = new (&lines[kWordLines]) LifeLine{};
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  const int rc = pthread_mutex_init(&life->mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0)
    TANDEM_THROW(ErrorCode::Internal, "cannot make the shared-memory segment's life lock: {}",
                 errno_text(rc));
  ChannelDesc* t = table(base);
  std::uint64_t offset = header_bytes(senders.size());
  for (std::size_t i = 0; i < senders.size(); ++i) {
    t[i] = ChannelDesc{senders[i], g.slot_count, g.slot_bytes, offset, g.channel_bytes()};
    auto* ch = static_cast<std::byte*>(base) + offset;
    new (ch) ChannelHeader{};
    for (std::uint32_t s = 0; s < g.slot_count; ++s) new (ch + kLine + s * kLine) SlotHeader{};
    offset += g.channel_bytes();
  }
}

std::size_t max_header_bytes() noexcept {
  return header_bytes(kMaxChannels);
}

SegmentView view_segment(void* base, std::size_t mapped_bytes, std::size_t file_bytes, int owner,
                         const std::string& name) {
  auto* h = static_cast<SegmentHeader*>(base);
  const bool readable = mapped_bytes >= sizeof(SegmentHeader);
  if (!readable || h->magic != kMagic || h->version != kVersion)
    TANDEM_THROW(ErrorCode::Internal,
                 "shared-memory segment {} of rank {} is not a tandem v{} segment (magic {:#x}, "
                 "version {}); every rank must run the same tandem build",
                 name, owner, kVersion, readable ? h->magic : 0, readable ? h->version : 0);
  if (h->owner_rank != owner || h->channel_count > kMaxChannels || h->total_bytes != file_bytes ||
      header_bytes(h->channel_count) > mapped_bytes)
    TANDEM_THROW(ErrorCode::Internal,
                 "shared-memory segment {} has an inconsistent header (owner {}, expected {}; "
                 "{} channels; {} bytes, file {})",
                 name, h->owner_rank, owner, h->channel_count, h->total_bytes, file_bytes);
  auto* lines = reinterpret_cast<WordLine*>(h + 1);
  return SegmentView{h, &lines[0], &lines[1], &lines[2],
                     reinterpret_cast<LifeLine*>(&lines[kWordLines])};
}

ChannelDesc find_channel(const SegmentView& seg, std::size_t file_bytes, int sender,
                         const std::string& name) {
  const ChannelDesc* t = table(seg.header);
  for (std::uint32_t i = 0; i < seg.header->channel_count; ++i) {
    const ChannelDesc d = t[i];
    if (d.sender != sender) continue;
    const bool ok =
        d.slot_count >= 2 && d.slot_count <= (1u << 16) && d.slot_bytes >= kLine &&
        d.slot_bytes % kLine == 0 && d.slot_bytes <= kMaxSlotBytes && d.offset % kPage == 0 &&
        d.offset <= file_bytes && d.bytes <= file_bytes - d.offset &&
        headers_bytes(d.slot_count) + small_bytes(d.slot_count) + d.slot_count * d.slot_bytes <=
            d.bytes;
    if (!ok)
      TANDEM_THROW(ErrorCode::Internal,
                   "shared-memory segment {} has a malformed channel for rank {} ({} slots of {} "
                   "bytes at offset {})",
                   name, sender, d.slot_count, d.slot_bytes, d.offset);
    return d;
  }
  TANDEM_THROW(ErrorCode::Internal,
               "shared-memory segment {} of rank {} has no channel for rank {}; the ranks "
               "disagree about which of them share this host",
               name, seg.header->owner_rank, sender);
}

ChannelView channel_view(void* channel_base, const ChannelDesc& d) noexcept {
  auto* ch = static_cast<std::byte*>(channel_base);
  const std::uint64_t small = headers_bytes(d.slot_count);
  return ChannelView{reinterpret_cast<ChannelHeader*>(ch),
                     reinterpret_cast<SlotHeader*>(ch + kLine),
                     ch + small,
                     ch + small + small_bytes(d.slot_count),
                     d.slot_count,
                     d.slot_bytes};
}

}  // namespace tandem::transport::shm
