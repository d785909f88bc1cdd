#include "fake_mesh.hpp"

#include "core/reduce.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

namespace tandem::testing {

using transport::Request;
using transport::RequestKind;

std::string describe(const std::exception_ptr& e) {
  if (!e) return {};
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

class FakeMesh final : public transport::Mesh {
 public:
  FakeMesh(FakeWorld& world, int rank) : world_(world), rank_(rank) {
    info_.rank = rank;
    info_.host = "fake";
    info_.host_id = "fake";
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return world_.size_; }
  transport::Link link(int peer) const noexcept override {
    return peer == rank_ ? transport::Link::self : transport::Link::shm;
  }
  const transport::PeerInfo& peer_info(int) const override { return info_; }

  void post(Request& r) override {
    std::lock_guard lk(world_.mu_);
    throw_if_poisoned();
    if (r.peer < 0 || r.peer >= world_.size_ || r.peer == rank_)
      TANDEM_THROW(ErrorCode::Internal, "rank {} posted a request to invalid peer {}", rank_,
                   r.peer);
    if (r.bytes > 0 && (r.kind == RequestKind::send ? r.src == nullptr : r.dst == nullptr))
      TANDEM_THROW(ErrorCode::Internal, "rank {} posted {} bytes with a null buffer", rank_,
                   r.bytes);
    if (r.kind == RequestKind::recv_reduce && r.bytes % dtype_size(r.dtype) != 0)
      TANDEM_THROW(ErrorCode::Internal, "recv_reduce of {} bytes is not whole elements", r.bytes);
    for (const auto& c : world_.channels_) {
      if (std::find(c.sends.begin(), c.sends.end(), &r) != c.sends.end() ||
          std::find(c.recvs.begin(), c.recvs.end(), &r) != c.recvs.end())
        TANDEM_THROW(ErrorCode::Internal, "rank {} posted a {} again while it is still pending",
                     rank_, r.kind == RequestKind::send ? "send" : "receive");
    }
    r.done = 0;
    r.complete = false;
    r.next = nullptr;
    r.priv[0] = r.priv[1] = 0;
    if (r.kind == RequestKind::send) {
      world_.channel(rank_, r.peer).sends.push_back(&r);
      ++world_.sends_posted_[static_cast<std::size_t>(rank_)];
    } else {
      world_.channel(r.peer, rank_).recvs.push_back(&r);
    }
    ++world_.pending_[static_cast<std::size_t>(rank_)];
  }

  bool test(std::span<Request* const> rs) override {
    std::unique_lock lk(world_.mu_);
    throw_if_poisoned();
    step(lk);
    return all_complete(rs);
  }

  void check_alive() override {
    std::unique_lock lk(world_.mu_);
    throw_if_poisoned();
  }

  void wait(std::span<Request* const> rs, Deadline deadline) override {
    std::unique_lock lk(world_.mu_);
    for (;;) {
      throw_if_poisoned();
      const bool moved = step(lk);
      if (all_complete(rs)) return;
      if (moved) continue;
      const auto now = Clock::now();
      if (now >= deadline) {
        std::string owed;
        for (const Request* r : rs)
          if (!r->complete)
            owed += fmt::format(" {}:{}({}/{} bytes)", r->kind == RequestKind::send ? "to" : "from",
                                r->peer, r->done, r->bytes);
        auto e = std::make_exception_ptr(
            Error(ErrorCode::Timeout, fmt::format("rank {} timed out waiting for{}", rank_, owed)));
        world_.poison(rank_, e);
        std::rethrow_exception(e);
      }
      world_.wake_[static_cast<std::size_t>(rank_)].wait_until(
          lk, std::min(deadline, now + std::chrono::milliseconds(20)));
    }
  }

  void abort(const Error& error) noexcept override {
    std::lock_guard lk(world_.mu_);
    if (!world_.error_) world_.poison(rank_, std::make_exception_ptr(error));
  }
  std::exception_ptr error() const noexcept override {
    std::lock_guard lk(world_.mu_);
    return world_.error_;
  }
  void close() noexcept override {}

 private:
  void throw_if_poisoned() const {
    if (!world_.error_) return;
    if (world_.error_rank_ == rank_) std::rethrow_exception(world_.error_);
    TANDEM_THROW(ErrorCode::Aborted, "rank {} aborted: {}", world_.error_rank_,
                 describe(world_.error_));
  }

  // One progress pass; sometimes lets other threads run in between (random interleavings).
  bool step(std::unique_lock<std::mutex>& lk) {
    bool moved = false;
    try {
      moved = world_.progress(rank_);
    } catch (...) {
      world_.poison(rank_, std::current_exception());
      throw;
    }
    if (moved && world_.rng_() % 4 == 0) {
      lk.unlock();
      std::this_thread::yield();
      lk.lock();
      throw_if_poisoned();
    }
    return moved;
  }

  static bool all_complete(std::span<Request* const> rs) {
    return std::all_of(rs.begin(), rs.end(), [](const Request* r) { return r->complete; });
  }

  FakeWorld& world_;
  int rank_;
  transport::PeerInfo info_;
};

FakeWorld::FakeWorld(int size, FakeOptions options)
    : size_(size),
      options_(options),
      wake_(static_cast<std::size_t>(size)),
      channels_(static_cast<std::size_t>(size * size)),
      pending_(static_cast<std::size_t>(size)),
      sends_posted_(static_cast<std::size_t>(size)),
      rng_(options.seed) {
  for (int r = 0; r < size; ++r) meshes_.push_back(std::make_unique<FakeMesh>(*this, r));
  reset();
}

FakeWorld::~FakeWorld() = default;

transport::Mesh& FakeWorld::mesh(int rank) {
  return *meshes_.at(static_cast<std::size_t>(rank));
}

void FakeWorld::reset() {
  std::lock_guard lk(mu_);
  error_ = nullptr;
  error_rank_ = -1;
  for (Channel& c : channels_) {
    c = Channel{};
    c.capacity = options_.min_capacity;
  }
  std::fill(pending_.begin(), pending_.end(), 0);
}

std::size_t FakeWorld::sends_posted(int rank) const {
  std::lock_guard lk(mu_);
  return sends_posted_.at(static_cast<std::size_t>(rank));
}

std::size_t FakeWorld::pending(int rank) const {
  std::lock_guard lk(mu_);
  return pending_.at(static_cast<std::size_t>(rank));
}

bool FakeWorld::idle() const {
  std::lock_guard lk(mu_);
  return std::all_of(channels_.begin(), channels_.end(), [](const Channel& c) {
    return c.sends.empty() && c.recvs.empty() && c.msgs.empty() && c.buffered == 0;
  });
}

std::size_t FakeWorld::piece(std::size_t limit) {
  const std::size_t cap = std::min(limit, options_.max_piece);
  return cap <= 1 ? cap : 1 + rng_() % cap;
}

void FakeWorld::poison(int rank, std::exception_ptr e) {
  if (error_) return;
  error_ = std::move(e);
  error_rank_ = rank;
  // Pending requests are dropped and never touched again (the callers may unwind).
  for (Channel& c : channels_) {
    c.sends.clear();
    c.recvs.clear();
  }
  for (auto& cv : wake_) cv.notify_all();
}

bool FakeWorld::progress(int rank) {
  bool moved = false;
  const int start = static_cast<int>(rng_() % static_cast<std::uint64_t>(size_));
  for (int i = 0; i < size_; ++i) {
    const int peer = (start + i) % size_;
    if (peer == rank) continue;
    auto& peer_wake = wake_[static_cast<std::size_t>(peer)];

    Channel& out = channel(rank, peer);
    while (!out.sends.empty()) {
      Request* s = out.sends.front();
      if (s->priv[0] == 0) {
        if (out.msgs.empty() && out.buffered == 0) {
          // A new buffer size whenever the channel drains: from the whole message down to
          // 1/16 of it (never below min_capacity), so large messages still cross in pieces.
          out.capacity = std::clamp<std::size_t>(s->bytes >> (rng_() % 5), options_.min_capacity,
                                                 options_.max_capacity);
        }
        out.msgs.push_back(Message{s->tag, std::vector<std::byte>(s->bytes), 0, 0});
        s->priv[0] = 1;
        moved = true;
        peer_wake.notify_one();
      }
      Message& m = out.msgs.back();
      if (m.written < s->bytes) {
        const std::size_t room = out.capacity - out.buffered;
        if (room == 0) break;
        const std::size_t k = piece(std::min(room, s->bytes - m.written));
        std::memcpy(m.data.data() + m.written, static_cast<const std::byte*>(s->src) + m.written,
                    k);
        m.written += k;
        out.buffered += k;
        s->done = m.written;
        moved = true;
        peer_wake.notify_one();
        if (m.written < s->bytes) {
          if (rng_() % 2 == 0) break;
          continue;
        }
      }
      s->complete = true;
      out.sends.pop_front();
      --pending_[static_cast<std::size_t>(rank)];
      moved = true;
    }

    Channel& in = channel(peer, rank);
    while (!in.recvs.empty() && !in.msgs.empty()) {
      Request* q = in.recvs.front();
      Message& m = in.msgs.front();
      if (q->priv[0] == 0) {
        if (m.tag != q->tag || m.data.size() != q->bytes) {
          TANDEM_THROW(ErrorCode::Mismatch,
                       "rank {} expected a message with tag {:#x} and {} bytes from rank {}, "
                       "which sent tag {:#x} and {} bytes",
                       rank, q->tag, q->bytes, peer, m.tag, m.data.size());
        }
        q->priv[0] = 1;
      }
      const std::size_t avail = m.written - m.read;
      if (avail > 0) {
        std::size_t k = piece(avail);
        if (q->kind == RequestKind::recv_reduce) {
          const std::size_t es = dtype_size(q->dtype);
          if (avail < es) break;
          k = std::max(k / es * es, es);
          core::reduce(static_cast<std::byte*>(q->dst) + m.read,
                       static_cast<const std::byte*>(q->src) + m.read, m.data.data() + m.read,
                       k / es, q->dtype, q->op);
        } else {
          std::memcpy(static_cast<std::byte*>(q->dst) + m.read, m.data.data() + m.read, k);
        }
        m.read += k;
        in.buffered -= k;
        q->done = m.read;
        moved = true;
        peer_wake.notify_one();
      }
      if (m.read < m.data.size() || m.written < m.data.size()) break;
      q->complete = true;
      in.recvs.pop_front();
      in.msgs.pop_front();
      --pending_[static_cast<std::size_t>(rank)];
      moved = true;
    }
  }
  return moved;
}

std::vector<std::exception_ptr> FakeWorld::run(
    const std::function<void(int, transport::Mesh&)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size_));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < size_; ++r) {
      threads.emplace_back([&, r] {
        try {
          fn(r, mesh(r));
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          std::lock_guard lk(mu_);
          poison(r, std::current_exception());
        }
      });
    }
  }
  return errors;
}

}  // namespace tandem::testing
