#pragma once
// The differences between the torch releases backend "tandem" builds against (2.4 through
// 2.14), in one place, keyed on <torch/version.h>. Everything else in src/python is written
// once against c10d::Backend and c10d::Work as all of these releases have them.
//
//   TANDEM_TORCH_AT_LEAST(M, m)    true when building against torch M.m or later
//   TANDEM_OVERRIDE_SINCE_2_7      `override` where c10d::Backend declares abort(), shutdown()
//                                  and supportsCoalescing() (torch 2.7); empty before, where
//                                  they are methods of backend "tandem" alone
//   TANDEM_HAVE_FUTURE_RESULT      1 where c10d::Work declares getFutureResult() (torch 2.6)
//   TANDEM_HAVE_BACKEND_SPLIT      1 where c10d::Backend declares split(), merge(),
//                                  getBackendOptions() and setTimeout() (torch 2.9)
//   TANDEM_HAVE_BACKEND_SHRINK     1 where c10d::Backend declares shrink() (torch 2.10)
//   TANDEM_HAVE_STREAM_HANDLE      1 where c10::Stream has native_handle() (torch 2.11): a
//                                  call on CUDA tensors then carries the current stream;
//                                  before, it runs behind the legacy default stream
//   TANDEM_HAVE_BACKEND_RECONFIGURE  1 where c10d::Backend declares supportsReconfigure(),
//                                  get_reconfigure_handle() and reconfigure() (torch 2.14)
//   The releases are those whose headers first declare each (checked against the wheels of
//   2.4.1, 2.5.1, 2.6.0, 2.7.1, 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.12.1, 2.13.0 and 2.14.1).
//   tandem::python::PreMulSupplement  PREMUL_SUM's factor (NCCLPreMulSumSupplement, the
//                                  name every release has; later ones alias it)

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/version.h>

#define TANDEM_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)
#define TANDEM_TORCH_AT_LEAST(major, minor) (TANDEM_TORCH_VERSION >= (major)*100 + (minor))

#if !TANDEM_TORCH_AT_LEAST(2, 4)
#error "backend 'tandem' needs torch 2.4 or later (pip install torch==2.13.0)"
#endif

#if TANDEM_TORCH_AT_LEAST(2, 7)
#define TANDEM_OVERRIDE_SINCE_2_7 override
#else
#define TANDEM_OVERRIDE_SINCE_2_7
#endif

#if TANDEM_TORCH_AT_LEAST(2, 6)
#define TANDEM_HAVE_FUTURE_RESULT 1
#else
#define TANDEM_HAVE_FUTURE_RESULT 0
#endif

#define TANDEM_HAVE_BACKEND_SPLIT TANDEM_TORCH_AT_LEAST(2, 9)
#define TANDEM_HAVE_BACKEND_SHRINK TANDEM_TORCH_AT_LEAST(2, 10)
#define TANDEM_HAVE_STREAM_HANDLE TANDEM_TORCH_AT_LEAST(2, 11)
#define TANDEM_HAVE_BACKEND_RECONFIGURE TANDEM_TORCH_AT_LEAST(2, 14)

namespace tandem::python {
using PreMulSupplement = c10d::NCCLPreMulSumSupplement;
}  // namespace tandem::python
