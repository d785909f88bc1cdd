#include "store/kv_state.hpp"

#include "store/common.hpp"

#include <tandem/error.hpp>

#include <algorithm>

namespace tandem::store {
namespace {

proto::Message reply(proto::Type t) {
  proto::Message m;
  m.type = t;
  return m;
}

proto::Message value_reply(std::string v) {
  auto m = reply(proto::Type::value);
  m.value = std::move(v);
  return m;
}

proto::Message number_reply(proto::Type t, std::int64_t n) {
  auto m = reply(t);
  m.number = n;
  return m;
}

KvState::Outcome violation(std::string reason) {
  KvState::Outcome o;
  o.kind = KvState::Outcome::Kind::violation;
  o.reason = std::move(reason);
  return o;
}

KvState::Outcome immediate(proto::Message m) {
  KvState::Outcome o;
  o.reply = std::move(m);
  return o;
}

}  // namespace

const std::string* KvState::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

std::vector<std::string> KvState::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!map_.contains(k)) out.push_back(k);
  return out;
}

void KvState::register_on_missing(std::uint64_t conn, Waiter& w) {
  w.pending = 0;
  for (const auto& k : w.keys) {
    if (map_.contains(k)) continue;
    auto& conns = waiting_on_[k];
    // A key listed twice is registered once (its write fires once).
    if (conns.empty() || conns.back() != conn) {
      conns.push_back(conn);
      ++w.pending;
    }
  }
}

void KvState::unregister(std::uint64_t conn, const Waiter& w) {
  for (const auto& k : w.keys) {
    auto it = waiting_on_.find(k);
    if (it == waiting_on_.end()) continue;
    std::erase(it->second, conn);
    if (it->second.empty()) waiting_on_.erase(it);
  }
  if (!w.stop_key.empty()) {
    if (auto it = waiting_on_.find(w.stop_key); it != waiting_on_.end()) {
      std::erase(it->second, conn);
      if (it->second.empty()) waiting_on_.erase(it);
    }
  }
  deadlines_.erase({w.deadline, conn});
}

proto::Message KvState::completion(const Waiter& w) const {
  if (w.type == proto::Type::get) return value_reply(*find(w.keys[0]));
  if (w.type == proto::Type::multi_get || w.type == proto::Type::multi_get_or_stop) {
    // One reply frame must fit a client's payload limit: refuse a read that would not.
    std::size_t bytes = 0;
    for (const auto& k : w.keys) bytes += find(k)->size() + 4;
    if (bytes > kMaxValuesBytes) {
      auto m =
          number_reply(proto::Type::error, static_cast<std::int64_t>(ErrorCode::InvalidArgument));
      m.value = fmt::format(
          "MULTI_GET of {} keys would return {} bytes, more than one reply "
          "carries ({}): read fewer keys at a time",
          w.keys.size(), bytes, kMaxValuesBytes);
      return m;
    }
    auto m = reply(proto::Type::values);
    m.keys.reserve(w.keys.size());
    for (const auto& k : w.keys) m.keys.push_back(*find(k));
    return m;
  }
  return reply(proto::Type::ok);
}

// A key was written: complete every waiter that now has all of its keys, or whose stop key it
// is; the others stay registered on whatever is still missing (a key may have been deleted
// since they began).
void KvState::wrote(const std::string& key) {
  auto it = waiting_on_.find(key);
  if (it == waiting_on_.end()) return;
  std::vector<std::uint64_t> conns = std::move(it->second);
  waiting_on_.erase(it);
  for (std::uint64_t conn : conns) {
    auto w = waiters_.find(conn);
    if (w == waiters_.end()) continue;  // done already (a conn listed twice: stop key and key)
    if (!w->second.stop_key.empty() && w->second.stop_key == key) {
      const bool complete = missing(w->second.keys).empty();  // the values win
      ready_.emplace_back(conn, complete ? completion(w->second) : value_reply(*find(key)));
      unregister(conn, w->second);
      waiters_.erase(w);
      continue;
    }
    if (w->second.pending > 0 && --w->second.pending > 0) continue;
    if (missing(w->second.keys).empty()) {
      ready_.emplace_back(conn, completion(w->second));
      unregister(conn, w->second);
      waiters_.erase(w);
    } else {
      register_on_missing(conn, w->second);
    }
  }
}

KvState::Outcome KvState::handle(std::uint64_t conn, proto::Message&& req) {
  using proto::Type;
  try {
    switch (req.type) {
      case Type::set: {
        map_.insert_or_assign(req.keys[0], std::move(req.value));
        wrote(req.keys[0]);
        return immediate(reply(Type::ok));
      }
      case Type::add: {
        const std::string& key = req.keys[0];
        auto it = map_.find(key);
        std::optional<std::string_view> current;
        if (it != map_.end()) current = it->second;
        std::int64_t result = 0;
        std::string next = add_value(key, current, req.number, &result);
        map_.insert_or_assign(key, std::move(next));
        wrote(key);
        return immediate(number_reply(Type::integer, result));
      }
      case Type::compare_set: {
        const std::string& key = req.keys[0];
        auto it = map_.find(key);
        const bool matches = it == map_.end() ? req.value.empty() : it->second == req.value;
        if (!matches) return immediate(value_reply(it == map_.end() ? std::string() : it->second));
        auto& stored = map_.insert_or_assign(key, std::move(req.value2)).first->second;
        wrote(key);
        return immediate(value_reply(stored));
      }
      case Type::get:
      case Type::wait:
      case Type::multi_get:
      case Type::multi_get_or_stop: {
        if (req.number < -1)
          return violation(fmt::format("{} with timeout_ms {} (must be >= -1)",
                                       proto::type_name(static_cast<std::uint8_t>(req.type)),
                                       req.number));
        if (waiters_.contains(conn))
          return violation("a second GET/WAIT/MULTI_GET while one is pending");
        Waiter w;
        w.type = req.type;
        w.keys = std::move(req.keys);
        if (missing(w.keys).empty()) return immediate(completion(w));
        if (req.type == Type::multi_get_or_stop && !req.value.empty()) {
          if (const std::string* stop = find(req.value)) return immediate(value_reply(*stop));
          w.stop_key = std::move(req.value);
          waiting_on_[w.stop_key].push_back(conn);
        }
        w.deadline = deadline_after_ms(req.number);
        register_on_missing(conn, w);
        deadlines_.emplace(w.deadline, conn);
        waiters_.emplace(conn, std::move(w));
        Outcome o;
        o.kind = Outcome::Kind::waiting;
        return o;
      }
      case Type::check:
        return immediate(number_reply(Type::boolean, missing(req.keys).empty() ? 1 : 0));
      case Type::delete_key:
        return immediate(number_reply(Type::boolean, map_.erase(req.keys[0]) > 0 ? 1 : 0));
      case Type::num_keys: {
        if (req.value.empty())
          return immediate(number_reply(Type::integer, static_cast<std::int64_t>(map_.size())));
        std::int64_t n = 0;
        for (const auto& [k, v] : map_)
          if (k.starts_with(req.value)) ++n;
        return immediate(number_reply(Type::integer, n));
      }
      case Type::on_disconnect: {
        auto& list = on_drop_[conn];
        const auto it = std::find_if(list.begin(), list.end(),
                                     [&](const auto& kv) { return kv.first == req.keys[0]; });
        if (req.value.empty()) {
          if (it != list.end()) list.erase(it);
          if (list.empty()) on_drop_.erase(conn);
        } else if (it != list.end()) {
          it->second = std::move(req.value);
        } else if (list.size() < kMaxOnDisconnect) {
          list.emplace_back(std::move(req.keys[0]), std::move(req.value));
        } else {
          TANDEM_THROW(ErrorCode::InvalidArgument,
                       "this connection already asked for {} keys to be set on disconnect (the "
                       "limit); cancel some first",
                       kMaxOnDisconnect);
        }
        return immediate(reply(Type::ok));
      }
      case Type::hello:
        return violation("a second HELLO on an authenticated connection");
      default:
        return violation(fmt::format("{} is a reply frame, not a request",
                                     proto::type_name(static_cast<std::uint8_t>(req.type))));
    }
  } catch (const Error& e) {
    // A usage error of this one request (add on a non-integer): answer it, keep serving.
    auto m = number_reply(Type::error, static_cast<std::int64_t>(e.code()));
    m.value = e.message();
    return immediate(std::move(m));
  }
}

std::vector<KvState::Delivery> KvState::take_ready() {
  return std::exchange(ready_, {});
}

std::vector<KvState::Delivery> KvState::expire(Deadline now) {
  std::vector<Delivery> out;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const std::uint64_t conn = deadlines_.begin()->second;
    auto w = waiters_.find(conn);
    if (w == waiters_.end()) {
      deadlines_.erase(deadlines_.begin());
      continue;
    }
    auto m = reply(proto::Type::timeout);
    m.keys = missing(w->second.keys);
    out.emplace_back(conn, std::move(m));
    unregister(conn, w->second);
    waiters_.erase(w);
  }
  return out;
}

std::optional<Deadline> KvState::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void KvState::drop(std::uint64_t conn) {
  if (auto w = waiters_.find(conn); w != waiters_.end()) {
    unregister(conn, w->second);
    waiters_.erase(w);
  }
  if (auto d = on_drop_.find(conn); d != on_drop_.end()) {
    auto list = std::move(d->second);
    on_drop_.erase(d);
    // The first disconnect wins: a key already set keeps its value (the first rank lost is
    // the one to report, not those that failed because of it).
    for (auto& [key, value] : list) {
      if (map_.try_emplace(key, std::move(value)).second) wrote(key);
    }
  }
}

}  // namespace tandem::store
