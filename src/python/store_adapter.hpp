#pragma once
// tandem's Store over the c10d::Store that torch.distributed hands a backend: the rendezvous
// of a "tandem" process group goes through the store PyTorch already set up (env://, tcp://,
// file://), never a second server. c10d stores have no per-call deadline, so waits are made
// in slices of at most kSlice against the tandem deadline.

#include <tandem/store.hpp>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>

namespace tandem::python {

class C10dStore final : public store::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store);

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, Deadline deadline) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  void wait(std::span<const std::string> keys, Deadline deadline) override;
  bool check(std::span<const std::string> keys) override;
  bool delete_key(std::string_view key) override;
  std::int64_t num_keys() override;
  using Store::get;
  using Store::wait;

  /// The longest single c10d wait: deadlines are re-checked at least this often.
  static constexpr std::chrono::milliseconds kSlice{std::chrono::seconds(5)};
  /// How often a wait whose deadline is under a second away checks the keys, on a store
  /// whose waits end on whole seconds (coarse_waits_).
  static constexpr std::chrono::milliseconds kShortPoll{2};
  /// True for torch's FileStore (under any PrefixStore), or once a short wait overshot by
  /// half a second or more.
  std::atomic<bool> coarse_waits_{false};

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace tandem::python
