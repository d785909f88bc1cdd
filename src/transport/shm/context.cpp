#include "transport/shm/context.hpp"

#include "transport/shm/endpoint.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tandem::transport::shm {
namespace {

std::atomic<unsigned> g_segment_counter{0};

std::string sanitize(std::string_view run_id) {
  std::string out;
  for (char c : run_id.substr(0, 96)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    out.push_back(ok ? c : '_');
  }
  return out;
}

// An fd closed on scope exit (shm fds are needed only until mmap).
struct ScopedFd {
  int fd;
  ~ScopedFd() {
    if (fd >= 0) ::close(fd);
  }
};

// Not populated: setup touches the lines of a ring's first lap (shm/endpoint.cpp), and the
// rest of a ring is mapped at its first use. Mapping every page up front (4 MiB per peer) made
// each communicator's setup milliseconds slower, for pages that small messages never reach.
void* map_shared(int fd, std::size_t bytes, std::size_t offset = 0) {
  void* p =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  return p == MAP_FAILED ? nullptr : p;
}

[[noreturn]] void throw_no_space(const std::string& name, std::size_t bytes, std::size_t buffer,
                                 int err) {
  TANDEM_THROW(ErrorCode::Io,
               "cannot allocate shared-memory segment {} of {} bytes: {}. /dev/shm is too small "
               "(Docker's default is 64 MB): run the container with a larger --shm-size, lower "
               "TANDEM_BUFFSIZE (now {} bytes per peer), or set TANDEM_SHM_DISABLE=1 to use TCP",
               name, bytes, errno_text(err), buffer);
}

}  // namespace

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
  }
  return *this;
}

Mapping::~Mapping() {
  if (data_ != nullptr) ::munmap(data_, bytes_);
}

Context::Context(int rank, std::vector<int> senders, std::size_t buffer_bytes,
                 std::string_view run_id)
    : rank_(rank), senders_(std::move(senders)) {
  const Geometry g = geometry_for(buffer_bytes);
  const std::size_t bytes = segment_bytes(senders_.size(), g);
  const std::string run = sanitize(run_id);
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    name_ = fmt::format("/tandem-{}-{}x{}-{}", run, ::getpid(),
                        g_segment_counter.fetch_add(1, std::memory_order_relaxed), rank);
    fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    // EEXIST: a leftover of a crashed process whose pid this one reuses; take the next name.
    if (fd < 0 && (errno != EEXIST || attempt > 100))
      TANDEM_THROW(ErrorCode::Io,
                   "cannot create shared-memory segment {}: {}. Is /dev/shm mounted and "
                   "writable? Set TANDEM_SHM_DISABLE=1 to use TCP between ranks of this host",
                   name_, errno_text(errno));
  }
  ScopedFd guard{fd};
  bool ok = false;
  struct Unlink {
    const std::string& name;
    const bool& ok;
    ~Unlink() {
      if (!ok) ::shm_unlink(name.c_str());
    }
  } unlink_on_error{name_, ok};
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    throw_no_space(name_, bytes, buffer_bytes, errno);
  // tmpfs allocates on first touch, and a full /dev/shm then kills the process with SIGBUS;
  // reserving every page now turns that into an error we can explain.
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) throw_no_space(name_, bytes, buffer_bytes, rc);
  void* p = map_shared(fd, bytes);
  if (p == nullptr) throw_no_space(name_, bytes, buffer_bytes, errno);
  own_ = Mapping(p, bytes);
  format_segment(p, rank_, senders_, g);
  own_view_ = view_segment(p, bytes, bytes, rank_, name_);
  asymmetric_ = core::asymmetric_fences();
  own_view_.header->asymmetric = asymmetric_ ? 1 : 0;
  ok = true;
  TANDEM_DETAIL(shm,
                "created segment {} ({} bytes: {} channels of {} slots x {} bytes; asymmetric "
                "fences: {})",
                name_, bytes, senders_.size(), g.slot_count, g.slot_bytes,
                asymmetric_ ? "yes" : "no (membarrier unavailable)");
}

Context::~Context() {
  // Normally a peer unlinked it already (ENOENT); this covers a setup that never finished.
  if (!name_.empty()) ::shm_unlink(name_.c_str());
}

void Context::attach(int peer, const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    TANDEM_THROW(ErrorCode::Io,
                 "cannot open rank {}'s shared-memory segment {}: {}. Did rank {} fail or exit "
                 "during setup? Set TANDEM_SHM_DISABLE=1 to use TCP instead",
                 peer, name, errno_text(errno), peer);
  ScopedFd guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0)
    TANDEM_THROW(ErrorCode::Io, "cannot stat rank {}'s shared-memory segment {}: {}", peer, name,
                 errno_text(errno));
  const auto file_bytes = static_cast<std::size_t>(st.st_size);
  const std::size_t head_bytes = std::min(file_bytes, max_header_bytes());
  Peer info;
  info.rank = peer;
  info.name = name;
  void* head = map_shared(fd, head_bytes);
  if (head == nullptr)
    TANDEM_THROW(ErrorCode::Io, "cannot map rank {}'s shared-memory segment {}: {}", peer, name,
                 errno_text(errno));
  info.header = Mapping(head, head_bytes);
  info.view = view_segment(head, head_bytes, file_bytes, peer, name);
  const ChannelDesc desc = find_channel(info.view, file_bytes, rank_, name);
  void* chan = map_shared(fd, desc.bytes, desc.offset);
  if (chan == nullptr)
    TANDEM_THROW(ErrorCode::Io,
                 "cannot map a {}-byte channel of rank {}'s shared-memory segment {}: {}",
                 desc.bytes, peer, name, errno_text(errno));
  info.channel = Mapping(chan, desc.bytes);
  info.outbound = channel_view(chan, desc);
  // Every sender of that segment maps it exactly once: the last one removes the name.
  const std::uint32_t before = info.view.header->mappers.fetch_add(1, std::memory_order_acq_rel);
  if (before + 1 == info.view.header->channel_count) ::shm_unlink(name.c_str());
  peers_.push_back(std::move(info));
}

std::unique_ptr<transport::Endpoint> Context::make_endpoint(int peer,
                                                            PeerFailureHandler& failures) {
  for (Peer& p : peers_) {
    if (p.rank != peer) continue;
    const ChannelDesc desc = find_channel(own_view_, own_.bytes(), peer, name_);
    const ChannelView inbound =
        channel_view(static_cast<std::byte*>(own_.data()) + desc.offset, desc);
    return std::make_unique<Endpoint>(peer, failures, p.outbound, inbound,
                                      Wake{&p.view.doorbell->value, &p.view.sleeping->value,
                                           asymmetric_ && p.view.header->asymmetric == 1, &woken_});
  }
  TANDEM_THROW(ErrorCode::Internal, "no shared-memory segment attached for rank {}", peer);
}

void Context::ring_peers() noexcept {
  for (Peer& p : peers_) {
    p.view.doorbell->value.fetch_add(1, std::memory_order_release);
    core::futex_wake_all(&p.view.doorbell->value);
  }
}

bool Context::peer_on_cpu(int cpu) const noexcept {
  const auto v = static_cast<std::uint32_t>(cpu + 1);
  return std::any_of(peers_.begin(), peers_.end(), [v](const Peer& p) {
    return p.view.cpu->value.load(std::memory_order_relaxed) == v;
  });
}

void Context::hold_life() {
  const int rc = ::pthread_mutex_lock(&own_view_.life->mutex);
  if (rc != 0)
    TANDEM_THROW(ErrorCode::Internal, "cannot take the shared-memory segment's life lock: {}",
                 errno_text(rc));
  holding_life_ = true;
}

void Context::release_life() noexcept {
  if (!holding_life_) return;
  holding_life_ = false;
  ::pthread_mutex_unlock(&own_view_.life->mutex);
}

std::vector<int> Context::ended_peers() noexcept {
  std::vector<int> out;
  for (Peer& p : peers_) {
    auto& word = life_word(*p.view.life);
    if (!p.ended && (word.load(std::memory_order_acquire) & FUTEX_OWNER_DIED) != 0) {
      p.ended = true;
      // The kernel wakes one waiter of a dead holder's lock: this one wakes the rest.
      core::futex_wake_all(&word);
    }
    if (p.ended) {
      if (out.capacity() == 0) out.reserve(peers_.size());
      out.push_back(p.rank);
    }
  }
  return out;
}

void Context::wait_bell(std::uint32_t seen, std::chrono::nanoseconds slice) noexcept {
  auto& bell = own_view_.doorbell->value;
  waiters_.clear();
  waiters_.push_back({&bell, seen});
  for (Peer& p : peers_) {
    if (waiters_.size() == 128) break;  // futex_waitv's limit: the rest are seen by sockets
    if (p.ended) continue;              // seen already (it may have said goodbye first)
    auto& word = life_word(*p.view.life);
    std::uint32_t v = word.load(std::memory_order_acquire);
    if ((v & FUTEX_OWNER_DIED) != 0) return;  // ended: the caller's next check notes it
    if ((v & FUTEX_TID_MASK) == 0) continue;  // not held (yet, or any more): nothing to hear
    // The kernel wakes a waiter of a dead holder's lock only when FUTEX_WAITERS is set, as a
    // contending locker sets it; the holder's unlock at close wakes us then too.
    if ((v & FUTEX_WAITERS) == 0 &&
        !word.compare_exchange_strong(v, v | FUTEX_WAITERS, std::memory_order_acq_rel)) {
      if ((v & FUTEX_OWNER_DIED) != 0) return;
      continue;  // changed meanwhile: looked at again in the next slice
    }
    waiters_.push_back({&word, v | FUTEX_WAITERS});
  }
  if (waiters_.size() == 1 || !core::futex_wait_any(waiters_, slice))
    core::futex_wait(&bell, seen, slice);
}

void Context::ring_self() noexcept {
  own_view_.doorbell->value.fetch_add(1, std::memory_order_release);
  core::futex_wake_all(&own_view_.doorbell->value);
}

}  // namespace tandem::transport::shm
