#include "transport/regions.hpp"

#include "transport/bootstrap.hpp"
#include "transport/shm/context.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/store.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tandem::transport {
namespace {

// The data starts one page in: the header page names the owner and the size, so that a peer
// can check that it mapped the segment it was told about.
constexpr std::size_t kPage = 4096;
constexpr std::uint32_t kRegionMagic = 0x52444e54;  // "TNDR"
constexpr std::uint32_t kRegionVersion = 1;

struct RegionHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t owner_rank;
  std::uint32_t region;
  std::uint64_t bytes;
};

std::atomic<unsigned> g_region_counter{0};

std::size_t file_bytes_for(std::size_t bytes) noexcept {
  return kPage + (bytes + kPage - 1) / kPage * kPage;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A name unlinked on scope exit unless released: an allocation that fails half way leaves
// nothing behind.
struct NameGuard {
  std::string name;
  ~NameGuard() {
    if (!name.empty()) ::shm_unlink(name.c_str());
  }
};

shm::Mapping create_segment(int rank, std::uint32_t id, std::size_t bytes, NameGuard& guard) {
  Fd fd;
  for (int attempt = 0; fd.fd < 0; ++attempt) {
    guard.name = fmt::format("/tandem-reg-{}x{}-{}-{}", ::getpid(),
                             g_region_counter.fetch_add(1, std::memory_order_relaxed), id, rank);
    fd.fd = ::shm_open(guard.name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd.fd < 0 && (errno != EEXIST || attempt > 100)) {
      const int err = errno;
      guard.name.clear();
      TANDEM_THROW(ErrorCode::Io,
                   "cannot create the shared-memory segment of registered buffer #{}: {}. Is "
                   "/dev/shm mounted and writable? TANDEM_SHM_DISABLE=1 gives private memory",
                   id, errno_text(err));
    }
  }
  const std::size_t file_bytes = file_bytes_for(bytes);
  auto no_space = [&](int err) {
    TANDEM_THROW(ErrorCode::Io,
                 "cannot allocate registered buffer #{} of {} bytes in shared memory {}: {}. "
                 "/dev/shm is too small (Docker's default is 64 MB): run the container with a "
                 "larger --shm-size, allocate less, or set TANDEM_SHM_DISABLE=1",
                 id, bytes, guard.name, errno_text(err));
  };
  if (::ftruncate(fd.fd, static_cast<off_t>(file_bytes)) != 0) no_space(errno);
  // Reserve every page now: tmpfs would otherwise kill the process with SIGBUS when full.
  const int rc = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(file_bytes));
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) no_space(rc);
  void* p =
      ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.fd, 0);
  if (p == MAP_FAILED) no_space(errno);
  auto* h = static_cast<RegionHeader*>(p);
  *h = RegionHeader{kRegionMagic, kRegionVersion, rank, id, bytes};
  return shm::Mapping(p, file_bytes);
}

shm::Mapping map_peer(int peer, std::uint32_t id, std::size_t bytes, const std::string& name) {
  Fd fd{::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0)};
  if (fd.fd < 0)
    TANDEM_THROW(ErrorCode::Io,
                 "cannot open rank {}'s registered buffer #{} ({}): {}. Did rank {} fail during "
                 "allocate()?",
                 peer, id, name, errno_text(errno), peer);
  struct stat st {};
  const std::size_t file_bytes = file_bytes_for(bytes);
  if (::fstat(fd.fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != file_bytes)
    TANDEM_THROW(ErrorCode::Io,
                 "rank {}'s registered buffer #{} ({}) has {} bytes, expected {}: not the "
                 "segment it announced",
                 peer, id, name, st.st_size, file_bytes);
  void* p = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd.fd, 0);
  if (p == MAP_FAILED)
    TANDEM_THROW(ErrorCode::Io, "cannot map rank {}'s registered buffer #{} ({}): {}", peer, id,
                 name, errno_text(errno));
  shm::Mapping m(p, file_bytes);
  const auto* h = static_cast<const RegionHeader*>(p);
  if (h->magic != kRegionMagic || h->version != kRegionVersion || h->owner_rank != peer ||
      h->region != id || h->bytes != bytes)
    TANDEM_THROW(ErrorCode::Io,
                 "rank {}'s registered buffer #{} ({}) has a foreign header (owner {}, region "
                 "{}, {} bytes): another run may share this /dev/shm",
                 peer, id, name, h->owner_rank, h->region, h->bytes);
  return m;
}

// "<bytes> <name>" as published; a leading '!' carries a peer's setup error instead.
std::pair<std::size_t, std::string> parse_entry(const std::string& text, int peer,
                                                std::uint32_t id) {
  if (text.starts_with('!'))
    TANDEM_THROW(ErrorCode::Io, "rank {} could not allocate registered buffer #{}: {}", peer, id,
                 std::string_view(text).substr(1));
  std::size_t bytes = 0;
  const auto space = text.find(' ');
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + std::min(space, text.size()), bytes);
  if (ec != std::errc{} || space == std::string::npos || end != text.data() + space ||
      space + 1 >= text.size() || text.size() > 256 || text[space + 1] != '/')
    TANDEM_THROW(ErrorCode::Io, "rank {} published a malformed registered-buffer entry for #{}",
                 peer, id);
  return {bytes, text.substr(space + 1)};
}

}  // namespace

struct RegionPool::Region {
  std::uint32_t id = 0;
  std::size_t bytes = 0;
  shm::Mapping own;
  std::vector<shm::Mapping> peers;  ///< in the order of RegionPool::peers_

  std::byte* data() const noexcept { return static_cast<std::byte*>(own.data()) + kPage; }
};

class RegionPool::Handle final : public SharedBuffer::Owner {
 public:
  Handle(std::shared_ptr<RegionPool> pool, std::uint32_t id) : pool_(std::move(pool)), id_(id) {}
  ~Handle() override { pool_->release(id_); }

 private:
  std::shared_ptr<RegionPool> pool_;
  std::uint32_t id_;
};

RegionPool::RegionPool(int rank, std::vector<int> peers) : rank_(rank), peers_(std::move(peers)) {}

RegionPool::~RegionPool() = default;

SharedBuffer RegionPool::allocate(std::size_t bytes, store::Store& store, Deadline deadline,
                                  const std::function<void()>& check_peers) {
  std::uint32_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
  }
  const std::string prefix = fmt::format("region/{}/", id);
  auto region = std::make_unique<Region>();
  region->id = id;
  region->bytes = bytes;
  NameGuard guard;
  try {
    region->own = create_segment(rank_, id, bytes, guard);
  } catch (const Error& e) {
    store.set(fmt::format("{}name/{}", prefix, rank_), "!" + e.message());  // peers fail fast
    throw;
  }
  const auto entries = gather(
      store, rank_, fmt::format("{} {}", bytes, guard.name),
      GatherSpec{.prefix = prefix + "name/", .what = "registered buffer names", .from = peers_},
      deadline, check_peers);
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    const auto [peer_bytes, name] = parse_entry(entries[i], peers_[i], id);
    if (peer_bytes != bytes)
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "Communicator::allocate: rank {} allocated {} bytes as registered buffer #{} "
                   "where this rank (rank {}) allocated {}: every rank must allocate the same "
                   "sizes in the same order",
                   peers_[i], peer_bytes, id, rank_, bytes);
    region->peers.push_back(map_peer(peers_[i], id, bytes, name));
  }
  // Every peer mapped this rank's segment once all are here: the name can go.
  gather(store, rank_, "1",
         GatherSpec{
             .prefix = prefix + "mapped/", .what = "registered buffer mappings", .from = peers_},
         deadline, check_peers);
  ::shm_unlink(guard.name.c_str());
  guard.name.clear();
  void* data = region->data();
  {
    std::lock_guard lock(mu_);
    regions_.push_back(std::move(region));
  }
  TANDEM_DETAIL(shm, "registered buffer #{}: {} bytes, mapped by ranks {}", id, bytes,
                fmt::join(peers_, ","));
  return SharedBuffer(data, bytes, true, std::make_unique<Handle>(shared_from_this(), id));
}

std::optional<RegionSpot> RegionPool::locate(const void* p, std::size_t bytes) const noexcept {
  const auto* b = static_cast<const std::byte*>(p);
  std::lock_guard lock(mu_);
  for (const auto& r : regions_) {
    const std::byte* base = r->data();
    if (b >= base && b <= base + r->bytes && bytes <= static_cast<std::size_t>(base + r->bytes - b))
      return RegionSpot{r->id, static_cast<std::uint64_t>(b - base)};
  }
  return std::nullopt;
}

const void* RegionPool::peer_view(int peer, RegionSpot spot, std::size_t bytes) const noexcept {
  const auto it = std::find(peers_.begin(), peers_.end(), peer);
  if (it == peers_.end()) return nullptr;
  const auto index = static_cast<std::size_t>(it - peers_.begin());
  std::lock_guard lock(mu_);
  for (const auto& r : regions_) {
    if (r->id != spot.region) continue;
    if (spot.offset > r->bytes || bytes > r->bytes - spot.offset) return nullptr;
    return static_cast<const std::byte*>(r->peers[index].data()) + kPage + spot.offset;
  }
  return nullptr;
}

void RegionPool::release(std::uint32_t id) noexcept {
  std::unique_ptr<Region> gone;  // unmapped outside the lock
  std::lock_guard lock(mu_);
  const auto it =
      std::find_if(regions_.begin(), regions_.end(), [id](const auto& r) { return r->id == id; });
  if (it == regions_.end()) return;
  gone = std::move(*it);
  regions_.erase(it);
}

}  // namespace tandem::transport
