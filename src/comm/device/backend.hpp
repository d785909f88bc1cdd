#pragma once
// Collectives on device memory. A call whose buffers are on a device is handed, in call
// order like every other, to the communicator's backend for that device kind: NCCL for CUDA
// (src/gpu/, built into libtandem_cuda.so when nvcc is found). The backend library registers
// its factory when it is loaded, and libtandem loads it (from its own directory, or
// TANDEM_CUDA_LIBRARY) at the first CUDA buffer: nothing else links CUDA, and a machine
// without it runs every host path unchanged.

#include "algorithms/algorithm.hpp"

#include <tandem/error.hpp>
#include <tandem/store.hpp>
#include <tandem/types.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tandem::comm {

/// What a backend is made from: one per communicator and device, made collectively (every
/// rank at its first call on that kind of device, which is the same call everywhere).
struct DeviceSetup {
  int rank = 0;
  int size = 1;
  Device device;
  /// This communicator's store namespace (the backend adds its own prefix).
  std::shared_ptr<store::Store> store;
  /// The communicator's timeout (Communicator::set_timeout() changes it here too).
  SharedTimeout timeout;
  /// Throws Error(PeerLost) naming a rank known to be gone (the mesh's control connections,
  /// the store's watch) or Error(Aborted) when a peer aborted. Cheap: the backend calls it
  /// every millisecond or so while it waits for the device or the peers.
  std::function<void()> check_peers;
  /// check_peers for a thread of the backend's own: only what may be asked from any thread
  /// (the store's watch of ranks that died; empty where the store keeps none).
  std::function<void()> check_peers_async;
  /// A call that run() left in flight on its stream (see run()) failed later: called on the
  /// backend's thread with the error; the communicator is poisoned with it (its later calls
  /// fail, its peers are told). Thread-safe.
  std::function<void(const Error&)> on_failure;
  std::string label;  ///< the communicator, for messages ("communicator 'tandem/r0/world'")
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  /// "nccl".
  virtual std::string_view name() const noexcept = 0;
  /// The device its buffers must be on.
  virtual Device device() const noexcept = 0;
  /// Runs `call` (validated; its buffers on device()) to completion by call.deadline, or
  /// throws: Timeout at the deadline, PeerLost/Aborted from check_peers or the library,
  /// InvalidArgument for what the library refuses. After a throw the backend is unusable
  /// (the communicator is poisoned anyway).
  ///
  /// With call.stream set, a backend may instead order the call on that stream and return
  /// without the host waiting for the device (NCCL does; CUDA IPC, whose phases the hosts
  /// step, always runs to completion): the call starts after the work enqueued on the
  /// stream so far and the stream's later work after it. A thread of the backend's own then
  /// watches it until the device finished it, against call.deadline, the library's errors
  /// and check_peers_async, and on failure aborts the library's communicator (the stream
  /// moves on) and reports the error through on_failure.
  virtual void run(const algorithms::Call& call) = 0;
  /// Asks a run() in progress on another thread to stop (it throws Aborted promptly) and
  /// every later run() to fail. Never throws; callable from any thread.
  virtual void abort() noexcept = 0;
};

using DeviceBackendFactory = std::unique_ptr<DeviceBackend> (*)(const DeviceSetup&);

/// Registers `make` for devices of `kind`, replacing an earlier one (the backend library
/// calls it when it is loaded; the backend names itself through DeviceBackend::name()).
void register_device_backend(Device::Kind kind, DeviceBackendFactory make) noexcept;

/// A backend for `setup.device`, loading the backend library first if none is registered
/// for its kind. Throws InvalidArgument saying what is missing and what to do (the library
/// not built or not found, no device, a library error).
std::unique_ptr<DeviceBackend> make_device_backend(const DeviceSetup& setup);

/// The file the loader tries for `kind` ("" for kinds with no library): TANDEM_CUDA_LIBRARY,
/// else libtandem_cuda.so next to libtandem.
std::string device_library_path(Device::Kind kind);

}  // namespace tandem::comm
