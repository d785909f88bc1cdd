#include "store/common.hpp"

#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <condition_variable>
#include <mutex>
#include <unordered_map>

namespace tandem::store {

struct HashStore::Impl {
  std::mutex mu;
  std::condition_variable changed;
  std::unordered_map<std::string, std::string> map;

  std::vector<std::string> missing(std::span<const std::string> keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (!map.contains(k)) out.push_back(k);
    return out;
  }

  // Waits (lock held) until `done()` holds or the deadline passes; returns done().
  template <class Done>
  bool wait_until(std::unique_lock<std::mutex>& lock, Deadline deadline, Done done) {
    if (deadline == Deadline::max()) {
      changed.wait(lock, done);
      return true;
    }
    return changed.wait_until(lock, deadline, done);
  }

  // Waits (lock held) until every key exists or the deadline passes; returns the keys still
  // missing (empty on success).
  std::vector<std::string> wait_for(std::unique_lock<std::mutex>& lock,
                                    std::span<const std::string> keys, Deadline deadline) {
    wait_until(lock, deadline, [&] { return missing(keys).empty(); });
    return missing(keys);
  }
};

HashStore::HashStore() : impl_(std::make_unique<Impl>()) {}
HashStore::~HashStore() = default;

void HashStore::set(std::string_view key, std::string_view value) {
  check_key(key);
  {
    std::lock_guard lock(impl_->mu);
    impl_->map.insert_or_assign(std::string(key), std::string(value));
  }
  impl_->changed.notify_all();
}

std::string HashStore::get(std::string_view key, Deadline deadline) {
  check_key(key);
  const auto start = Clock::now();
  const std::string keys[] = {std::string(key)};
  std::unique_lock lock(impl_->mu);
  auto miss = impl_->wait_for(lock, keys, deadline);
  if (!miss.empty()) throw_wait_timeout("HashStore get", miss, Clock::now() - start);
  return impl_->map.at(keys[0]);
}

std::int64_t HashStore::add(std::string_view key, std::int64_t delta) {
  check_key(key);
  std::int64_t result = 0;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->map.find(std::string(key));
    std::optional<std::string_view> current;
    if (it != impl_->map.end()) current = it->second;
    std::string next = add_value(key, current, delta, &result);
    if (it != impl_->map.end())
      it->second = std::move(next);
    else
      impl_->map.emplace(std::string(key), std::move(next));
  }
  impl_->changed.notify_all();
  return result;
}

std::string HashStore::compare_set(std::string_view key, std::string_view expected,
                                   std::string_view desired) {
  check_key(key);
  std::string result;
  bool wrote = false;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->map.find(std::string(key));
    if (it == impl_->map.end()) {
      if (expected.empty()) {
        impl_->map.emplace(std::string(key), std::string(desired));
        result = desired;
        wrote = true;
      }
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
      wrote = true;
    } else {
      result = it->second;
    }
  }
  if (wrote) impl_->changed.notify_all();
  return result;
}

void HashStore::wait(std::span<const std::string> keys, Deadline deadline) {
  check_key_count(keys.size());
  for (const auto& k : keys) check_key(k);
  const auto start = Clock::now();
  std::unique_lock lock(impl_->mu);
  auto miss = impl_->wait_for(lock, keys, deadline);
  if (!miss.empty()) throw_wait_timeout("HashStore wait", miss, Clock::now() - start);
}

KeysOrStop HashStore::multi_get_or_stop(std::span<const std::string> keys,
                                        std::string_view stop_key, Deadline deadline,
                                        std::chrono::milliseconds /*poll*/) {
  check_key_count(keys.size());
  for (const auto& k : keys) check_key(k);
  check_key(stop_key);
  const auto start = Clock::now();
  KeysOrStop out;
  const std::string stop(stop_key);
  std::unique_lock lock(impl_->mu);
  const auto stopped = [&] { return !stop.empty() && impl_->map.contains(stop); };
  impl_->wait_until(lock, deadline, [&] { return impl_->missing(keys).empty() || stopped(); });
  if (impl_->missing(keys).empty()) {  // the values win
    out.values.reserve(keys.size());
    for (const auto& k : keys) out.values.push_back(impl_->map.at(k));
  } else if (stopped()) {
    out.stop = impl_->map.at(stop);
  } else {
    throw_wait_timeout("HashStore multi_get_or_stop", impl_->missing(keys), Clock::now() - start);
  }
  return out;
}

bool HashStore::check(std::span<const std::string> keys) {
  check_key_count(keys.size());
  std::lock_guard lock(impl_->mu);
  return impl_->missing(keys).empty();
}

bool HashStore::delete_key(std::string_view key) {
  std::lock_guard lock(impl_->mu);
  return impl_->map.erase(std::string(key)) > 0;
}

std::int64_t HashStore::num_keys() {
  std::lock_guard lock(impl_->mu);
  return static_cast<std::int64_t>(impl_->map.size());
}

std::int64_t HashStore::num_keys_with_prefix(std::string_view prefix) {
  std::lock_guard lock(impl_->mu);
  std::int64_t n = 0;
  for (const auto& [k, v] : impl_->map)
    if (k.starts_with(prefix)) ++n;
  return n;
}

}  // namespace tandem::store
