#include "python/store_adapter.hpp"

#include <tandem/error.hpp>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

namespace tandem::python {
namespace {

std::vector<std::uint8_t> bytes(std::string_view s) {
  return {s.begin(), s.end()};
}

std::string text(const std::vector<std::uint8_t>& v) {
  return {v.begin(), v.end()};
}

// c10d stores report every failure as an exception of their own (c10::Error, or a
// std::runtime_error such as "Socket Timeout"): tandem callers expect tandem::Error.
template <class F>
auto translated(std::string_view what, std::string_view key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    TANDEM_THROW(ErrorCode::Io, "the torch.distributed store failed to {} '{}': {}", what, key,
                 e.what());
  }
}

}  // namespace

C10dStore::C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  TANDEM_CHECK_ARG(store_, "the torch.distributed store is null");
  set_timeout(store_->getTimeout());
  // torch's FileStore (file://) ends its waits on whole seconds: known from the start, its
  // short waits are polled from the first one (wait() also notices any other such store).
  auto base = store_;
  if (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(base.get()))
    base = prefixed->getUnderlyingNonPrefixStore();
  if (dynamic_cast<c10d::FileStore*>(base.get()) != nullptr)
    coarse_waits_.store(true, std::memory_order_relaxed);
}

void C10dStore::set(std::string_view key, std::string_view value) {
  translated("set", key, [&] { store_->set(std::string(key), bytes(value)); });
}

std::string C10dStore::get(std::string_view key, Deadline deadline) {
  const std::string k(key);
  wait(std::span<const std::string>(&k, 1), deadline);
  return translated("get", key, [&] { return text(store_->get(k)); });
}

std::int64_t C10dStore::add(std::string_view key, std::int64_t delta) {
  return translated("add to", key, [&] { return store_->add(std::string(key), delta); });
}

std::string C10dStore::compare_set(std::string_view key, std::string_view expected,
                                   std::string_view desired) {
  return translated("compare-and-set", key, [&] {
    return text(store_->compareSet(std::string(key), bytes(expected), bytes(desired)));
  });
}

void C10dStore::wait(std::span<const std::string> keys, Deadline deadline) {
  const std::vector<std::string> list(keys.begin(), keys.end());
  for (;;) {
    if (check(keys)) return;
    const auto now = Clock::now();
    if (now >= deadline) {
      std::string missing;
      for (const auto& k : list) missing += (missing.empty() ? "'" : ", '") + k + "'";
      TANDEM_THROW(ErrorCode::Timeout,
                   "waited for the keys {} in the torch.distributed store past the deadline: "
                   "a rank did not join (did every rank call init_process_group / new_group?)",
                   missing);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (coarse_waits_.load(std::memory_order_relaxed) && left < std::chrono::seconds(1)) {
      // A store whose waits end only on whole seconds: a deadline this close is polled
      // (check() above) rather than overshot.
      std::this_thread::sleep_for(std::min(left, kShortPoll));
      continue;
    }
    const auto slice = std::max(std::chrono::milliseconds(1), std::min(left, kSlice));
    const auto started = Clock::now();
    try {
      store_->wait(list, slice);
      return;
    } catch (const std::exception&) {
      // A slice that ran out: check the deadline and wait again. A store that is gone fails
      // the check() above with Io. torch's FileStore counts a wait's time in whole seconds,
      // so a short slice lasts a second: noticed here, such waits are polled from then on.
      if (slice < std::chrono::milliseconds(500) &&
          Clock::now() - started >= slice + std::chrono::milliseconds(500))
        coarse_waits_.store(true, std::memory_order_relaxed);
    }
  }
}

bool C10dStore::check(std::span<const std::string> keys) {
  const std::vector<std::string> list(keys.begin(), keys.end());
  return translated("check", list.empty() ? std::string() : list.front(),
                    [&] { return store_->check(list); });
}

bool C10dStore::delete_key(std::string_view key) {
  return translated("delete", key, [&] { return store_->deleteKey(std::string(key)); });
}

std::int64_t C10dStore::num_keys() {
  return translated("count the keys of", "", [&] { return store_->getNumKeys(); });
}

}  // namespace tandem::python
