#pragma once
// One peer over tcp: `streams` data sockets. Stream 0 carries every message (frame header,
// then payload); messages of kStripeMin bytes or more are cut into one part per stream,
// each stream keeping FIFO order. A receive is checked against stream 0's header (tag,
// size) before any other stream may deliver into it.

#include "core/net.hpp"
#include "transport/endpoint.hpp"
#include "transport/tcp/wire.hpp"

#include <cstddef>
#include <memory>
#include <vector>

namespace tandem::transport::tcp {

/// Read-ahead and staging buffer of one stream: small messages come in with one recv(),
/// reductions read into it and reduce out of it.
class RecvBuffer {
 public:
  explicit RecvBuffer(std::size_t capacity)
      : data_(std::make_unique_for_overwrite<std::byte[]>(capacity)), capacity_(capacity) {}
  std::byte* data() const noexcept { return data_.get() + begin_; }
  std::size_t size() const noexcept { return end_ - begin_; }
  void consume(std::size_t n) noexcept {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }
  /// recv() into the free space: > 0 bytes read, 0 at EOF, -1 with errno set.
  long fill(int fd) noexcept;

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

class Endpoint final : public transport::Endpoint {
 public:
  Endpoint(int peer, PeerFailureHandler& failures, std::vector<net::Fd> data);

  Link link() const noexcept override { return Link::tcp; }
  bool progress() override;
  void drop() noexcept override;
  /// Reads stream 0 ahead (into its buffer) until the next frame header is there. A closed
  /// stream is no message: the mesh names a dead peer from its control connection.
  bool peek(std::uint32_t& tag) override;
  bool add_poll_fds(std::vector<pollfd>& out) const override;

 private:
  struct Stream {
    Stream(net::Fd f, int i);
    net::Fd fd;
    int index;
    Request* send_cur = nullptr;  ///< next request this stream sends a part of
    std::uint64_t send_done = 0;  ///< bytes of the current frame written, header first
    FrameHeader send_head{};
    bool want_write = false;
    Request* recv_cur = nullptr;
    bool have_head = false;
    std::uint64_t recv_done = 0;  ///< payload bytes of the current part delivered
    RecvBuffer buf;
  };

  void on_post(Request& r) override;
  bool send_on(Stream& s);
  bool recv_on(Stream& s);
  bool fill(Stream& s);
  bool retire(RequestQueue& q);
  int parts(const Request& r) const noexcept;
  [[noreturn]] void closed(const Stream& s, int err);

  std::vector<Stream> streams_;
  int n_;
};

}  // namespace tandem::transport::tcp
