#include "store/protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace tandem::store::proto {
namespace {

// The field list of each frame type.
enum class Field : std::uint8_t { key, value, value2, number, keys, values };

std::span<const Field> schema(Type t) noexcept {
  static constexpr Field kHello[] = {Field::number, Field::value};
  static constexpr Field kKeyValue[] = {Field::key, Field::value};
  static constexpr Field kKeyNumber[] = {Field::key, Field::number};
  static constexpr Field kCas[] = {Field::key, Field::value, Field::value2};
  static constexpr Field kWait[] = {Field::number, Field::keys};
  static constexpr Field kWaitOrStop[] = {Field::number, Field::value, Field::keys};
  static constexpr Field kKeys[] = {Field::keys};
  static constexpr Field kValues[] = {Field::values};
  static constexpr Field kKey[] = {Field::key};
  static constexpr Field kValue[] = {Field::value};
  static constexpr Field kNumber[] = {Field::number};
  static constexpr Field kError[] = {Field::number, Field::value};
  switch (t) {
    case Type::hello:
      return kHello;
    case Type::set:
    case Type::on_disconnect:
      return kKeyValue;
    case Type::get:
    case Type::add:
      return kKeyNumber;
    case Type::compare_set:
      return kCas;
    case Type::wait:
    case Type::multi_get:
      return kWait;
    case Type::multi_get_or_stop:
      return kWaitOrStop;
    case Type::values:
      return kValues;
    case Type::check:
    case Type::timeout:
      return kKeys;
    case Type::delete_key:
      return kKey;
    case Type::num_keys:
    case Type::value:
      return kValue;
    case Type::ok:
      return {};
    case Type::integer:
    case Type::boolean:
      return kNumber;
    case Type::error:
      return kError;
  }
  return {};
}

bool known_type(std::uint8_t t) noexcept {
  return (t >= static_cast<std::uint8_t>(Type::hello) &&
          t <= static_cast<std::uint8_t>(Type::multi_get_or_stop)) ||
         (t >= static_cast<std::uint8_t>(Type::ok) && t <= static_cast<std::uint8_t>(Type::values));
}

template <class T>
T load_le(const std::byte* p) noexcept {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}

template <class T>
void store_le(std::string& out, T v) {
  using U = std::make_unsigned_t<T>;
  const auto u = static_cast<U>(v);
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

// Bounds-checked cursor over a payload.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  std::size_t left() const noexcept { return bytes_.size() - pos_; }

  bool u32(std::uint32_t* v) {
    if (left() < 4) return false;
    *v = load_le<std::uint32_t>(bytes_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool i64(std::int64_t* v) {
    if (left() < 8) return false;
    *v = static_cast<std::int64_t>(load_le<std::uint64_t>(bytes_.data() + pos_));
    pos_ += 8;
    return true;
  }
  // Reads a length-prefixed byte string of at most `max` bytes; *error says why not.
  bool bytes(std::size_t max, std::string* v, std::string_view what, std::string* error) {
    std::uint32_t n = 0;
    if (!u32(&n)) {
      *error = fmt::format("truncated length of {}", what);
      return false;
    }
    if (n > max) {
      *error = fmt::format("{} of {} bytes exceeds the limit of {} bytes", what, n, max);
      return false;
    }
    if (n > left()) {
      *error = fmt::format("{} of {} bytes runs past the end of the frame ({} bytes left)", what, n,
                           left());
      return false;
    }
    v->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return true;
  }

 private:
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
};

void put_bytes(std::string& out, std::string_view s) {
  store_le<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

std::size_t value_limit(Type t, const Limits& limits) noexcept {
  switch (t) {
    case Type::hello:
      return kMaxTokenBytes;
    case Type::num_keys:
    case Type::multi_get_or_stop:
      return limits.max_key_bytes;
    case Type::error:
      return kMaxMessageBytes;
    default:
      return limits.max_value_bytes;
  }
}

}  // namespace

std::string type_name(std::uint8_t type) {
  switch (static_cast<Type>(type)) {
    case Type::hello:
      return "HELLO";
    case Type::set:
      return "SET";
    case Type::get:
      return "GET";
    case Type::add:
      return "ADD";
    case Type::compare_set:
      return "COMPARE_SET";
    case Type::wait:
      return "WAIT";
    case Type::check:
      return "CHECK";
    case Type::delete_key:
      return "DELETE";
    case Type::num_keys:
      return "NUM_KEYS";
    case Type::on_disconnect:
      return "ON_DISCONNECT";
    case Type::multi_get:
      return "MULTI_GET";
    case Type::multi_get_or_stop:
      return "MULTI_GET_OR_STOP";
    case Type::values:
      return "VALUES";
    case Type::ok:
      return "OK";
    case Type::value:
      return "VALUE";
    case Type::integer:
      return "INTEGER";
    case Type::boolean:
      return "BOOLEAN";
    case Type::timeout:
      return "TIMEOUT";
    case Type::error:
      return "ERROR";
  }
  return fmt::format("type {}", type);
}

bool is_request(Type t) noexcept {
  return static_cast<std::uint8_t>(t) >= static_cast<std::uint8_t>(Type::hello) &&
         static_cast<std::uint8_t>(t) <= static_cast<std::uint8_t>(Type::multi_get_or_stop);
}

std::size_t Limits::max_payload() const noexcept {
  const std::size_t cas = (2 * max_value_bytes) + max_key_bytes + std::size_t{12};
  // timeout, stop key (MULTI_GET_OR_STOP), count, keys
  const std::size_t list = 8 + (max_key_bytes + 4) + 4 + (max_keys * (max_key_bytes + 4));
  return std::min<std::size_t>(std::max(cas, list), 0xffffffffu);
}

Header read_header(std::span<const std::byte> bytes) noexcept {
  Header h;
  if (bytes.size() < kHeaderBytes) return h;
  const std::byte* p = bytes.data();
  h.magic = load_le<std::uint32_t>(p);
  h.version = std::to_integer<std::uint8_t>(p[4]);
  h.type = std::to_integer<std::uint8_t>(p[5]);
  h.reserved = load_le<std::uint16_t>(p + 6);
  h.payload_len = load_le<std::uint32_t>(p + 8);
  return h;
}

std::optional<std::string> validate_header(const Header& h, const Limits& limits) {
  if (h.magic != kMagic)
    return fmt::format("bad magic 0x{:08x} (expected 0x{:08x}): not a tandem store client", h.magic,
                       kMagic);
  if (h.version != kVersion)
    return fmt::format(
        "protocol version {} (this side speaks {}): use the same tandem version on every host",
        h.version, kVersion);
  if (h.reserved != 0) return fmt::format("reserved header field is {} (must be 0)", h.reserved);
  if (!known_type(h.type)) return fmt::format("unknown frame type {}", h.type);
  if (h.payload_len > limits.max_payload())
    return fmt::format("{} frame with a payload of {} bytes exceeds the limit of {} bytes",
                       type_name(h.type), h.payload_len, limits.max_payload());
  return std::nullopt;
}

std::optional<std::string> decode_payload(std::uint8_t type, std::span<const std::byte> payload,
                                          const Limits& limits, Message* out) {
  if (!known_type(type)) return fmt::format("unknown frame type {}", type);
  const auto t = static_cast<Type>(type);
  Message m;
  m.type = t;
  Reader r(payload);
  std::string error;
  const std::string name = type_name(type);
  for (Field f : schema(t)) {
    switch (f) {
      case Field::key: {
        m.keys.emplace_back();
        if (!r.bytes(limits.max_key_bytes, &m.keys.back(), name + " key", &error)) return error;
        break;
      }
      case Field::value:
        if (!r.bytes(value_limit(t, limits), &m.value, name + " value", &error)) return error;
        break;
      case Field::value2:
        if (!r.bytes(limits.max_value_bytes, &m.value2, name + " second value", &error))
          return error;
        break;
      case Field::number:
        if (!r.i64(&m.number)) return fmt::format("truncated integer field in {}", name);
        break;
      case Field::keys:
      case Field::values: {
        const bool values = f == Field::values;
        const std::string item = values ? "value" : "key";
        std::uint32_t n = 0;
        if (!r.u32(&n)) return fmt::format("truncated {} count in {}", item, name);
        if (n > limits.max_keys)
          return fmt::format("{} names {} {}s; the limit is {}", name, n, item, limits.max_keys);
        // Each needs at least its 4-byte length: reject impossible counts before reserving.
        if (static_cast<std::size_t>(n) * 4 > r.left())
          return fmt::format("{} claims {} {}s but only {} bytes follow", name, n, item, r.left());
        m.keys.reserve(n);
        const std::size_t max = values ? limits.max_value_bytes : limits.max_key_bytes;
        for (std::uint32_t i = 0; i < n; ++i) {
          m.keys.emplace_back();
          if (!r.bytes(max, &m.keys.back(), name + " " + item, &error)) return error;
        }
        break;
      }
    }
  }
  if (r.left() != 0)
    return fmt::format("{} frame has {} unexpected trailing bytes", name, r.left());
  if (t == Type::boolean && m.number != 0 && m.number != 1)
    return fmt::format("BOOLEAN frame carries {} (must be 0 or 1)", m.number);
  *out = std::move(m);
  return std::nullopt;
}

DecodeResult decode_frame(std::span<const std::byte> bytes, const Limits& limits) {
  DecodeResult res;
  if (bytes.size() < kHeaderBytes) return res;
  const Header h = read_header(bytes);
  if (auto why = validate_header(h, limits)) {
    res.status = DecodeResult::Status::bad;
    res.error = std::move(*why);
    return res;
  }
  if (bytes.size() - kHeaderBytes < h.payload_len) return res;
  if (auto why = decode_payload(h.type, bytes.subspan(kHeaderBytes, h.payload_len), limits,
                                &res.message)) {
    res.status = DecodeResult::Status::bad;
    res.error = std::move(*why);
    return res;
  }
  res.status = DecodeResult::Status::ok;
  res.consumed = kHeaderBytes + h.payload_len;
  return res;
}

void encode(const Message& m, std::string& out) {
  const std::size_t start = out.size();
  store_le<std::uint32_t>(out, kMagic);
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(m.type));
  store_le<std::uint16_t>(out, 0);
  store_le<std::uint32_t>(out, 0);  // payload_len, patched below
  std::size_t next_key = 0;
  for (Field f : schema(m.type)) {
    switch (f) {
      case Field::key:
        put_bytes(out, next_key < m.keys.size() ? std::string_view(m.keys[next_key])
                                                : std::string_view());
        ++next_key;
        break;
      case Field::value:
        put_bytes(out, m.value);
        break;
      case Field::value2:
        put_bytes(out, m.value2);
        break;
      case Field::number:
        store_le<std::int64_t>(out, m.number);
        break;
      case Field::keys:
      case Field::values:
        store_le<std::uint32_t>(out, static_cast<std::uint32_t>(m.keys.size()));
        for (const auto& k : m.keys) put_bytes(out, k);
        break;
    }
  }
  const auto len = static_cast<std::uint32_t>(out.size() - start - kHeaderBytes);
  for (std::size_t i = 0; i < 4; ++i)
    out[start + 8 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
}

std::string encode(const Message& m) {
  std::string out;
  encode(m, out);
  return out;
}

}  // namespace tandem::store::proto
