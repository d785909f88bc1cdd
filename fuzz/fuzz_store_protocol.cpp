// The TcpStore server's side of a client connection: frames decoded with the server's limits
// (HELLO limits until the HELLO is accepted), then handled by the server's KvState, as
// TcpStoreServer does. The input is a byte stream cut at frame boundaries; each frame goes
// to one of three connections, chosen by a byte before it, so waiters, deliveries and
// deadlines of several clients interleave. Whatever the bytes, nothing may crash, leak or
// hit undefined behaviour, and every frame that decodes must encode back to itself.

#include "store/common.hpp"
#include "store/kv_state.hpp"
#include "store/protocol.hpp"

#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

namespace {

using namespace tandem::store;

struct Conn {
  std::uint64_t id = 0;
  bool authed = false;
  bool waiting = false;
};

void check_round_trip(const proto::Message& m, const proto::Limits& limits) {
  const std::string bytes = proto::encode(m);
  const auto again = proto::decode_frame(std::as_bytes(std::span(bytes)), limits);
  if (again.status != proto::DecodeResult::Status::ok || again.consumed != bytes.size() ||
      !(again.message == m))
    std::abort();  // encode and decode disagree: a protocol bug
}

void settle(KvState& state, std::array<Conn, 3>& conns) {
  for (auto ready = state.take_ready(); !ready.empty(); ready = state.take_ready())
    for (const auto& [id, reply] : ready) {
      for (Conn& c : conns)
        if (c.id == id) c.waiting = false;
      (void)proto::encode(reply);
    }
}

void run(std::span<const std::byte> bytes) {
  proto::Limits limits;
  limits.max_value_bytes = TcpStoreServerOptions{}.max_value_bytes;
  limits.max_key_bytes = kMaxKeyBytes;
  limits.max_keys = kMaxKeysPerCall;
  proto::Limits hello_limits;
  hello_limits.max_value_bytes = proto::kMaxTokenBytes;
  hello_limits.max_key_bytes = proto::kMaxTokenBytes;
  hello_limits.max_keys = 1;

  KvState state;
  std::uint64_t next_id = 2;
  std::array<Conn, 3> conns;
  for (Conn& c : conns) c.id = next_id++;
  // The server closes a connection that breaks the protocol; the client may come back.
  auto reset = [&](Conn& c) {
    state.drop(c.id);
    c = Conn{next_id++, false, false};
  };

  while (bytes.size() > 1) {
    const auto selector = static_cast<std::uint8_t>(bytes[0]);
    bytes = bytes.subspan(1);
    Conn& c = conns[selector % conns.size()];
    if ((selector & 0x80) != 0) {  // the client disconnects
      reset(c);
      continue;
    }
    // Time passes (the server holds a waiting client's next frame until its GET/WAIT
    // completes): every deadline so far expires.
    if ((selector & 0x40) != 0 || c.waiting) {
      for (const auto& [id, reply] : state.expire(tandem::Deadline::max())) {
        for (Conn& w : conns)
          if (w.id == id) w.waiting = false;
        (void)proto::encode(reply);
      }
    }
    const proto::Limits& lim = c.authed ? limits : hello_limits;
    auto res = proto::decode_frame(bytes, lim);
    if (res.status != proto::DecodeResult::Status::ok) return;  // need_more, or rejected
    bytes = bytes.subspan(res.consumed);
    check_round_trip(res.message, lim);
    if (!c.authed) {
      if (res.message.type != proto::Type::hello || res.message.number != proto::kVersion)
        reset(c);
      else
        c.authed = true;
      continue;
    }
    auto out = state.handle(c.id, std::move(res.message));
    switch (out.kind) {
      case KvState::Outcome::Kind::violation:
        reset(c);
        break;
      case KvState::Outcome::Kind::waiting:
        c.waiting = true;
        break;
      case KvState::Outcome::Kind::reply:
        (void)proto::encode(out.reply);
        break;
    }
    settle(state, conns);
  }
  // Headers on their own, as the server checks them before buffering a payload.
  if (bytes.size() >= proto::kHeaderBytes)
    (void)proto::validate_header(proto::read_header(bytes), limits);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    run(std::as_bytes(std::span(data, size)));
  } catch (const tandem::Error&) {
    // An expected refusal; anything else escapes and is reported.
  }
  return 0;
}
