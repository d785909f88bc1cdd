#include "transport/shm/endpoint.hpp"

#include "core/copy.hpp"
#include "core/futex.hpp"
#include "core/reduce.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace tandem::transport::shm {
namespace {

// The part of each slot's data area that setup warms: a message of up to this size finds
// all of its lines warm on its first lap (and a larger one its first page).
constexpr std::size_t kWarmDataBytes = 4096;

// Setup touches a channel's lines as a first lap of messages (one per slot) would, so that the
// first lap costs what later laps do rather than a line neither side has touched per message:
// the sender writes its outbound small areas and the first kWarmDataBytes of each outbound
// data area, the receiver reads the same of its inbound channel, a line at a time (which also
// walks each slot's first page). Both sides must touch them: later laps are cheap only for
// lines both sides have had (docs/benchmarks-small.md).
// Setup-only code: kept out of the hot functions' way.
[[gnu::cold, gnu::noinline]] void write_slots(const ChannelView& c) noexcept {
  std::memset(c.small, 0, std::size_t{c.slot_count} * kSmallBytes);
  const std::size_t warm = std::min<std::size_t>(kWarmDataBytes, c.slot_bytes);
  for (std::uint32_t i = 0; i < c.slot_count; ++i) std::memset(c.slot_data(i), 0, warm);
}

[[gnu::cold, gnu::noinline]] void read_slots(const ChannelView& c) noexcept {
  const std::size_t warm = std::min<std::size_t>(kWarmDataBytes, c.slot_bytes);
  const auto touch = [](const std::byte* p, std::size_t bytes) noexcept {
    for (std::size_t at = 0; at < bytes; at += kLine)
      (void)*reinterpret_cast<const volatile std::byte*>(p + at);
  };
  touch(c.small, std::size_t{c.slot_count} * kSmallBytes);
  for (std::uint32_t i = 0; i < c.slot_count; ++i) touch(c.slot_data(i), warm);
}

}  // namespace

Endpoint::Endpoint(int peer, PeerFailureHandler& failures, ChannelView outbound,
                   ChannelView inbound, Wake peer_wake) noexcept
    : transport::Endpoint(peer, failures), out_(outbound), in_(inbound), wake_(peer_wake) {
  write_slots(out_);
  read_slots(in_);
  cold_sends_ = out_.slot_count;
  cold_recvs_ = in_.slot_count;
}

bool Endpoint::progress() {
  bool moved = false;
  if (!sends_.empty()) moved = progress_sends();
  if (!recvs_.empty()) moved = progress_recvs() || moved;
  if (moved) wake_peer();
  return moved;
}

bool Endpoint::progress_sends() {
  bool moved = false;
  while (Request* r = sends_.front()) {
    do {
      if (!send_chunk(*r)) return moved;
      moved = true;
    } while (r->done < r->bytes);
    sends_.pop();
    r->complete = true;
  }
  return moved;
}

bool Endpoint::progress_recvs() {
  bool moved = false;
  while (Request* r = recvs_.front()) {
    do {
      if (!recv_chunk(*r)) return moved;
      moved = true;
    } while (r->done < r->bytes);
    recvs_.pop();
    r->complete = true;
  }
  return moved;
}

bool Endpoint::complete_now(Request& r) {
  // One chunk only: a message that moved in part could not be queued afterwards.
  const bool send = r.kind == RequestKind::send;
  if (r.bytes > kInlineBytes && r.bytes > (send ? out_.slot_bytes : in_.slot_bytes)) return false;
  if (send ? !sends_.empty() || !send_chunk(r) : !recvs_.empty() || !recv_chunk(r)) return false;
  r.complete = true;
  wake_peer();
  return true;
}

bool Endpoint::peek(std::uint32_t& tag) {
  if (!recvs_.empty()) return false;
  const SlotHeader* s = in_.slot(recv_slot_);
  if (s->seq.load(std::memory_order_acquire) != received_ + 1) return false;
  tag = s->tag;
  return true;
}

bool Endpoint::send_chunk(Request& r) {
  if (sent_ - consumed_seen_ >= out_.slot_count) {
    consumed_seen_ = out_.header->consumed.load(std::memory_order_acquire);
    if (sent_ - consumed_seen_ >= out_.slot_count) return false;
  }
  SlotHeader* s = out_.slot(send_slot_);
  std::size_t chunk = 0;
  if (r.bytes <= kInlineBytes) {
    chunk = r.bytes;
    if (chunk != 0) std::memcpy(s->payload, r.src, chunk);
  } else {
    chunk = static_cast<std::size_t>(std::min<std::uint64_t>(out_.slot_bytes, r.bytes - r.done));
    std::memcpy(out_.chunk_data(send_slot_, r.bytes), static_cast<const std::byte*>(r.src) + r.done,
                chunk);
  }
  s->tag = r.tag;
  s->chunk_bytes = static_cast<std::uint32_t>(chunk);
  s->msg_bytes = r.bytes;
  s->seq.store(++sent_, std::memory_order_release);
  if (++send_slot_ == out_.slot_count) send_slot_ = 0;
  if (cold_sends_ != 0 && out_.data_message(r.bytes)) {
    // First lap through the data areas: the next slot's page is walked while this message
    // is on its way, not when the next one is written.
    --cold_sends_;
    __builtin_prefetch(out_.slot_data(send_slot_), 1);
  }
  r.done += chunk;
  return true;
}

bool Endpoint::recv_chunk(Request& r) {
  SlotHeader* s = in_.slot(recv_slot_);
  if (s->seq.load(std::memory_order_acquire) != received_ + 1) return false;
  // Copy the header fields once: the checks and the copy below must see the same values.
  const std::uint32_t tag = s->tag;
  const std::uint64_t msg = s->msg_bytes;
  const std::uint64_t chunk = s->chunk_bytes;
  if (r.done == 0 && (tag != r.tag || msg != r.bytes)) throw_mismatch(r, Link::shm, tag, msg);
  const bool inline_msg = r.bytes <= kInlineBytes;
  const std::uint64_t expect =
      inline_msg ? r.bytes : std::min<std::uint64_t>(in_.slot_bytes, r.bytes - r.done);
  if (tag != r.tag || msg != r.bytes || chunk != expect)
    throw_protocol(peer_, Link::shm,
                   fmt::format("chunk of {} bytes (message {} bytes, tag {:#x}) where {} bytes "
                               "at offset {} were due",
                               chunk, msg, tag, expect, r.done));
  const std::byte* data = inline_msg ? s->payload : in_.chunk_data(recv_slot_, r.bytes);
  auto* dst = static_cast<std::byte*>(r.dst) + r.done;
  if (r.kind == RequestKind::recv) {
    // A message larger than the last-level cache evicts its own first chunks: write it
    // straight to memory rather than read every destination line first. One in its header
    // is a few bytes: no such question.
    if (inline_msg) {
      if (chunk != 0) std::memcpy(dst, data, chunk);  // an empty receive may have no buffer
    } else {
      core::copy(dst, data, chunk, core::streams(r.bytes));
    }
  } else {
    const std::size_t es = dtype_size(r.dtype);
    core::reduce(dst, static_cast<const std::byte*>(r.src) + r.done, data, chunk / es, r.dtype,
                 r.op);
  }
  r.done += chunk;
  if (++recv_slot_ == in_.slot_count) recv_slot_ = 0;
  if (cold_recvs_ != 0 && in_.data_message(r.bytes)) {
    --cold_recvs_;
    __builtin_prefetch(in_.slot_data(recv_slot_), 0);
  }
  in_.header->consumed.store(++received_, std::memory_order_release);
  return true;
}

// Pairs with Context::sleep(): the peer announces `sleeping`, fences, then checks for
// work; we publish, fence, then check `sleeping`. One of the two sees the other. With
// asymmetric fences the peer's heavy_fence() stands for ours too.
void Endpoint::wake_peer() noexcept {
  if (wake_.asymmetric)
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
  if (wake_.sleeping->load(std::memory_order_relaxed) != 0) {
    wake_.doorbell->fetch_add(1, std::memory_order_release);
    core::futex_wake_all(wake_.doorbell);
    ++*wake_.woken;
  }
}

}  // namespace tandem::transport::shm
