#pragma once
// The differences between the torch releases backend "tandem" builds against (2.4 through
// 2.14), in one place, keyed on <torch/version.h>. Everything else in src/python is written
// once against c10d::Backend and c10d::Work as all of these releases have them.
//
//   TANDEM_TORCH_AT_LEAST(M, m)    true when building against torch M.m or later
//   TANDEM_OVERRIDE_SINCE_2_7      `override` where c10d::Backend declares abort() and
//                                  shutdown() (torch 2.7); empty before, where they are
//                                  methods of backend "tandem" alone, called from Python
//   TANDEM_HAVE_FUTURE_RESULT      1 where c10d::Work declares getFutureResult() (torch 2.6)
//   TANDEM_HAVE_BACKEND_SET_TIMEOUT  1 where c10d::Backend declares setTimeout() (torch 2.7)
//   TANDEM_HAVE_BACKEND_SPLIT        1 where c10d::Backend declares split(), merge() and
//                                  getBackendOptions() (ProcessGroup.split_group and
//                                  merge_remote_group; torch 2.10)
//   TANDEM_HAVE_BACKEND_SHRINK       1 where c10d::Backend declares shrink() (torch 2.11)
//   Each is keyed on the first release known to declare it; a release between that declares
//   it earlier gets torch's own refusal of the call instead of tandem's.
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

#define TANDEM_HAVE_BACKEND_SET_TIMEOUT TANDEM_TORCH_AT_LEAST(2, 7)
#define TANDEM_HAVE_BACKEND_SPLIT TANDEM_TORCH_AT_LEAST(2, 10)
#define TANDEM_HAVE_BACKEND_SHRINK TANDEM_TORCH_AT_LEAST(2, 11)

namespace tandem::python {
using PreMulSupplement = c10d::NCCLPreMulSumSupplement;
}  // namespace tandem::python
