#include "gpu/nccl/types.hpp"

#include <fmt/format.h>

namespace tandem::gpu {

ncclDataType_t nccl_type(DataType dtype) noexcept {
  switch (dtype) {
    case DataType::f32:
      return ncclFloat32;
    case DataType::f64:
      return ncclFloat64;
    case DataType::f16:
      return ncclFloat16;
    case DataType::bf16:
      return ncclBfloat16;
    case DataType::i8:
      return ncclInt8;
    case DataType::u8:
      return ncclUint8;
    case DataType::i32:
      return ncclInt32;
    case DataType::i64:
      return ncclInt64;
  }
  return ncclNumTypes;  // unreachable: validate() checked the dtype
}

ncclRedOp_t nccl_op(ReduceOp op, DataType dtype) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::prod:
      return ncclProd;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::avg:
      return divides_after(op, dtype) ? ncclSum : ncclAvg;
    case ReduceOp::band:  // NCCL has no bitwise reductions: the communicator refuses them
    case ReduceOp::bor:   // for device buffers before a backend sees them
    case ReduceOp::bxor:
      break;
  }
  return ncclNumOps;  // unreachable: validate() checked the op
}

Error nccl_error(ncclResult_t result, std::string_view what, std::string_view detail) {
  ErrorCode code = ErrorCode::Io;
  std::string_view advice;
  switch (result) {
    case ncclRemoteError:
      code = ErrorCode::PeerLost;
      advice =
          "a peer process exited or the network between the ranks failed: check the other "
          "ranks' output and exit status";
      break;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      code = ErrorCode::InvalidArgument;
      advice = "NCCL refused the call: NCCL_DEBUG=WARN prints why";
      break;
    case ncclInternalError:
      code = ErrorCode::Internal;
      advice = "NCCL_DEBUG=INFO shows what NCCL was doing";
      break;
    case ncclUnhandledCudaError:
      advice =
          "a CUDA call inside NCCL failed: nvidia-smi shows the devices' state, "
          "NCCL_DEBUG=INFO the call";
      break;
    default:
      advice =
          "NCCL_DEBUG=INFO shows what NCCL was doing (a socket, shared-memory or "
          "InfiniBand resource it could not get)";
      break;
  }
  std::string message = fmt::format("{}: NCCL error {} ({})", what, static_cast<int>(result),
                                    ncclGetErrorString(result));
  if (!detail.empty()) message += fmt::format(": {}", detail);
  message += fmt::format(". {}", advice);
  return Error(code, std::move(message));
}

std::string nccl_version_text(int code) {
  // NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z from 2.9 on.
  return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
}

}  // namespace tandem::gpu
