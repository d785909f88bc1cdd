#pragma once
// One peer over UCX: each posted request is one tagged UCX operation per chunk of at most
// kChunkBytes, all posted at once (UCX orders and moves them); progress() drives the worker
// and retires the chunks at the heads of the queues as UCX completes them, checking each
// received tag and size against its request. A reduction reduces each chunk as it retires,
// while the next ones are still on the way: into its output, or, in place, from a stage.

#include "transport/endpoint.hpp"
#include "transport/ucx/context.hpp"
#include "transport/ucx/wire.hpp"

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <ucp/api/ucp.h>
#include <vector>

namespace tandem::transport::ucx {

struct Context::State {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int efd = -1;
};

class Endpoint final : public transport::Endpoint {
 public:
  /// Connects to the worker at `peer_address` (binary). Throws Error(Io) naming UCX's status.
  Endpoint(int peer, PeerFailureHandler& failures, std::shared_ptr<Context> context,
           const std::string& peer_address);
  ~Endpoint() override;

  Link link() const noexcept override { return Link::ucx; }
  bool progress() override;
  void drop() noexcept override;
  /// Asks UCX for an unexpected message from this peer (ucp_tag_probe_nb, not removed).
  bool peek(std::uint32_t& tag) override;
  bool add_poll_fds(std::vector<pollfd>& out) const override;
  void flush(Deadline deadline) noexcept override;
  /// "tcp/tdm0" (UCX's transports and devices to this peer).
  const std::string& lanes() const noexcept { return lanes_; }

 private:
  /// One posted UCX operation, a chunk of a request; its address is the callback's user
  /// data (a deque keeps it in place while later ones are added).
  struct Op {
    void* handle = nullptr;  ///< UCX's request while in flight
    bool done = false;
    ucs_status_t status = UCS_OK;
    std::uint64_t sender_tag = 0;       ///< received: the UCX tag of the message
    std::size_t length = 0;             ///< received: its size
    std::size_t offset = 0;             ///< of the chunk in its request
    std::size_t bytes = 0;              ///< of the chunk
    bool last = true;                   ///< the request's last chunk: it completes the request
    const std::byte* staged = nullptr;  ///< recv_reduce in place: where the chunk landed
    std::vector<std::byte> stage;       ///< the last chunk's: the request's incoming values
  };

  void on_post(Request& r) override;
  void post_chunk(const Request& r, Op& op, std::byte* into);
  bool retire_sends();
  bool retire_recvs();
  void check_error();
  void cancel_all() noexcept;
  /// Cancels what is posted and closes the endpoint with force, progressing the worker at
  /// most `progress_calls` times for the close to finish.
  void close_forced(int progress_calls) noexcept;
  static void sent(void* request, ucs_status_t status, void* user_data);
  static void received(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                       void* user_data);
  static void failed(void* arg, ucp_ep_h ep, ucs_status_t status);

  std::shared_ptr<Context> context_;
  ucp_ep_h ep_ = nullptr;
  std::deque<Op> send_ops_;
  std::deque<Op> recv_ops_;
  std::vector<std::vector<std::byte>> spare_stages_;
  ucs_status_t error_ = UCS_OK;  ///< set by UCX's error handler
  std::string lanes_;
};

}  // namespace tandem::transport::ucx
