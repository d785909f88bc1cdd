#include "gpu/choice.hpp"

#include "gpu/cuda.hpp"
#include "gpu/cuda_ipc/backend.hpp"
#ifdef TANDEM_HAVE_NCCL
#include "gpu/nccl/backend.hpp"
#endif
#include "transport/bootstrap.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/settings.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <vector>

namespace tandem::gpu {
namespace {

constexpr std::size_t kMaxField = 512;  // a host id, a UUID, a setting: bounded when read
#ifdef TANDEM_HAVE_NCCL
constexpr bool kNcclBuilt = true;
#else
constexpr bool kNcclBuilt = false;
#endif

bool valid_request(std::string_view r) {
  return r == "auto" || r == "nccl" || r == "cuda_ipc";
}

std::string uuid_text(const cudaUUID_t& u) {
  std::string s;
  for (char c : u.bytes) s += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return s;
}

}  // namespace

std::string_view to_string(GpuTransport t) noexcept {
  return t == GpuTransport::nccl ? "nccl" : "cuda_ipc";
}

std::string encode(const GpuRecord& r) {
  return fmt::format("{}\n{}\n{}\n{}", r.host_id, r.uuid, r.device, r.requested);
}

GpuRecord decode_gpu_record(std::string_view text, int rank) {
  std::vector<std::string_view> fields;
  while (fields.size() < 4) {
    const auto nl = text.find('\n');
    fields.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  const auto bad = [&](std::string_view why) {
    TANDEM_THROW(ErrorCode::Io,
                 "rank {} published a malformed GPU record ({}): are all ranks running the same "
                 "tandem build?",
                 rank, why);
  };
  if (fields.size() != 4) bad("expected 4 lines");
  for (auto f : fields)
    if (f.size() > kMaxField) bad("a field longer than 512 bytes");
  GpuRecord r;
  r.host_id = fields[0];
  r.uuid = fields[1];
  if (r.uuid.size() != 32 ||
      !std::all_of(r.uuid.begin(), r.uuid.end(), [](char c) { return std::isxdigit(c) != 0; }))
    bad("the GPU UUID is not 32 hex digits");
  const std::string device(fields[2]);
  if (device.empty() || device.size() > 4 ||
      !std::all_of(device.begin(), device.end(), [](char c) { return std::isdigit(c) != 0; }))
    bad("the device index is not a small number");
  r.device = std::stoi(device);
  r.requested = fields[3];
  if (!valid_request(r.requested)) bad("an unknown transport");
  return r;
}

GpuChoice choose_transport(std::span<const GpuRecord> ranks, bool nccl_built) {
  TANDEM_CHECK_ARG(!ranks.empty(), "choose_transport needs the records of at least one rank");
  for (std::size_t r = 1; r < ranks.size(); ++r)
    TANDEM_CHECK_ARG(ranks[r].requested == ranks[0].requested,
                     "TANDEM_GPU_TRANSPORT differs between ranks: rank 0 asks for '{}', rank {} "
                     "for '{}'; set the same value (or none) on every rank",
                     ranks[0].requested, r, ranks[r].requested);
  // Two ranks on one GPU, and whether every rank is on one host.
  std::string shared;
  for (std::size_t a = 0; a < ranks.size() && shared.empty(); ++a)
    for (std::size_t b = a + 1; b < ranks.size() && shared.empty(); ++b)
      if (ranks[a].uuid == ranks[b].uuid && ranks[a].host_id == ranks[b].host_id)
        shared = fmt::format("ranks {} and {} share GPU {} (cuda:{})", a, b, ranks[a].uuid,
                             ranks[a].device);
  std::size_t other_host = 0;
  for (std::size_t r = 1; r < ranks.size() && other_host == 0; ++r)
    if (ranks[r].host_id != ranks[0].host_id) other_host = r;
  const std::string hosts = other_host == 0
                                ? std::string()
                                : fmt::format("ranks 0 and {} are on different hosts", other_host);
  const std::string& asked = ranks[0].requested;
  if (asked == "cuda_ipc" || (asked == "auto" && (!shared.empty() || !nccl_built))) {
    const std::string why = asked == "cuda_ipc" ? std::string("TANDEM_GPU_TRANSPORT=cuda_ipc")
                            : !shared.empty()   ? shared + ", which NCCL refuses"
                                                : std::string("this build has no NCCL");
    TANDEM_CHECK_ARG(hosts.empty(),
                     "no CUDA transport serves these ranks: CUDA IPC is chosen ({}) but it joins "
                     "ranks of one host only, and {}. Give every rank a GPU of its own (NCCL "
                     "crosses hosts){}",
                     why, hosts, nccl_built ? "" : " in a build with NCCL");
    return {GpuTransport::cuda_ipc, why};
  }
  TANDEM_CHECK_ARG(nccl_built,
                   "TANDEM_GPU_TRANSPORT=nccl, but this build of libtandem_cuda has no NCCL "
                   "(the build did not find nccl.h and libnccl next to CUDA); unset it to use "
                   "CUDA IPC on one host");
  TANDEM_CHECK_ARG(shared.empty(),
                   "TANDEM_GPU_TRANSPORT=nccl, but {}: NCCL refuses two ranks on one GPU. "
                   "Unset it (tandem then uses CUDA IPC) or give every rank a GPU of its own",
                   shared);
  return {GpuTransport::nccl, asked == "nccl" ? std::string("TANDEM_GPU_TRANSPORT=nccl")
                                              : std::string("one rank per GPU")};
}

std::unique_ptr<comm::DeviceBackend> make_cuda_backend(const comm::DeviceSetup& setup) {
  use_device(setup.device);
  cudaDeviceProp p{};
  check_cuda(cudaGetDeviceProperties(&p, setup.device.index), "cudaGetDeviceProperties");
  GpuRecord mine;
  mine.host_id = transport::local_host_id();
  mine.uuid = uuid_text(p.uuid);
  mine.device = setup.device.index;
  mine.requested = settings::get_string("TANDEM_GPU_TRANSPORT");
  if (mine.requested.empty()) mine.requested = "auto";
  TANDEM_CHECK_ARG(valid_request(mine.requested),
                   "TANDEM_GPU_TRANSPORT='{}' is none of auto, nccl, cuda_ipc", mine.requested);
  std::vector<int> everyone;
  for (int r = 0; r < setup.size; ++r)
    if (r != setup.rank) everyone.push_back(r);
  const auto texts =
      transport::gather(*setup.store, setup.rank, encode(mine),
                        {.prefix = "gpu/choice/", .what = "GPU record", .from = everyone},
                        deadline_in(setup.timeout.get()), setup.check_peers);
  std::vector<GpuRecord> records(static_cast<std::size_t>(setup.size));
  records[static_cast<std::size_t>(setup.rank)] = mine;
  for (std::size_t i = 0; i < everyone.size(); ++i)
    records[static_cast<std::size_t>(everyone[i])] = decode_gpu_record(texts[i], everyone[i]);
  const GpuChoice choice = choose_transport(records, kNcclBuilt);
  TANDEM_INFO(init, "{}: CUDA collectives through {} ({})", setup.label,
              to_string(choice.transport), choice.why);
#ifdef TANDEM_HAVE_NCCL
  if (choice.transport == GpuTransport::nccl) return make_nccl_backend(setup);
#endif
  return make_cuda_ipc_backend(setup);
}

}  // namespace tandem::gpu
