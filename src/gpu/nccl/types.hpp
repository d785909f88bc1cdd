#pragma once
// tandem's vocabulary in NCCL's terms, and NCCL's results as tandem errors.

#include <tandem/error.hpp>
#include <tandem/types.hpp>

#include <nccl.h>
#include <string>
#include <string_view>

namespace tandem::gpu {

ncclDataType_t nccl_type(DataType dtype) noexcept;

/// The NCCL operation for `op`; avg of an integer type is ncclSum (the backend divides
/// afterwards, as ncclAvg is defined for floating types).
ncclRedOp_t nccl_op(ReduceOp op, DataType dtype) noexcept;

/// Whether `op` on `dtype` needs the division after ncclSum.
constexpr bool divides_after(ReduceOp op, DataType dtype) noexcept {
  return op == ReduceOp::avg && !is_floating(dtype);
}

/// The Error for a failed NCCL result: ncclRemoteError is PeerLost (a peer process exited
/// or the network failed), ncclInvalidArgument/ncclInvalidUsage InvalidArgument, ncclInternalError
/// Internal, the rest Io. The message names `what`, NCCL's text, `detail` (ncclGetLastError)
/// when there is one, and what to look at next.
Error nccl_error(ncclResult_t result, std::string_view what, std::string_view detail = {});

/// "2.28.9" for NCCL_VERSION_CODE-style `code` (22809).
std::string nccl_version_text(int code);

}  // namespace tandem::gpu
