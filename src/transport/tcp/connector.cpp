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
                     const std::vector<Target>& targets, std::size_t& rejected)
    : rank_(rank),
      size_(size),
      token_(token),
      listener_(listener),
      targets_(targets),
      rejected_(rejected),
      result_(static_cast<std::size_t>(size)),
      addresses_(static_cast<std::size_t>(size)) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const Target& t = targets_[static_cast<std::size_t>(p)];
    sockets(p).data.resize(static_cast<std::size_t>(t.streams));
    if (p < rank_) {
      incoming_expected_ += 1 + static_cast<std::size_t>(t.streams);
      continue;
    }
    addresses_[static_cast<std::size_t>(p)] = net::resolve(t.host, t.port);
    for (int purpose = 0; purpose <= t.streams; ++purpose) {
      Outgoing o;
      o.peer = p;
      o.purpose = purpose;
      o.where = net::format_host_port(t.host, t.port);
      o.backoff = kFirstBackoff;
      outgoing_.push_back(std::move(o));
    }
  }
}

net::Fd& Connector::slot(PeerSockets& ps, int purpose) {
  return purpose == kControlPurpose ? ps.control : ps.data[static_cast<std::size_t>(purpose - 1)];
}

bool Connector::finished() const noexcept {
  return accepted_.size() == incoming_expected_ &&
         std::all_of(outgoing_.begin(), outgoing_.end(),
                     [](const Outgoing& o) { return o.state == Outgoing::State::done; });
}

std::vector<PeerSockets> Connector::run(Deadline deadline,
                                        const std::function<void()>& check_peers) {
  const auto begin = Clock::now();
  auto next_check = begin + kLivenessPoll;
  for (;;) {
    const auto now = Clock::now();
    Clock::time_point wake = start_due(now, deadline);
    if (finished() || now >= deadline) break;
    if (check_peers) {
      if (now >= next_check) {
        check_peers();  // a rank that died will never connect
        next_check = now + kLivenessPoll;
      }
      wake = std::min(wake, next_check);
    }
    poll_until(wake);
  }
  if (!finished()) throw_missing(begin);
  for (auto& [key, fd] : accepted_) slot(sockets(key.first), key.second) = std::move(fd);
  return std::move(result_);
}

Clock::time_point Connector::start_due(Clock::time_point now, Clock::time_point wake) {
  for (Outgoing& o : outgoing_) {
    if (o.state != Outgoing::State::waiting) continue;
    if (now >= o.retry_at) start(o);
    if (o.state == Outgoing::State::waiting) wake = std::min(wake, o.retry_at);
  }
  return wake;
}

void Connector::start(Outgoing& o) {
  const auto& list = addresses_[static_cast<std::size_t>(o.peer)];
  const net::SockAddr& a = list[o.next_address++ % list.size()];
  net::Fd fd(::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) TANDEM_THROW(ErrorCode::Io, "cannot create a socket: {}", errno_text(errno));
  tune_socket(fd.get(), o.purpose != kControlPurpose,
              targets_[static_cast<std::size_t>(o.peer)].same_host);
  o.hello = Hello{};
  o.hello.out = encode_hello(rank_, o.peer, size_, o.purpose, token_);
  o.hello.fd = std::move(fd);
  if (::connect(o.hello.fd.get(), a.get(), a.len) == 0)
    o.state = Outgoing::State::writing;
  else if (errno == EINPROGRESS || errno == EINTR)
    o.state = Outgoing::State::connecting;
  else
    fail(o, failure_text(errno));
}

void Connector::fail(Outgoing& o, std::string why) {
  o.hello = Hello{};
  o.state = Outgoing::State::waiting;
  o.last_error = std::move(why);
  o.retry_at = Clock::now() + o.backoff;
  o.backoff = std::min(o.backoff * 2, kMaxBackoff);
}

void Connector::step(Outgoing& o) {
  int err = 0;
  if (o.state == Outgoing::State::connecting) {
    socklen_t len = sizeof err;
    ::getsockopt(o.hello.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail(o, failure_text(err));
    o.state = Outgoing::State::writing;
  }
  if (o.state == Outgoing::State::writing) {
    if (!o.hello.write(&err)) {
      if (err != 0) fail(o, failure_text(err));
      return;
    }
    o.state = Outgoing::State::reading;
  }
  if (!o.hello.read(&err)) {
    if (err == -1)
      fail(o,
           "the peer closed the connection during the handshake (it rejected this rank's HELLO: "
           "a different TANDEM_STORE_TOKEN?)");
    else if (err != 0)
      fail(o, failure_text(err));
    return;
  }
  const HelloHead& head = o.hello.head;
  std::string why = check_hello(head, o.hello.token(), rank_, size_, token_);
  if (why.empty() && (head.from != o.peer || head.purpose != o.purpose))
    why = fmt::format("answered as rank {} {} instead of rank {} {}", head.from,
                      purpose_name(head.purpose), o.peer, purpose_name(o.purpose));
  if (!why.empty()) {
    if (o.last_error.rfind("invalid HELLO", 0) != 0)
      TANDEM_WARN(init, "rank {} at {} answered with an invalid HELLO: {}", o.peer, o.where, why);
    return fail(o, "invalid HELLO answer: " + why);
  }
  slot(sockets(o.peer), o.purpose) = std::move(o.hello.fd);
  o.hello = Hello{};
  o.state = Outgoing::State::done;
}

std::string Connector::refusal(const Incoming& in) const {
  const HelloHead& head = in.hello.head;
  std::string why = check_hello(head, in.hello.token(), rank_, size_, token_);
  if (!why.empty()) return why;
  const int from = head.from;
  if (from > rank_)
    return fmt::format("rank {} should be accepting from this rank, not connecting", from);
  const int streams = targets_[static_cast<std::size_t>(from)].streams;
  if (head.purpose > streams)
    return fmt::format("{} from rank {}, which has only {} data streams to this rank",
                       purpose_name(head.purpose), from, streams);
  if (accepted_.count({from, head.purpose}) != 0)
    return fmt::format("a second {} from rank {}", purpose_name(head.purpose), from);
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
    if (const std::string why = refusal(in); !why.empty()) {
      // A rejected peer retries with backoff: say it once, then only at DETAIL level.
      if (rejected_++ == 0)
        TANDEM_WARN(init,
                    "rejected connection from {}: {} (further rejections are logged at "
                    "TANDEM_DEBUG=DETAIL)",
                    in.where, why);
      else
        TANDEM_DETAIL(init, "rejected connection from {}: {}", in.where, why);
      return false;
    }
    in.hello.out = encode_hello(rank_, in.hello.head.from, size_, in.hello.head.purpose, token_);
    in.state = Incoming::State::writing;
  }
  if (!in.hello.write(&err)) {
    if (err == 0) return true;
    TANDEM_DETAIL(init, "connection from {} failed during the handshake: {}", in.where,
                  failure_text(err));
    return false;
  }
  const int from = in.hello.head.from;
  const int purpose = in.hello.head.purpose;
  tune_socket(in.hello.fd.get(), purpose != kControlPurpose,
              targets_[static_cast<std::size_t>(from)].same_host);
  accepted_.emplace(std::pair{from, purpose}, std::move(in.hello.fd));
  return false;
}

void Connector::accept_new() {
  for (;;) {
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    Incoming in;
    in.hello.fd = net::Fd(fd);
    in.where = net::format_address(reinterpret_cast<sockaddr*>(&from), len);
    if (incoming_.size() >= kMaxPendingIncoming) incoming_.erase(incoming_.begin());
    // A HELLO usually arrives with the connection: try it now.
    if (step(in)) incoming_.push_back(std::move(in));
  }
}

void Connector::poll_until(Clock::time_point wake) {
  std::vector<pollfd> pfds;
  std::vector<std::size_t> polled_out;
  pfds.push_back({listener_.get(), POLLIN, 0});
  for (std::size_t k = 0; k < outgoing_.size(); ++k) {
    const Outgoing& o = outgoing_[k];
    if (o.state == Outgoing::State::waiting || o.state == Outgoing::State::done) continue;
    pfds.push_back({o.hello.fd.get(),
                    static_cast<short>(o.state == Outgoing::State::reading ? POLLIN : POLLOUT), 0});
    polled_out.push_back(k);
  }
  for (const Incoming& in : incoming_)
    pfds.push_back({in.hello.fd.get(),
                    static_cast<short>(in.state == Incoming::State::reading ? POLLIN : POLLOUT),
                    0});
  const int rc = ::poll(pfds.data(), pfds.size(), net::poll_timeout_ms(wake));
  if (rc < 0 && errno != EINTR)
    TANDEM_THROW(ErrorCode::Io, "poll failed while connecting ranks: {}", errno_text(errno));
  if (rc <= 0) return;

  std::size_t i = 1;
  for (std::size_t k : polled_out)
    if (pfds[i++].revents != 0) step(outgoing_[k]);
  std::vector<Incoming> keep;
  for (Incoming& in : incoming_) {
    const bool ready = pfds[i++].revents != 0;
    if (!ready || step(in)) keep.push_back(std::move(in));
  }
  incoming_ = std::move(keep);
  if (pfds[0].revents != 0) accept_new();
}

void Connector::throw_missing(Clock::time_point start) const {
  std::vector<std::string> missing;
  for (const Outgoing& o : outgoing_)
    if (o.state != Outgoing::State::done)
      missing.push_back(fmt::format("rank {} {} at {}: {}", o.peer, purpose_name(o.purpose),
                                    o.where, o.last_error));
  for (int p = 0; p < rank_; ++p) {
    for (int purpose = 0; purpose <= targets_[static_cast<std::size_t>(p)].streams; ++purpose)
      if (accepted_.count({p, purpose}) == 0)
        missing.push_back(fmt::format("no {} connection from rank {}", purpose_name(purpose), p));
  }
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  TANDEM_THROW(ErrorCode::Timeout,
               "rank {} could not connect to every peer within {:.1f} s ({} of {} connections "
               "missing): {}. Check that every rank was started with the same "
               "TANDEM_STORE_TOKEN, that the ranks can reach each other (firewall, "
               "TANDEM_SOCKET_IFNAME), and that none of them failed during startup",
               rank_, waited, missing.size(), outgoing_.size() + incoming_expected_,
               fmt::join(missing, "; "));
}

}  // namespace tandem::transport::tcp
