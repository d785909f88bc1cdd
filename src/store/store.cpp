#include <tandem/error.hpp>
#include <tandem/store.hpp>

#include <algorithm>

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

KeysOrStop Store::multi_get_or_stop(std::span<const std::string> keys, std::string_view stop_key,
                                    Deadline deadline, std::chrono::milliseconds poll) {
  KeysOrStop out;
  if (stop_key.empty()) {
    out.values = multi_get(keys, deadline);
    return out;
  }
  const std::string stop[] = {std::string(stop_key)};
  for (;;) {
    const Deadline slice = std::min(deadline, deadline_in(poll));
    try {
      out.values = multi_get(keys, slice);
      return out;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout || slice >= deadline) throw;
    }
    if (check(stop)) {
      out.stop = get(stop_key, deadline);
      return out;
    }
  }
}

bool Store::set_on_disconnect(std::string_view, std::string_view) {
  return false;
}

}  // namespace tandem::store
