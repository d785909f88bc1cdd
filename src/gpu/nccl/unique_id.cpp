#include "gpu/nccl/unique_id.hpp"

#include "gpu/nccl/types.hpp"
#include "transport/bootstrap.hpp"

#include <tandem/error.hpp>

#include <fmt/format.h>

namespace tandem::gpu {

std::string to_text(const ncclUniqueId& id) {
  std::string s;
  s.reserve(sizeof id.internal * 2);
  for (char c : id.internal) s += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return s;
}

ncclUniqueId unique_id_from_text(std::string_view text) {
  ncclUniqueId id{};
  TANDEM_CHECK_ARG(text.size() == sizeof id.internal * 2,
                   "an NCCL unique id is {} hex digits, not {} characters ('{}')",
                   sizeof id.internal * 2, text.size(), text.substr(0, 16));
  const auto digit = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    TANDEM_THROW(ErrorCode::InvalidArgument, "an NCCL unique id holds hex digits only, not '{}'",
                 c);
  };
  for (std::size_t i = 0; i < sizeof id.internal; ++i)
    id.internal[i] = static_cast<char>(digit(text[2 * i]) * 16 + digit(text[2 * i + 1]));
  return id;
}

ncclUniqueId exchange_unique_id(store::Store& store, std::string_view key, int rank,
                                Deadline deadline, const std::function<void()>& check_peers) {
  std::string mine;
  if (rank == 0) {
    ncclUniqueId id{};
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      throw nccl_error(r, "ncclGetUniqueId on rank 0");
    mine = to_text(id);
  }
  // gather() publishes a key for every rank; rank 0's holds the id, which the others wait for.
  const int root = 0;
  const std::span<const int> from = rank == 0 ? std::span<const int>() : std::span(&root, 1);
  const std::string prefix = fmt::format("{}/", key);
  const auto got = transport::gather(store, rank, mine,
                                     {.prefix = prefix, .what = "NCCL unique id", .from = from},
                                     deadline, check_peers);
  return rank == 0 ? unique_id_from_text(mine) : unique_id_from_text(got.at(0));
}

}  // namespace tandem::gpu
