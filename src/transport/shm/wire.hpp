#pragma once
// The bytes layout of a shared-memory segment. Each rank creates one segment holding its
// doorbell and one INBOUND channel per same-host peer (the channel a sender writes lives
// in the receiver's segment, so a receiver reads only its own memory):
//
//   [SegmentHeader][doorbell line][sleeping line][cpu line][life line]
//   [ChannelDesc x C, padded to a line]
//   [channel 0, page aligned][channel 1]...
//   channel: [consumed line][SlotHeader line x slots][pad to a page]
//            [small area x slots, kSmallBytes each][pad to a page][slot 0 data][slot 1 data]...
//
// A slot header is exactly one cache line: seq (the ready flag), tag, sizes and up to
// kInlineBytes of payload, so a small message costs one line transfer. The headers lie side
// by side, so a stream of small messages stays within one or two pages, not a page (and a
// page walk in the first lap) per slot. A message of up to kSmallBytes that does not fit its
// header goes whole into its slot's small area, and those lie side by side too (16 pages for
// 64 slots), for the same reason (docs/benchmarks-small.md). Larger messages are cut into
// slot-sized chunks; the receiver reduces or copies each one straight out of the slot and
// then advances `consumed`, a line only it writes.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <pthread.h>
#include <span>
#include <string>

namespace tandem::transport::shm {

inline constexpr std::size_t kLine = 64;
inline constexpr std::uint32_t kMagic = 0x53444e54;  // "TNDS"
inline constexpr std::uint32_t kVersion = 4;
inline constexpr std::size_t kInlineBytes = 40;
inline constexpr std::size_t kSmallBytes = 1024;
inline constexpr std::uint32_t kMaxChannels = 4096;

struct alignas(kLine) SegmentHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t owner_rank;
  std::uint32_t channel_count;
  std::uint64_t total_bytes;
  std::atomic<std::uint32_t> mappers;  ///< peers that mapped it; the last one unlinks the name
  /// 1: its owner is registered for asymmetric fences (core::asymmetric_fences()) and fences
  /// with heavy_fence() before it sleeps, so a peer that is registered too may wake it
  /// without a full fence of its own.
  std::uint32_t asymmetric;
};

/// A futex word or flag alone on its cache line.
struct alignas(kLine) WordLine {
  std::atomic<std::uint32_t> value;
};

/// The owner's life: a robust, process-shared mutex that a thread of the owner holds for as
/// long as its mesh lives (Context::hold_life). When that thread ends holding it (the process
/// was killed, crashed or exited without closing), the kernel sets FUTEX_OWNER_DIED in its
/// futex word and wakes a waiter as the thread exits, before the process's memory is torn
/// down: for a large process that is long before its sockets close, and a child it forked
/// that keeps them open does not hide it.
struct alignas(kLine) LifeLine {
  pthread_mutex_t mutex;
};

/// The mutex's futex word (glibc: its first member; the kernel's robust-list protocol: the
/// holder's TID, FUTEX_WAITERS and FUTEX_OWNER_DIED).
inline std::atomic<std::uint32_t>& life_word(LifeLine& l) noexcept {
  return *reinterpret_cast<std::atomic<std::uint32_t>*>(&l.mutex);
}

struct ChannelDesc {
  std::int32_t sender;
  std::uint32_t slot_count;
  std::uint64_t slot_bytes;  ///< data bytes per slot (a multiple of kLine)
  std::uint64_t offset;      ///< from the segment start
  std::uint64_t bytes;       ///< the whole channel
};

struct alignas(kLine) SlotHeader {
  std::atomic<std::uint64_t> seq;  ///< k + 1 once the k-th chunk of the channel is ready
  std::uint32_t tag;
  std::uint32_t chunk_bytes;
  std::uint64_t msg_bytes;
  std::byte payload[kInlineBytes];  ///< the whole message when msg_bytes <= kInlineBytes
};

struct alignas(kLine) ChannelHeader {
  std::atomic<std::uint64_t> consumed;  ///< chunks the receiver has finished with
};

static_assert(sizeof(SlotHeader) == kLine);
static_assert(sizeof(WordLine) == kLine && sizeof(ChannelHeader) == kLine);
static_assert(sizeof(LifeLine) == kLine);
#ifdef __GLIBC__
static_assert(offsetof(pthread_mutex_t, __data.__lock) == 0);
#endif
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

/// Slot count and size of one channel of `buffer_bytes` (TANDEM_BUFFSIZE).
struct Geometry {
  std::uint32_t slot_count = 0;
  std::uint64_t slot_bytes = 0;
  std::uint64_t channel_bytes() const noexcept;
};
Geometry geometry_for(std::size_t buffer_bytes) noexcept;

/// One channel as seen through a mapping.
struct ChannelView {
  ChannelHeader* header = nullptr;
  SlotHeader* slots = nullptr;  ///< slot_count headers, side by side
  std::byte* small = nullptr;   ///< slot_count small areas of kSmallBytes each
  std::byte* data = nullptr;    ///< slot_count data areas of slot_bytes each
  std::uint32_t slot_count = 0;
  std::uint64_t slot_bytes = 0;

  SlotHeader* slot(std::uint32_t index) const noexcept { return slots + index; }
  std::byte* slot_data(std::uint32_t index) const noexcept { return data + index * slot_bytes; }
  /// Whether a message of `msg_bytes` (too large for its header) goes whole into a small area.
  bool small_message(std::uint64_t msg_bytes) const noexcept {
    return msg_bytes <= kSmallBytes && msg_bytes <= slot_bytes;
  }
  /// Whether a message of `msg_bytes` goes through the slots' data areas (neither in its
  /// header nor in a small area).
  bool data_message(std::uint64_t msg_bytes) const noexcept {
    return msg_bytes > kInlineBytes && !small_message(msg_bytes);
  }
  /// Where the chunk in slot `index` of a message of `msg_bytes` lies.
  std::byte* chunk_data(std::uint32_t index, std::uint64_t msg_bytes) const noexcept {
    return small_message(msg_bytes) ? small + index * kSmallBytes : slot_data(index);
  }
};

/// Total bytes of a segment with one channel per sender.
std::size_t segment_bytes(std::size_t channels, const Geometry& g) noexcept;
/// Writes the headers of a freshly created (zeroed) segment.
void format_segment(void* base, int owner, std::span<const int> senders, const Geometry& g);

/// A segment's header as seen through a mapping of (at least) its first max_header_bytes().
struct SegmentView {
  SegmentHeader* header = nullptr;
  WordLine* doorbell = nullptr;
  WordLine* sleeping = nullptr;
  WordLine* cpu = nullptr;  ///< the CPU its owner last waited on, + 1 (0: not known)
  LifeLine* life = nullptr;
};
/// How much of a segment a peer maps to read its header and channel table.
std::size_t max_header_bytes() noexcept;
/// Checks the header at `base` (`mapped_bytes` mapped of a `file_bytes` segment created by
/// `owner`). Throws Error naming `name` when it is not a tandem segment of this version.
SegmentView view_segment(void* base, std::size_t mapped_bytes, std::size_t file_bytes, int owner,
                         const std::string& name);
/// The channel `sender` writes in this segment, checked against the segment size; throws
/// Error when there is none or it is malformed.
ChannelDesc find_channel(const SegmentView& seg, std::size_t file_bytes, int sender,
                         const std::string& name);
/// The channel `d` mapped at `channel_base` (the segment start + d.offset).
ChannelView channel_view(void* channel_base, const ChannelDesc& d) noexcept;

}  // namespace tandem::transport::shm
