#include "transport/tcp/endpoint.hpp"

#include "core/reduce.hpp"

#include <tandem/error.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <sys/uio.h>

namespace tandem::transport::tcp {
namespace {

constexpr std::size_t kBufferBytes = 256u << 10;
// Payloads with at least this much left are read straight into the destination.
constexpr std::uint64_t kDirectMin = 4096;
// Request::priv[0]: parts finished; priv[1] bit 0: stream 0 has checked the header.
constexpr std::uint64_t kHeadChecked = 1;

bool would_block(int err) noexcept {
  return err == EAGAIN || err == EWOULDBLOCK;
}

}  // namespace

long RecvBuffer::fill(int fd) noexcept {
  if (end_ == capacity_ && begin_ > 0) {
    std::memmove(data_.get(), data_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  for (;;) {
    const ssize_t n = ::recv(fd, data_.get() + end_, capacity_ - end_, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) end_ += static_cast<std::size_t>(n);
    return static_cast<long>(n);
  }
}

Endpoint::Stream::Stream(net::Fd f, int i) : fd(std::move(f)), index(i), buf(kBufferBytes) {}

Endpoint::Endpoint(int peer, PeerFailureHandler& failures, std::vector<net::Fd> data)
    : transport::Endpoint(peer, failures), n_(static_cast<int>(data.size())) {
  TANDEM_CHECK(n_ >= 1 && n_ <= kMaxStreams, "{} data streams to rank {}", n_, peer);
  streams_.reserve(data.size());
  for (int i = 0; i < n_; ++i)
    streams_.emplace_back(std::move(data[static_cast<std::size_t>(i)]), i);
}

int Endpoint::parts(const Request& r) const noexcept {
  return is_striped(r.bytes, n_) ? n_ : 1;
}

void Endpoint::on_post(Request& r) {
  for (Stream& s : streams_) {
    Request*& cur = r.kind == RequestKind::send ? s.send_cur : s.recv_cur;
    if (cur == nullptr) cur = &r;
  }
}

bool Endpoint::progress() {
  bool moved = false;
  if (!sends_.empty()) {
    for (Stream& s : streams_)
      if (s.send_cur != nullptr) moved = send_on(s) || moved;
    moved = retire(sends_) || moved;
  }
  if (!recvs_.empty()) {
    for (Stream& s : streams_)
      if (s.recv_cur != nullptr) moved = recv_on(s) || moved;
    moved = retire(recvs_) || moved;
  }
  return moved;
}

// Completes finished requests in FIFO order. A stream that does not carry a request may
// still point at it: move it on first, so nothing refers to a completed request.
bool Endpoint::retire(RequestQueue& q) {
  bool moved = false;
  while (Request* r = q.front()) {
    if (r->priv[0] < static_cast<std::uint64_t>(parts(*r))) break;
    for (Stream& s : streams_) {
      if (s.send_cur == r) s.send_cur = r->next;
      if (s.recv_cur == r) s.recv_cur = r->next;
    }
    q.pop();
    r->complete = true;
    moved = true;
  }
  return moved;
}

bool Endpoint::send_on(Stream& s) {
  bool moved = false;
  s.want_write = false;
  while (Request* r = s.send_cur) {
    if (!carries(r->bytes, s.index, n_)) {
      s.send_cur = r->next;
      continue;
    }
    const Part p = part_of(r->bytes, s.index, n_);
    if (s.send_done == 0)
      s.send_head = FrameHeader{r->tag, is_striped(r->bytes, n_) ? kFlagStriped : 0u, r->bytes};
    constexpr std::uint64_t kHead = sizeof(FrameHeader);
    iovec iov[2];
    int count = 0;
    if (s.send_done < kHead)
      iov[count++] = {reinterpret_cast<std::byte*>(&s.send_head) + s.send_done,
                      kHead - s.send_done};
    const std::uint64_t sent = s.send_done > kHead ? s.send_done - kHead : 0;
    if (sent < p.size())
      iov[count++] = {
          const_cast<std::byte*>(static_cast<const std::byte*>(r->src)) + p.begin + sent,
          p.size() - sent};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<std::size_t>(count);
    const ssize_t w = ::sendmsg(s.fd.get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (would_block(errno)) {
        s.want_write = true;
        return moved;
      }
      closed(s, errno);
    }
    const std::uint64_t before = s.send_done;
    s.send_done += static_cast<std::uint64_t>(w);
    r->done += std::max(s.send_done, kHead) - std::max(before, kHead);
    moved = true;
    if (s.send_done < kHead + p.size()) {  // the socket is full
      s.want_write = true;
      return moved;
    }
    s.send_done = 0;
    ++r->priv[0];
    s.send_cur = r->next;
  }
  return moved;
}

bool Endpoint::fill(Stream& s) {
  const long n = s.buf.fill(s.fd.get());
  if (n > 0) return true;
  if (n < 0 && would_block(errno)) return false;
  closed(s, n == 0 ? 0 : errno);
}

bool Endpoint::recv_on(Stream& s) {
  bool moved = false;
  while (Request* r = s.recv_cur) {
    if (s.index > 0) {
      if ((r->priv[1] & kHeadChecked) == 0) return moved;  // stream 0 checks the header first
      if (!is_striped(r->bytes, n_)) {
        s.recv_cur = r->next;
        continue;
      }
    }
    if (!s.have_head) {
      while (s.buf.size() < sizeof(FrameHeader))
        if (!fill(s)) return moved;
      FrameHeader h;
      std::memcpy(&h, s.buf.data(), sizeof h);
      s.buf.consume(sizeof h);
      if (h.tag != r->tag || h.bytes != r->bytes) {
        if (s.index == 0) throw_mismatch(*r, Link::tcp, h.tag, h.bytes);
        throw_protocol(
            peer_, Link::tcp,
            fmt::format("stream {} carries a message of {} bytes, tag {:#x}, where stream "
                        "0 announced {} bytes, tag {:#x}",
                        s.index, h.bytes, h.tag, r->bytes, r->tag));
      }
      if (((h.flags & kFlagStriped) != 0) != is_striped(r->bytes, n_))
        throw_protocol(
            peer_, Link::tcp,
            fmt::format("striping flag {} for {} bytes over {} streams", h.flags, r->bytes, n_));
      if (s.index == 0) r->priv[1] |= kHeadChecked;
      s.have_head = true;
      s.recv_done = 0;
      moved = true;
    }
    const Part p = part_of(r->bytes, s.index, n_);
    auto* dst = static_cast<std::byte*>(r->dst) + p.begin;
    while (s.recv_done < p.size()) {
      const std::uint64_t left = p.size() - s.recv_done;
      if (s.buf.size() > 0) {
        std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(s.buf.size(), left));
        if (r->kind == RequestKind::recv) {
          std::memcpy(dst + s.recv_done, s.buf.data(), take);
        } else {
          const std::size_t es = dtype_size(r->dtype);
          take = take / es * es;
          if (take == 0) {  // part of one element only: wait for the rest
            if (!fill(s)) return moved;
            continue;
          }
          core::reduce(dst + s.recv_done,
                       static_cast<const std::byte*>(r->src) + p.begin + s.recv_done, s.buf.data(),
                       take / es, r->dtype, r->op);
        }
        s.buf.consume(take);
        s.recv_done += take;
        r->done += take;
        moved = true;
        continue;
      }
      if (r->kind == RequestKind::recv && left >= kDirectMin) {
        const ssize_t n = ::recv(s.fd.get(), dst + s.recv_done, left, MSG_DONTWAIT);
        if (n > 0) {
          s.recv_done += static_cast<std::uint64_t>(n);
          r->done += static_cast<std::uint64_t>(n);
          moved = true;
        } else if (n == 0) {
          closed(s, 0);
        } else if (errno != EINTR) {
          if (would_block(errno)) return moved;
          closed(s, errno);
        }
      } else if (!fill(s)) {
        return moved;
      }
    }
    s.have_head = false;
    ++r->priv[0];
    s.recv_cur = r->next;
  }
  return moved;
}

bool Endpoint::peek(std::uint32_t& tag) {
  Stream& s = streams_[0];
  if (!recvs_.empty() || s.have_head) return false;
  // A closed stream reads as nothing here: a peer that left owes no message, and one that
  // died is named by the mesh from its control connection.
  while (s.buf.size() < sizeof(FrameHeader))
    if (s.buf.fill(s.fd.get()) <= 0) return false;
  FrameHeader h;
  std::memcpy(&h, s.buf.data(), sizeof h);
  tag = h.tag;
  return true;
}

void Endpoint::drop() noexcept {
  transport::Endpoint::drop();
  for (Stream& s : streams_) {
    s.send_cur = s.recv_cur = nullptr;
    s.send_done = s.recv_done = 0;
    s.have_head = s.want_write = false;
  }
}

bool Endpoint::add_poll_fds(std::vector<pollfd>& out) const {
  for (const Stream& s : streams_) {
    short ev = 0;
    if (s.want_write && s.send_cur != nullptr) ev |= POLLOUT;
    if (s.recv_cur != nullptr && (s.index == 0 || (s.recv_cur->priv[1] & kHeadChecked) != 0))
      ev |= POLLIN;
    if (ev != 0) out.push_back({s.fd.get(), ev, 0});
  }
  return false;
}

void Endpoint::closed(const Stream& s, int err) {
  failures_.peer_closed(peer_, err == 0
                                   ? fmt::format("data stream {} reached end of file", s.index)
                                   : fmt::format("data stream {}: {}", s.index, errno_text(err)));
}

}  // namespace tandem::transport::tcp
