// Built-in communication hooks: plain averaging allreduce, and 16-bit compression.

#include "ddp/aligned_buffer.hpp"

#include <tandem/ddp.hpp>
#include <tandem/error.hpp>
#include <tandem/half.hpp>

#include <cstdint>
#include <vector>

namespace tandem::ddp {

namespace {

class AllreduceHook final : public CommHook {
 public:
  std::string_view name() const noexcept override { return "allreduce"; }
  std::shared_ptr<Work> start(const GradBucket& bucket) override {
    CallOptions o;
    o.stream = bucket.stream;
    return bucket.comm->allreduce_async(bucket.buffer, bucket.buffer, ReduceOp::avg, o);
  }
};

// PyTorch's fp16_compress_hook / bf16_compress_hook: divide by the world size first (so the
// sum cannot overflow where the average would not), round to 16 bits, sum, widen back.
class CompressHook final : public CommHook {
 public:
  explicit CompressHook(DataType wire) : wire_(wire) {}

  std::string_view name() const noexcept override {
    return wire_ == DataType::f16 ? "fp16_compress" : "bf16_compress";
  }

  std::shared_ptr<Work> start(const GradBucket& bucket) override {
    TANDEM_CHECK_ARG(bucket.buffer.device.is_cpu(),
                     "DDP comm hook {}: bucket {} is on {}; the compression hooks convert on the "
                     "host. On a GPU use the allreduce hook (keep bf16 parameters to halve the "
                     "bytes)",
                     name(), bucket.index, bucket.buffer.device.str());
    if (!compressible(bucket.buffer.dtype))
      return bucket.comm->allreduce_async(bucket.buffer, bucket.buffer, ReduceOp::avg);
    const BufferView wire = scratch(bucket.index, bucket.buffer.count);
    auto* out = static_cast<std::uint16_t*>(wire.data);
    const int world = bucket.comm->size();
    if (bucket.buffer.dtype == DataType::f32) {
      const auto* in = static_cast<const float*>(bucket.buffer.data);
      const float w = static_cast<float>(world);
      for (std::size_t i = 0; i < wire.count; ++i) out[i] = narrow(in[i] / w);
    } else {
      const auto* in = static_cast<const double*>(bucket.buffer.data);
      const double w = world;
      for (std::size_t i = 0; i < wire.count; ++i) out[i] = narrow(static_cast<float>(in[i] / w));
    }
    return bucket.comm->allreduce_async(wire, wire, ReduceOp::sum);
  }

  void finish(const GradBucket& bucket) override {
    if (!compressible(bucket.buffer.dtype)) return;
    const auto* in =
        static_cast<const std::uint16_t*>(static_cast<const void*>(scratch_[bucket.index].data()));
    if (bucket.buffer.dtype == DataType::f32) {
      auto* out = static_cast<float*>(bucket.buffer.data);
      for (std::size_t i = 0; i < bucket.buffer.count; ++i) out[i] = widen(in[i]);
    } else {
      auto* out = static_cast<double*>(bucket.buffer.data);
      for (std::size_t i = 0; i < bucket.buffer.count; ++i) out[i] = widen(in[i]);
    }
  }

 private:
  static bool compressible(DataType t) noexcept { return t == DataType::f32 || t == DataType::f64; }

  std::uint16_t narrow(float v) const noexcept {
    return wire_ == DataType::f16 ? float_to_half(v) : float_to_bf16(v);
  }
  float widen(std::uint16_t v) const noexcept {
    return wire_ == DataType::f16 ? half_to_float(v) : bf16_to_float(v);
  }

  // One wire buffer per bucket: buckets of one pass are in flight together.
  BufferView scratch(std::size_t bucket, std::size_t count) {
    if (scratch_.size() <= bucket) scratch_.resize(bucket + 1);
    AlignedBuffer& s = scratch_[bucket];
    if (s.bytes() != count * sizeof(std::uint16_t))
      s = AlignedBuffer(count * sizeof(std::uint16_t));
    return {s.data(), count, wire_, Device::cpu()};
  }

  DataType wire_;
  std::vector<AlignedBuffer> scratch_;
};

}  // namespace

std::unique_ptr<CommHook> allreduce_hook() {
  return std::make_unique<AllreduceHook>();
}
std::unique_ptr<CommHook> fp16_compress_hook() {
  return std::make_unique<CompressHook>(DataType::f16);
}
std::unique_ptr<CommHook> bf16_compress_hook() {
  return std::make_unique<CompressHook>(DataType::bf16);
}

}  // namespace tandem::ddp
