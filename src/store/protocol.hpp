#pragma once
// The TcpStore wire protocol. Every frame is a 12-byte little-endian header
//   u32 magic, u8 version, u8 type, u16 reserved (0), u32 payload_len
// followed by payload_len bytes of typed fields: `bytes` (u32 length + data), `i64`, and
// `count` (u32, the number of `bytes` fields that follow). Each frame type has one fixed
// field list; a frame must contain exactly that and nothing more.
//
// Decoding is a pure function over a byte span: every length is checked against the limits
// and the bytes actually present before anything is allocated or copied, and any malformed
// input yields an error string, never an out-of-bounds read.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::store::proto {

inline constexpr std::uint32_t kMagic = 0x53444e54;  // "TNDS" on the wire
inline constexpr std::uint8_t kVersion = 2;
inline constexpr std::size_t kHeaderBytes = 12;
inline constexpr std::size_t kMaxTokenBytes = 1024;
inline constexpr std::size_t kMaxMessageBytes = std::size_t{64} << 10;  // ERROR text

enum class Type : std::uint8_t {
  // Requests (client -> server).
  hello = 1,           // i64 version, bytes token            -> ok | error
  set = 2,             // bytes key, bytes value               -> ok
  get = 3,             // bytes key, i64 timeout_ms (-1: none) -> value | timeout
  add = 4,             // bytes key, i64 delta                 -> integer | error
  compare_set = 5,     // bytes key, bytes expected, bytes desired -> value
  wait = 6,            // i64 timeout_ms, count + keys         -> ok | timeout
  check = 7,           // count + keys                         -> boolean
  delete_key = 8,      // bytes key                            -> boolean
  num_keys = 9,        // bytes prefix ("" = all)              -> integer
  on_disconnect = 10,  // bytes key, bytes value ("" cancels) -> ok
  multi_get = 11,      // i64 timeout_ms, count + keys         -> values | timeout
  // i64 timeout_ms, bytes stop_key, count + keys -> values | value (the stop key's, when it is
  // set before the keys are) | timeout
  multi_get_or_stop = 12,
  // Responses (server -> client).
  ok = 64,       // (no fields)
  value = 65,    // bytes value
  integer = 66,  // i64
  boolean = 67,  // i64 0 or 1
  timeout = 68,  // count + missing keys
  error = 69,    // i64 ErrorCode, bytes message
  values = 70,   // count + values (one per key of a MULTI_GET, in its order)
};

/// Name for logs ("SET", "WAIT", "type 200").
std::string type_name(std::uint8_t type);
bool is_request(Type t) noexcept;

/// One decoded frame. Which fields are meaningful depends on `type` (see Type).
struct Message {
  Type type = Type::ok;
  std::vector<std::string> keys;  ///< key (keys[0]) or key list; a VALUES reply's values
  std::string value;              ///< value, expected, token, prefix, stop key, error text
  std::string value2;             ///< desired (compare_set)
  std::int64_t number = 0;        ///< delta, timeout_ms, integer/boolean result, version, code

  friend bool operator==(const Message&, const Message&) = default;
};

/// Size limits applied while decoding.
struct Limits {
  std::size_t max_value_bytes = 64u << 20;
  std::size_t max_key_bytes = 4096;
  std::size_t max_keys = 4096;
  /// Largest payload accepted: room for a compare_set of two maximal values, or a key list
  /// of max_keys maximal keys and a stop key, whichever is larger.
  std::size_t max_payload() const noexcept;
};

struct Header {
  std::uint32_t magic = 0;
  std::uint8_t version = 0;
  std::uint8_t type = 0;
  std::uint16_t reserved = 0;
  std::uint32_t payload_len = 0;
};

/// Result of decode_frame over the start of a byte stream.
struct DecodeResult {
  enum class Status : std::uint8_t { need_more, ok, bad };
  Status status = Status::need_more;
  std::size_t consumed = 0;  ///< bytes of the frame (header + payload) when ok
  Message message;           ///< when ok
  std::string error;         ///< why, when bad
};

/// Reads the header fields (needs kHeaderBytes bytes; no validation).
Header read_header(std::span<const std::byte> bytes) noexcept;

/// Checks magic, version, reserved, type and payload_len against `limits`; returns the reason
/// when the header is unacceptable.
std::optional<std::string> validate_header(const Header& h, const Limits& limits);

/// Decodes the payload of a frame of type `type`. Returns the reason when malformed.
std::optional<std::string> decode_payload(std::uint8_t type, std::span<const std::byte> payload,
                                          const Limits& limits, Message* out);

/// Decodes the first frame of `bytes`: need_more until a whole frame is there (a bad header
/// is reported as soon as its 12 bytes are in), then ok or bad.
DecodeResult decode_frame(std::span<const std::byte> bytes, const Limits& limits);

/// Appends the encoded frame of `m` to `out`. The fields used depend on m.type.
void encode(const Message& m, std::string& out);
std::string encode(const Message& m);

}  // namespace tandem::store::proto
