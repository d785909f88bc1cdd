#include "gpu/cuda_ipc/wire.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

#include <cstring>

namespace tandem::gpu::cuda_ipc {
namespace {

constexpr std::uint32_t kMagic = 0x54495043;  // "TIPC"
constexpr std::uint32_t kVersion = 2;         // 2: control blocks carry buffer records

struct Packed {
  std::uint32_t magic;
  std::uint32_t version;
  cudaIpcMemHandle_t handle;
  std::uint64_t bytes;
  std::int32_t pid;
  std::int32_t reserved;
};

}  // namespace

std::string encode(const StagingRecord& r) {
  Packed p{kMagic, kVersion, r.handle, r.bytes, r.pid, 0};
  unsigned char raw[sizeof p];
  std::memcpy(raw, &p, sizeof p);
  std::string text;
  text.reserve(2 * sizeof raw);
  for (unsigned char c : raw) text += fmt::format("{:02x}", c);
  return text;
}

StagingRecord decode_staging_record(std::string_view text, int rank) {
  const auto bad = [&](std::string_view why) {
    TANDEM_THROW(ErrorCode::Io,
                 "rank {} published a malformed CUDA IPC record ({}): are all ranks running the "
                 "same tandem build?",
                 rank, why);
  };
  unsigned char raw[sizeof(Packed)];
  if (text.size() != 2 * sizeof raw)
    bad(fmt::format("{} characters, not {}", text.size(), 2 * sizeof raw));
  const auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    bad("not hex");
    return 0;
  };
  for (std::size_t i = 0; i < sizeof raw; ++i)
    raw[i] = static_cast<unsigned char>(digit(text[2 * i]) * 16 + digit(text[2 * i + 1]));
  Packed p;
  std::memcpy(&p, raw, sizeof p);
  if (p.magic != kMagic) bad("wrong magic");
  if (p.version != kVersion)
    bad(fmt::format("version {}, this build speaks {}", p.version, kVersion));
  if (p.bytes != 2 * kHalfBytes)
    bad(fmt::format("a staging buffer of {} bytes, this build uses {}", p.bytes, 2 * kHalfBytes));
  if (p.pid <= 0) bad("no pid");
  return {p.handle, p.bytes, p.pid};
}

}  // namespace tandem::gpu::cuda_ipc
