#include "transport/tcp/connector.hpp"

#include "transport/endpoint.hpp"
#include "transport/mesh.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <poll.h>
#include <sys/socket.h>

namespace tandem::transport::tcp {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kFirstBackoff{10};
constexpr milliseconds kMaxBackoff{1000};
constexpr std::size_t kMaxPendingIncoming = 1024;

std::string purpose_name(int purpose) {
  return purpose == kControlPurpose ? std::string("control")
                                    : fmt::format("data stream {}", purpose - 1);
}

std::string failure_text(int err) {
  return err == -1 ? std::string("connection closed")
                   : fmt::format("{} ({})", transport::errno_text(err), err);
}

int again_or(int err) noexcept {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR ? 0 : err;
}

}  // namespace

bool Hello::read(int* err) {
  for (;;) {
    const HelloParse p = parse_hello({in.data(), in_done});
    if (p.need == 0) {
      head = p.head;
      return true;
    }
    const ssize_t n = ::recv(fd.get(), in.data() + in_done, p.need, MSG_DONTWAIT);
    if (n == 0) {
      *err = -1;
      return false;
    }
    if (n < 0) {
      *err = again_or(errno);
      return false;
    }
    in_done += static_cast<std::size_t>(n);
  }
}

bool Hello::write(int* err) {
  while (out_done < out.size()) {
    const ssize_t n =
        ::send(fd.get(), out.data() + out_done, out.size() - out_done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      *err = again_or(errno);
      return false;
    }
    out_done += static_cast<std::size_t>(n);
  }
  return true;
}

std::string_view Hello::token() const noexcept {
  return parse_hello({in.data(), in_done}).token;
}

Connector::Connector(int rank, int size, std::string_view token, const net::Fd& listener,
                     std::size_t& rejected)
    : rank_(rank),
      size_(size),
      token_(token),
      listener_(listener),
      rejected_(rejected),
      peers_(static_cast<std::size_t>(size)),
      addresses_(static_cast<std::size_t>(size)),
      next_address_(static_cast<std::size_t>(size)) {}

void Connector::set_target(int peer, const Target& target) {
  Peer& p = at(peer);
  if (p.known) return;
  p.target = target;
  p.known = true;
  p.sockets.data.resize(static_cast<std::size_t>(target.streams));
  p.missing = 1 + target.streams;
  auto early = std::move(p.early);
  p.early.clear();
  for (auto& [purpose, fd] : early) {
    if (purpose > target.streams) {
      TANDEM_WARN(init, "rank {} opened {}, but has only {} data streams to this rank: closed",
                  peer, purpose_name(purpose), target.streams);
      continue;
    }
    keep(peer, purpose, std::move(fd), true);
  }
}

void Connector::dial(int peer) {
  if (at(peer).phase == Phase::idle) open(peer);
}

void Connector::open(int peer) {
  Peer& p = at(peer);
  TANDEM_CHECK_ARG(p.known, "rank {} cannot connect to rank {}: its address is unknown", rank_,
                   peer);
  auto& list = addresses_[static_cast<std::size_t>(peer)];
  if (list.empty()) list = net::resolve(p.target.host, p.target.port);
  p.phase = Phase::dialing;
  for (int purpose = 0; purpose <= p.target.streams; ++purpose) {
    Outgoing o;
    o.peer = peer;
    o.purpose = purpose;
    o.backoff = kFirstBackoff;
    outgoing_.push_back(std::move(o));
  }
}

void Connector::keep(int peer, int purpose, net::Fd fd, bool tune) {
  Peer& p = at(peer);
  if (!p.known) {
    p.early.emplace_back(purpose, std::move(fd));
    return;
  }
  net::Fd& slot = purpose == kControlPurpose
                      ? p.sockets.control
                      : p.sockets.data[static_cast<std::size_t>(purpose - 1)];
  if (slot) return;  // decide() turns a second one away; a dial's slot is never filled twice
  if (tune) tune_socket(fd.get(), purpose != kControlPurpose, p.target.same_host);
  slot = std::move(fd);
  if (--p.missing == 0 && p.phase != Phase::connected) {
    p.phase = Phase::connected;
    ready_.push_back(peer);
  }
}

void Connector::cancel_dials(int peer) {
  for (Outgoing& o : outgoing_) {
    if (o.peer != peer || o.state == Outgoing::State::done) continue;
    o.hello = Hello{};
    o.state = Outgoing::State::done;
  }
}

void Connector::superseded(int peer) {
  Peer& p = at(peer);
  cancel_dials(peer);
  if (p.phase != Phase::dialing) return;  // its connection is being accepted already
  p.phase = Phase::awaiting;
  p.redial_at = Clock::now() + kRedial;
  p.last_error = fmt::format(
      "rank {} is connecting to this rank (both dialed at once: the lower rank's connection "
      "is kept)",
      peer);
  awaiting_.push_back(peer);
}

bool Connector::connecting(int peer) const noexcept {
  const Phase ph = at(peer).phase;
  return ph != Phase::idle && ph != Phase::connected;
}

std::vector<std::pair<int, PeerSockets>> Connector::take_connected() {
  std::vector<std::pair<int, PeerSockets>> out;
  for (int peer : ready_) out.emplace_back(peer, std::move(at(peer).sockets));
  ready_.clear();
  return out;
}

std::string Connector::status(int peer) const {
  const Peer& p = at(peer);
  const std::string where =
      p.known ? net::format_host_port(p.target.host, p.target.port) : std::string("?");
  switch (p.phase) {
    case Phase::idle:
      return peer < rank_ ? fmt::format("no connection from rank {} yet", peer)
                          : fmt::format("not connected to rank {} at {}", peer, where);
    case Phase::dialing:
      return fmt::format("connecting to rank {} at {}: {}", peer, where,
                         p.refused ? "refused: nothing listens there any more" : p.last_error);
    case Phase::awaiting:
      return p.last_error;
    case Phase::incoming:
      return fmt::format("rank {} is connecting to this rank ({} connection(s) still missing)",
                         peer, p.known ? p.missing : 1);
    case Phase::connected:
      return fmt::format("connected to rank {}", peer);
  }
  return {};
}

Clock::time_point Connector::start_due(Clock::time_point now, Clock::time_point wake) {
  for (Outgoing& o : outgoing_) {
    if (o.state != Outgoing::State::waiting) continue;
    if (now >= o.retry_at) start(o);
    if (o.state == Outgoing::State::waiting) wake = std::min(wake, o.retry_at);
  }
  std::vector<int> still;
  for (int peer : awaiting_) {
    Peer& p = at(peer);
    if (p.phase != Phase::awaiting) continue;
    if (now >= p.redial_at) {
      open(peer);  // the lower rank's connection never came: try ours again
    } else {
      still.push_back(peer);
      wake = std::min(wake, p.redial_at);
    }
  }
  awaiting_ = std::move(still);
  return wake;
}

void Connector::start(Outgoing& o) {
  const auto& list = addresses_[static_cast<std::size_t>(o.peer)];
  const net::SockAddr& a = list[next_address_[static_cast<std::size_t>(o.peer)]++ % list.size()];
  net::Fd fd(::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd)
    TANDEM_THROW(ErrorCode::Io, "rank {} cannot create a socket to connect to rank {}: {}{}", rank_,
                 o.peer, errno_text(errno),
                 errno == EMFILE || errno == ENFILE
                     ? ". A rank holds 2 sockets per peer it exchanges messages with (all of "
                       "them in an all-to-all): raise the open-file limit (ulimit -n)"
                     : "");
  tune_socket(fd.get(), o.purpose != kControlPurpose, at(o.peer).target.same_host);
  o.hello = Hello{};
  o.hello.out = encode_hello(rank_, o.peer, size_, o.purpose, token_);
  o.hello.fd = std::move(fd);
  if (::connect(o.hello.fd.get(), a.get(), a.len) == 0)
    o.state = Outgoing::State::writing;
  else if (errno == EINPROGRESS || errno == EINTR)
    o.state = Outgoing::State::connecting;
  else
    fail(o, errno, failure_text(errno));
}

void Connector::fail(Outgoing& o, int err, std::string why) {
  Peer& p = at(o.peer);
  if (err == ECONNREFUSED && refusal_final_) p.refused = true;
  ++failed_dials_;
  o.hello = Hello{};
  o.state = Outgoing::State::waiting;
  p.last_error = fmt::format("{}: {}", purpose_name(o.purpose), why);
  o.retry_at = Clock::now() + o.backoff;
  o.backoff = std::min(o.backoff * 2, kMaxBackoff);
}

bool Connector::step(Outgoing& o) {
  int err = 0;
  if (o.state == Outgoing::State::connecting) {
    socklen_t len = sizeof err;
    ::getsockopt(o.hello.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail(o, err, failure_text(err)), false;
    o.state = Outgoing::State::writing;
  }
  if (o.state == Outgoing::State::writing) {
    if (!o.hello.write(&err)) {
      if (err != 0) fail(o, err, failure_text(err));
      return false;
    }
    o.state = Outgoing::State::reading;
  }
  if (!o.hello.read(&err)) {
    if (err == -1)
      fail(o, err,
           "the peer closed the connection during the handshake (it rejected this rank's HELLO: "
           "a different TANDEM_STORE_TOKEN?)");
    else if (err != 0)
      fail(o, err, failure_text(err));
    return false;
  }
  const HelloHead& head = o.hello.head;
  std::string why = check_hello(head, o.hello.token(), rank_, size_, token_);
  if (why.empty() && head.from == o.peer && head.purpose == kSupersededPurpose && o.peer < rank_) {
    superseded(o.peer);
    return true;
  }
  if (why.empty() && (head.from != o.peer || head.purpose != o.purpose))
    why = fmt::format("answered as rank {} {} instead of rank {} {}", head.from,
                      purpose_name(head.purpose), o.peer, purpose_name(o.purpose));
  if (!why.empty()) {
    if (at(o.peer).last_error.find("invalid HELLO") == std::string::npos)
      TANDEM_WARN(init, "rank {} at {} answered with an invalid HELLO: {}", o.peer,
                  net::format_host_port(at(o.peer).target.host, at(o.peer).target.port), why);
    fail(o, 0, "invalid HELLO answer: " + why);
    return false;
  }
  o.state = Outgoing::State::done;
  keep(o.peer, o.purpose, std::move(o.hello.fd), false);
  o.hello = Hello{};
  return true;
}

std::string Connector::decide(Incoming& in) {
  const HelloHead& head = in.hello.head;
  std::string why = check_hello(head, in.hello.token(), rank_, size_, token_);
  if (!why.empty()) return why;
  const int from = head.from;
  const int purpose = head.purpose;
  if (purpose == kSupersededPurpose) return "an answer where a HELLO was due";
  Peer& p = at(from);
  if (p.phase == Phase::connected) {
    // A dial the peer cancelled when the two dialed at once, still queued at this listener.
    in.stale = true;
    return fmt::format("a cancelled dial of rank {}, which is connected already", from);
  }
  if (p.known && purpose > p.target.streams)
    return fmt::format("{} from rank {}, which has only {} data streams to this rank",
                       purpose_name(purpose), from, p.target.streams);
  const bool have = p.known ? (purpose == kControlPurpose
                                   ? p.sockets.control.valid()
                                   : p.sockets.data[static_cast<std::size_t>(purpose - 1)].valid())
                            : std::any_of(p.early.begin(), p.early.end(),
                                          [&](const auto& e) { return e.first == purpose; });
  if (have && p.phase == Phase::incoming)
    return fmt::format("a second {} from rank {}", purpose_name(purpose), from);
  if (p.phase == Phase::dialing && from > rank_) {
    in.keep = false;  // this rank's own connection is the one kept
    return {};
  }
  if (p.phase == Phase::dialing || p.phase == Phase::awaiting) {
    cancel_dials(from);
    if (p.known) {  // nothing of this rank's dials completed (the peer would not dial then)
      p.sockets = PeerSockets{};
      p.sockets.data.resize(static_cast<std::size_t>(p.target.streams));
      p.missing = 1 + p.target.streams;
    }
  }
  p.phase = Phase::incoming;
  return {};
}

bool Connector::step(Incoming& in) {
  int err = 0;
  if (in.state == Incoming::State::reading) {
    if (!in.hello.read(&err)) {
      if (err == 0) return true;
      TANDEM_DETAIL(init, "connection from {} closed during the handshake: {}", in.where,
                    failure_text(err));
      return false;
    }
    if (const std::string why = decide(in); !why.empty()) {
      // A rejected peer retries with backoff: say it once, then only at DETAIL level.
      if (in.stale)
        TANDEM_DETAIL(init, "closed connection from {}: {}", in.where, why);
      else if (rejected_++ == 0)
        TANDEM_WARN(init,
                    "rejected connection from {}: {} (further rejections are logged at "
                    "TANDEM_DEBUG=DETAIL)",
                    in.where, why);
      else
        TANDEM_DETAIL(init, "rejected connection from {}: {}", in.where, why);
      return false;
    }
    const HelloHead& h = in.hello.head;
    in.hello.out =
        encode_hello(rank_, h.from, size_, in.keep ? h.purpose : kSupersededPurpose, token_);
    in.state = Incoming::State::writing;
  }
  if (!in.hello.write(&err)) {
    if (err == 0) return true;
    TANDEM_DETAIL(init, "connection from {} failed during the handshake: {}", in.where,
                  failure_text(err));
    return false;
  }
  if (in.keep) keep(in.hello.head.from, in.hello.head.purpose, std::move(in.hello.fd), true);
  return false;
}

void Connector::accept_new() {
  for (;;) {
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE))
      TANDEM_THROW(ErrorCode::Io,
                   "rank {} cannot accept a peer's connection: {}. A rank holds 2 sockets per "
                   "peer it exchanges messages with (all of them in an all-to-all): raise the "
                   "open-file limit (ulimit -n)",
                   rank_, errno_text(errno));
    if (fd < 0) return;
    Incoming in;
    in.hello.fd = net::Fd(fd);
    in.where = net::format_address(reinterpret_cast<sockaddr*>(&from), len);
    if (incoming_.size() >= kMaxPendingIncoming) incoming_.erase(incoming_.begin());
    // A HELLO usually arrives with the connection: try it now.
    if (step(in)) incoming_.push_back(std::move(in));
  }
}

void Connector::add_poll_fds(std::vector<pollfd>& out) const {
  if (listener_) out.push_back({listener_.get(), POLLIN, 0});
  for (const Outgoing& o : outgoing_) {
    if (o.state == Outgoing::State::waiting || o.state == Outgoing::State::done) continue;
    out.push_back({o.hello.fd.get(),
                   static_cast<short>(o.state == Outgoing::State::reading ? POLLIN : POLLOUT), 0});
  }
  for (const Incoming& in : incoming_)
    out.push_back({in.hello.fd.get(),
                   static_cast<short>(in.state == Incoming::State::reading ? POLLIN : POLLOUT), 0});
}

bool Connector::step() {
  start_due(Clock::now(), Clock::time_point::max());
  return pump(0);
}

bool Connector::pump(int timeout_ms) {
  const std::size_t ready_before = ready_.size();
  std::vector<pollfd> pfds;
  add_poll_fds(pfds);
  // The order of add_poll_fds(): the listener, the outgoing in flight, the incoming.
  std::vector<std::size_t> polled_out;
  for (std::size_t k = 0; k < outgoing_.size(); ++k) {
    const auto state = outgoing_[k].state;
    if (state != Outgoing::State::waiting && state != Outgoing::State::done)
      polled_out.push_back(k);
  }
  const int rc = ::poll(pfds.data(), pfds.size(), timeout_ms);
  if (rc < 0 && errno != EINTR)
    TANDEM_THROW(ErrorCode::Io, "poll failed while connecting ranks: {}", errno_text(errno));
  if (rc <= 0) return false;
  std::size_t i = listener_ ? 1 : 0;
  bool moved = false;
  for (std::size_t k : polled_out) {
    Outgoing& o = outgoing_[k];  // a step may cancel a later one (SUPERSEDED): done, skipped
    if (pfds[i++].revents != 0 && o.state != Outgoing::State::done) moved = step(o) || moved;
  }
  std::vector<Incoming> keep_in;
  for (Incoming& in : incoming_) {
    const bool ready = pfds[i++].revents != 0;
    if (!ready || step(in)) keep_in.push_back(std::move(in));
  }
  moved = moved || keep_in.size() != incoming_.size();
  incoming_ = std::move(keep_in);
  if (listener_ && pfds[0].revents != 0) {
    accept_new();
    moved = true;
  }
  std::erase_if(outgoing_, [](const Outgoing& o) { return o.state == Outgoing::State::done; });
  return moved || ready_.size() != ready_before;
}

std::vector<PeerSockets> Connector::connect(std::span<const int> peers, Deadline deadline,
                                            const std::function<void()>& check_peers) {
  const auto begin = Clock::now();
  for (int p : peers)
    if (p > rank_) dial(p);
  auto whole = [&] {
    return std::all_of(peers.begin(), peers.end(),
                       [&](int p) { return at(p).phase == Phase::connected; });
  };
  // A lower peer's connection that has not begun within kLivenessPoll is dialed from here too:
  // a peer that died is refused at once, a slow one keeps its own (the lower rank's) connection.
  bool dialed_lower = false;
  const auto dial_lower_at = begin + kLivenessPoll;
  std::uint64_t failures_checked = failed_dials_;
  for (;;) {
    const auto now = Clock::now();
    if (!dialed_lower && now >= dial_lower_at) {
      dialed_lower = true;
      for (int p : peers)
        if (p < rank_) dial(p);
    }
    Clock::time_point wake = start_due(now, deadline);
    if (whole() || now >= deadline) break;
    if (!dialed_lower) wake = std::min(wake, dial_lower_at);
    if (check_peers && failed_dials_ != failures_checked) {
      failures_checked = failed_dials_;
      check_peers();  // a refused or reset dial: most likely the peer died
    }
    pump(net::poll_timeout_ms(wake));
  }
  if (!whole()) throw_missing(peers, begin);
  std::vector<PeerSockets> out;
  out.reserve(peers.size());
  for (int p : peers) {
    out.push_back(std::move(at(p).sockets));
    std::erase(ready_, p);
  }
  return out;
}

void Connector::throw_missing(std::span<const int> peers, Clock::time_point start) const {
  std::vector<std::string> missing;
  for (int p : peers)
    if (at(p).phase != Phase::connected) missing.push_back(status(p));
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  TANDEM_THROW(ErrorCode::Timeout,
               "rank {} could not connect to its peers within {:.1f} s ({} of {} missing): {}. "
               "Check that every rank was started with the same TANDEM_STORE_TOKEN, that the "
               "ranks can reach each other (firewall, TANDEM_SOCKET_IFNAME), and that none of "
               "them failed during startup",
               rank_, waited, missing.size(), peers.size(), fmt::join(missing, "; "));
}

}  // namespace tandem::transport::tcp
