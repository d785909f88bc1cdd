#include <tandem/error.hpp>
#include <tandem/store.hpp>

namespace tandem::store {

std::int64_t Store::num_keys_with_prefix(std::string_view prefix) {
  if (prefix.empty()) return num_keys();
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "this store cannot count keys by prefix ('{}'); override num_keys_with_prefix()",
               prefix);
}

std::vector<std::string> Store::multi_get(std::span<const std::string> keys, Deadline deadline) {
  wait(keys, deadline);
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(get(k, deadline));
  return values;
}

bool Store::set_on_disconnect(std::string_view, std::string_view) {
  return false;
}

}  // namespace tandem::store
