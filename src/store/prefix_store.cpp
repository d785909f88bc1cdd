#include <tandem/error.hpp>
#include <tandem/store.hpp>

namespace tandem::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  TANDEM_CHECK_ARG(base_ != nullptr, "PrefixStore '{}': the base store is null", prefix_);
  timeout_ = base_->timeout();
}

std::string PrefixStore::key(std::string_view k) const {
  std::string out;
  out.reserve(prefix_.size() + 1 + k.size());
  out.append(prefix_).append("/").append(k);
  return out;
}

void PrefixStore::set(std::string_view k, std::string_view value) {
  base_->set(key(k), value);
}

std::string PrefixStore::get(std::string_view k, Deadline deadline) {
  return base_->get(key(k), deadline);
}

std::int64_t PrefixStore::add(std::string_view k, std::int64_t delta) {
  return base_->add(key(k), delta);
}

std::string PrefixStore::compare_set(std::string_view k, std::string_view expected,
                                     std::string_view desired) {
  return base_->compare_set(key(k), expected, desired);
}

void PrefixStore::wait(std::span<const std::string> keys, Deadline deadline) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(key(k));
  base_->wait(full, deadline);
}

std::uint64_t PrefixStore::requests() const noexcept {
  return base_->requests();
}

std::vector<std::string> PrefixStore::multi_get(std::span<const std::string> keys,
                                                Deadline deadline) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(key(k));
  return base_->multi_get(full, deadline);
}

bool PrefixStore::check(std::span<const std::string> keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(key(k));
  return base_->check(full);
}

bool PrefixStore::delete_key(std::string_view k) {
  return base_->delete_key(key(k));
}

std::int64_t PrefixStore::num_keys() {
  return base_->num_keys_with_prefix(key({}));
}

std::int64_t PrefixStore::num_keys_with_prefix(std::string_view prefix) {
  return base_->num_keys_with_prefix(key(prefix));
}

bool PrefixStore::set_on_disconnect(std::string_view k, std::string_view value) {
  return base_->set_on_disconnect(key(k), value);
}

}  // namespace tandem::store
