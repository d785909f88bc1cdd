#pragma once
// The state behind a Communicator: who the rank is, its store and settings (group.hpp),
// the runner that executes operations and records what happened (exec/runner.hpp), and the
// queue that orders them (exec/queue.hpp). comm/ is grouped the same way: setup/ (create,
// from_env, split: fills identity, rendezvous and config, connects the mesh), exec/ (queue,
// worker, runner, Work), choice/ (the algorithm policy and tuning files), diag/ (monitor,
// progress, flight recorder, verification, validation, timeline); communicator.cpp and
// allocate.cpp are the API.

#include "comm/exec/op.hpp"
#include "comm/exec/queue.hpp"
#include "comm/exec/runner.hpp"
#include "comm/group.hpp"

#include <tandem/communicator.hpp>
#include <tandem/work.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

namespace tandem {

struct Communicator::Impl {
  /// Unique among this process's communicators, past and present (the API's memo of the last
  /// checked call is keyed by it, not by an address a later communicator may reuse).
  const std::uint64_t serial = next_serial();
  comm::Identity id;
  comm::Rendezvous rendezvous;  ///< before the mesh: its store server outlives it
  comm::Config config;
  comm::Runner runner{id, config, rendezvous};
  /// Shared with the Works it made.
  std::shared_ptr<comm::Queue> exec = std::make_shared<comm::Queue>();

  Impl() = default;
  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  /// Stops the monitor, whose mismatch handler points here, if shutdown() did not.
  ~Impl() {
    if (runner.diag.monitor) runner.diag.monitor->stop();
  }

  /// A blocking call: runs inline when nothing is queued or running, else behind the queued
  /// operations, and returns when it finished. Throws its Error.
  void run_blocking(comm::Op& op, std::span<const std::size_t> counts);
  /// An asynchronous call: queued; returns its Work.
  std::shared_ptr<Work> submit(comm::Op& op, std::span<const std::size_t> counts);
  /// Fails queued work with Aborted, stops the worker, closes the mesh.
  void shutdown() noexcept;
};

}  // namespace tandem
