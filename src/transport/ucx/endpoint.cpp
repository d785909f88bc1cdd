#include "transport/ucx/endpoint.hpp"

#include "core/reduce.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <cstdio>
#include <cstdlib>

namespace tandem::transport::ucx {
namespace {

// Worker progress calls per progress() at most: each moves what is ready and returns.
constexpr int kProgressCalls = 16;

// A larger message goes as several UCX messages of this size (the last one shorter), so that
// the receiver reduces the first while the next ones arrive, as tandem's TCP reduces what has
// arrived, rather than a whole message after its last byte (docs/benchmarks-hosts.md). A
// multiple of every element size.
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

// Whether a reduction's output and local input do not overlap.
bool disjoint(const Request& r) noexcept {
  const auto* d = static_cast<const std::byte*>(r.dst);
  const auto* s = static_cast<const std::byte*>(r.src);
  return d + r.bytes <= s || s + r.bytes <= d;
}

std::string ep_lanes(ucp_ep_h ep) {
  char* text = nullptr;
  std::size_t size = 0;
  FILE* f = ::open_memstream(&text, &size);
  if (f == nullptr) return {};
  ::ucp_ep_print_info(ep, f);
  std::fclose(f);
  std::string lanes = summarize_lanes(std::string_view(text, size));
  std::free(text);
  return lanes;
}

}  // namespace

Endpoint::Endpoint(int peer, PeerFailureHandler& failures, std::shared_ptr<Context> context,
                   const std::string& peer_address)
    : transport::Endpoint(peer, failures), context_(std::move(context)) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &Endpoint::failed;
  params.err_handler.arg = this;
  const ucs_status_t s = ::ucp_ep_create(context_->state().worker, &params, &ep_);
  if (s != UCS_OK) {
    TANDEM_THROW(ErrorCode::Io, "UCX could not connect rank {} to rank {}: {}", context_->rank(),
                 peer, ::ucs_status_string(s));
  }
  lanes_ = ep_lanes(ep_);
}

Endpoint::~Endpoint() {
  // The mesh closes only after every request completed and the peers said goodbye: nothing
  // is in flight, so a forced close loses nothing and never waits for the peer.
  close_forced(1000);
}

void Endpoint::failed(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* self = static_cast<Endpoint*>(arg);
  if (self->error_ == UCS_OK) self->error_ = status;
}

void Endpoint::sent(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  op->status = status;
  op->done = true;
}

void Endpoint::received(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info,
                        void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  op->status = status;
  if (info != nullptr) {
    op->sender_tag = info->sender_tag;
    op->length = info->length;
  }
  op->done = true;
}

void Endpoint::on_post(Request& r) {
  check_error();
  const bool send = r.kind == RequestKind::send;
  auto& ops = send ? send_ops_ : recv_ops_;
  // A reduction into another buffer than its local input receives into that output and
  // reduces there (dst = src op dst, element by element); in place it needs a stage.
  std::vector<std::byte> stage;
  auto* into = static_cast<std::byte*>(r.dst);
  if (r.kind == RequestKind::recv_reduce && !disjoint(r)) {
    if (!spare_stages_.empty()) {
      stage = std::move(spare_stages_.back());
      spare_stages_.pop_back();
    }
    stage.resize(r.bytes);
    into = stage.data();
  }
  std::size_t offset = 0;
  do {
    Op& op = ops.emplace_back();
    op.offset = offset;
    op.bytes = std::min(kChunkBytes, r.bytes - offset);
    offset += op.bytes;
    op.last = offset == r.bytes;
    if (!stage.empty()) op.staged = into + op.offset;
    post_chunk(r, op, send || into == nullptr ? nullptr : into + op.offset);
  } while (offset < r.bytes);
  // Moving the vector keeps its storage, where the chunks land.
  if (!stage.empty()) ops.back().stage = std::move(stage);
}

void Endpoint::post_chunk(const Request& r, Op& op, std::byte* into) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = &op;
  ucs_status_ptr_t h = nullptr;
  if (r.kind == RequestKind::send) {
    p.cb.send = &Endpoint::sent;
    const auto* from = static_cast<const std::byte*>(r.src);
    h = ::ucp_tag_send_nbx(ep_, from == nullptr ? nullptr : from + op.offset, op.bytes,
                           make_tag(context_->rank(), r.tag), &p);
  } else {
    // Always through the callback: UCX 1.13 leaves recv_info unset when a receive completes
    // at once, and the sender's tag and size are what the receive is checked against.
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = &Endpoint::received;
    // Any tag from this peer: the next message it sent, whatever call it belongs to.
    h = ::ucp_tag_recv_nbx(context_->state().worker, into, op.bytes, make_tag(peer_, 0), kRankMask,
                           &p);
  }
  if (UCS_PTR_IS_ERR(h)) {
    op.status = UCS_PTR_STATUS(h);
    op.done = true;
  } else if (h == nullptr) {
    op.done = true;
  } else {
    op.handle = h;
  }
}

void Endpoint::check_error() {
  if (error_ == UCS_OK) return;
  failures_.peer_closed(peer_, fmt::format("UCX reported {} on the endpoint to rank {} ({})",
                                           ::ucs_status_string(error_), peer_, lanes_));
}

bool Endpoint::progress() {
  for (int i = 0; i < kProgressCalls && ::ucp_worker_progress(context_->state().worker) != 0; ++i) {
  }
  // What arrived before the peer's endpoint went away is delivered first.
  const bool sent_any = retire_sends();
  const bool received_any = retire_recvs();
  if (busy()) check_error();
  return sent_any || received_any;
}

bool Endpoint::peek(std::uint32_t& tag) {
  if (!recvs_.empty()) return false;
  for (int i = 0; i < kProgressCalls && ::ucp_worker_progress(context_->state().worker) != 0; ++i) {
  }
  ucp_tag_recv_info_t info{};
  if (::ucp_tag_probe_nb(context_->state().worker, make_tag(peer_, 0), kRankMask, 0, &info) ==
      nullptr)
    return false;
  tag = tandem_tag(info.sender_tag);
  return true;
}

bool Endpoint::retire_sends() {
  bool moved = false;
  while (!send_ops_.empty() && send_ops_.front().done) {
    Op& op = send_ops_.front();
    if (op.handle != nullptr) ::ucp_request_free(op.handle);
    const ucs_status_t status = op.status;
    const bool last = op.last;
    Request* r = last ? sends_.pop() : sends_.front();
    send_ops_.pop_front();
    if (status != UCS_OK) {
      failures_.peer_closed(
          peer_, fmt::format("a UCX send of {} bytes to rank {} failed: {} ({})", r->bytes, peer_,
                             ::ucs_status_string(status), lanes_));
    }
    moved = true;
    if (!last) continue;  // a send completes with its last chunk
    r->done = r->bytes;
    r->complete = true;
  }
  return moved;
}

bool Endpoint::retire_recvs() {
  bool moved = false;
  while (!recv_ops_.empty() && recv_ops_.front().done) {
    Op& op = recv_ops_.front();
    if (op.handle != nullptr) {
      ::ucp_request_free(op.handle);
      op.handle = nullptr;
    }
    Request* r = recvs_.front();
    // A longer message does not fit (UCX truncates it); a shorter or differently tagged one
    // belongs to another call.
    if (op.status == UCS_ERR_MESSAGE_TRUNCATED) {
      TANDEM_THROW(ErrorCode::Mismatch,
                   "message mismatch with rank {} (ucx): this rank posted a {} of {} bytes with "
                   "tag {:#010x}, rank {} sent a longer message (tag {:#010x}). The ranks are "
                   "calling different collectives, or the same one with different sizes, dtypes "
                   "or roots",
                   peer_, to_string(r->kind), r->bytes, r->tag, peer_, tandem_tag(op.sender_tag));
    }
    if (op.status == UCS_OK && tandem_tag(op.sender_tag) != r->tag)
      throw_mismatch(*r, Link::ucx, tandem_tag(op.sender_tag), op.length);
    if (op.status == UCS_OK && op.length != op.bytes) {
      if (op.last && op.offset == 0) throw_mismatch(*r, Link::ucx, r->tag, op.length);
      throw_protocol(peer_, Link::ucx,
                     fmt::format("chunk of {} bytes (message of {} bytes, tag {:#x}) where {} "
                                 "bytes at offset {} were due",
                                 op.length, r->bytes, r->tag, op.bytes, op.offset));
    }
    if (op.status != UCS_OK) {
      failures_.peer_closed(peer_, fmt::format("a UCX receive from rank {} failed: {} ({})", peer_,
                                               ::ucs_status_string(op.status), lanes_));
    }
    if (r->kind == RequestKind::recv_reduce && op.bytes != 0) {
      const std::size_t es = dtype_size(r->dtype);
      auto* dst = static_cast<std::byte*>(r->dst) + op.offset;
      core::reduce(dst, static_cast<const std::byte*>(r->src) + op.offset,
                   op.staged != nullptr ? op.staged : dst, op.bytes / es, r->dtype, r->op);
    }
    r->done += op.bytes;
    moved = true;
    if (op.last) {
      if (!op.stage.empty()) spare_stages_.push_back(std::move(op.stage));
      recvs_.pop();
      r->complete = true;
    }
    recv_ops_.pop_front();
  }
  return moved;
}

void Endpoint::cancel_all() noexcept {
  for (auto* ops : {&send_ops_, &recv_ops_}) {
    for (Op& op : *ops) {
      if (op.handle == nullptr) continue;
      if (!op.done) ::ucp_request_cancel(context_->state().worker, op.handle);
      ::ucp_request_free(op.handle);
      op.handle = nullptr;
    }
    ops->clear();
  }
}

void Endpoint::close_forced(int progress_calls) noexcept {
  cancel_all();
  if (ep_ == nullptr) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* req = ::ucp_ep_close_nbx(ep_, &p);
  ep_ = nullptr;
  if (!UCS_PTR_IS_PTR(req)) return;
  for (int i = 0; i < progress_calls && ::ucp_request_check_status(req) == UCS_INPROGRESS; ++i)
    ::ucp_worker_progress(context_->state().worker);
  ::ucp_request_free(req);
}

void Endpoint::drop() noexcept {
  // Receives are taken off UCX's matching lists, so nothing lands in the callers' buffers
  // any more; sends still in flight are cut by closing the endpoint with force.
  close_forced(0);
  transport::Endpoint::drop();
}

void Endpoint::flush(Deadline deadline) noexcept {
  // A UCX send completes when its buffer may be reused, not when the peer has it: closing
  // right after could lose it. The flush completes once the peer has everything.
  if (ep_ == nullptr || error_ != UCS_OK) return;
  ucp_request_param_t p{};
  void* req = ::ucp_ep_flush_nbx(ep_, &p);
  if (!UCS_PTR_IS_PTR(req)) return;
  while (::ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < deadline)
    ::ucp_worker_progress(context_->state().worker);
  if (::ucp_request_check_status(req) == UCS_INPROGRESS)
    ::ucp_request_cancel(context_->state().worker, req);
  ::ucp_request_free(req);
}

bool Endpoint::add_poll_fds(std::vector<pollfd>& out) const {
  // Armed, the worker's event fd wakes this rank for UCX's events; not armed (events are
  // pending), the caller must progress again instead of sleeping.
  const ucs_status_t s = ::ucp_worker_arm(context_->state().worker);
  if (s == UCS_ERR_BUSY) return true;
  out.push_back({context_->state().efd, POLLIN, 0});
  return false;
}

}  // namespace tandem::transport::ucx
