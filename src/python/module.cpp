// The Python extension tandem._backend: creates process groups of backend "tandem" and turns
// tandem's errors into the Python exceptions of tandem.torch (RuntimeError subclasses, torch's
// DistBackendError where it exists), with tandem's message unchanged.

#include "core/futex.hpp"
#include "python/backend.hpp"
#include "python/store_adapter.hpp"
#include "python/work.hpp"

#include <tandem/error.hpp>

#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace tandem::python {
namespace {

void translate_errors() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      // The classes live in tandem/torch.py, so that Python code can name and catch them.
      const py::object cls =
          py::module_::import("tandem.torch").attr("error_class")(std::string(to_string(e.code())));
      PyErr_SetString(cls.ptr(), e.what());
    }
  });
}

}  // namespace
}  // namespace tandem::python

PYBIND11_MODULE(_backend, m) {
  using tandem::python::BackendTandem;
  m.doc() = "tandem's torch.distributed backend (import tandem.torch to register it)";
  // torch.distributed registers c10d::Backend and c10d::Store with pybind11 first.
  py::module_::import("torch.distributed");
  // A torch process has threads, so the kernel's registration for asymmetric fences waits out
  // an RCU grace period (10-25 ms): begun at import, it is over before the first group needs it.
  tandem::core::start_fence_registration();
  tandem::python::translate_errors();

  py::class_<BackendTandem, c10d::Backend, c10::intrusive_ptr<BackendTandem>>(m, "BackendTandem")
      .def(
          "_shutdown", [](BackendTandem& b) { b.shutdown(); },
          py::call_guard<py::gil_scoped_release>(),
          "Closes the communicator (the peers are told this rank left on purpose)")
      .def(
          "_abort", [](BackendTandem& b) { b.abort(); }, py::call_guard<py::gil_scoped_release>(),
          "Fails this rank's calls in flight with Aborted and closes the communicator")
      .def(
          "_all_reduce_direct",
          [](BackendTandem& pg, const at::Tensor& t) {
            TANDEM_CHECK_ARG(t.device().is_cpu() && t.is_contiguous(),
                             "_all_reduce_direct takes a contiguous CPU tensor");
            const auto v = tandem::python::view_of(t, true, "all_reduce");
            pg.group().comm()->allreduce(v, v, tandem::ReduceOp::sum);
          },
          py::call_guard<py::gil_scoped_release>(),
          "tandem's own blocking in-place sum on the tensor's memory, without torch.distributed "
          "around it: what bench/torch_backend/collectives.py --direct compares with, in one "
          "process")
      .def(
          "_agree_lost",
          [](BackendTandem& pg, double wait_s) {
            std::optional<std::chrono::milliseconds> wait;
            if (wait_s > 0)
              wait = std::chrono::milliseconds(static_cast<std::int64_t>(wait_s * 1000));
            return pg.group().comm()->agree_lost(wait);
          },
          py::arg("wait_s"), py::call_guard<py::gil_scoped_release>(),
          "Communicator::agree_lost: the ranks of this group the survivors of a PeerLost agree "
          "to leave out (wait_s <= 0: the group's timeout)")
      .def(
          "_transport_to",
          [](BackendTandem& pg, int peer) {
            return std::string(pg.group().comm()->transport_to(peer));
          },
          "How this rank reaches `peer`: shm, tcp or self");

  m.def(
      "_stop_futures",
      [] { return tandem::python::stop_completing_futures(std::chrono::seconds(2)); },
      py::call_guard<py::gil_scoped_release>(),
      "At interpreter exit: ends the thread that completes futures (and runs their "
      "callbacks), so that none runs while the interpreter finalizes; False if a callback "
      "still ran after 2 s");
  m.def(
      "create",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout, bool enable_reconfigure, int stable_rank) {
        return c10::make_intrusive<BackendTandem>(
            std::make_shared<tandem::python::C10dStore>(store), rank, size, timeout,
            enable_reconfigure, stable_rank);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("enable_reconfigure") = false, py::arg("stable_rank") = -1,
      py::call_guard<py::gil_scoped_release>(),
      "A c10d Backend 'tandem' over the torch.distributed store (blocks until every rank "
      "joined); with enable_reconfigure, one without members until reconfigure() (torch "
      "2.14)");
}
