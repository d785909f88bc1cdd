#include <tandem/error.hpp>
#include <tandem/store.hpp>

namespace tandem::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  TANDEM_CHECK_ARG(base_ != nullptr, "PrefixStore '{}': the base store is null", prefix_);
  set_timeout(base_->timeout());
}

std::string PrefixStore::base_key(std::string_view k) const {
  std::string out;
  out.reserve(prefix_.size() + 1 + k.size());
  out.append(prefix_).append("/").append(k);
  return out;
}

std::vector<std::string> PrefixStore::base_keys(std::span<const std::string> keys) const {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(base_key(k));
  return full;
}

void PrefixStore::set(std::string_view k, std::string_view value) {
  base_->set(base_key(k), value);
}

std::string PrefixStore::get(std::string_view k, Deadline deadline) {
  return base_->get(base_key(k), deadline);
}

std::int64_t PrefixStore::add(std::string_view k, std::int64_t delta) {
  return base_->add(base_key(k), delta);
}

std::string PrefixStore::compare_set(std::string_view k, std::string_view expected,
                                     std::string_view desired) {
  return base_->compare_set(base_key(k), expected, desired);
}

void PrefixStore::wait(std::span<const std::string> keys, Deadline deadline) {
  base_->wait(base_keys(keys), deadline);
}

std::uint64_t PrefixStore::requests() const noexcept {
  return base_->requests();
}

std::vector<std::string> PrefixStore::multi_get(std::span<const std::string> keys,
                                                Deadline deadline) {
  return base_->multi_get(base_keys(keys), deadline);
}

KeysOrStop PrefixStore::multi_get_or_stop(std::span<const std::string> keys,
                                          std::string_view stop_key, Deadline deadline,
                                          std::chrono::milliseconds poll) {
  return base_->multi_get_or_stop(base_keys(keys), stop_key.empty() ? "" : base_key(stop_key),
                                  deadline, poll);
}

bool PrefixStore::check(std::span<const std::string> keys) {
  return base_->check(base_keys(keys));
}

bool PrefixStore::delete_key(std::string_view k) {
  return base_->delete_key(base_key(k));
}

std::int64_t PrefixStore::num_keys() {
  return base_->num_keys_with_prefix(base_key({}));
}

std::int64_t PrefixStore::num_keys_with_prefix(std::string_view prefix) {
  return base_->num_keys_with_prefix(base_key(prefix));
}

bool PrefixStore::set_on_disconnect(std::string_view k, std::string_view value) {
  return base_->set_on_disconnect(base_key(k), value);
}

}  // namespace tandem::store
