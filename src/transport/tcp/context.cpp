#include "transport/tcp/context.hpp"

#include "transport/tcp/endpoint.hpp"
#include "transport/tcp/wire.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <poll.h>
#include <sys/socket.h>
#include <utility>

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

// One connection in the handshake: HELLO out, HELLO in (connector), or in then out
// (acceptor). Reads take exactly the HELLO's bytes: data may follow it immediately.
struct Handshake {
  net::Fd fd;
  enum class State { connecting, writing, reading } state = State::reading;
  std::string out;
  std::size_t out_done = 0;
  HelloHead head{};  // valid once read_hello() returned true
  std::array<std::byte, sizeof(HelloHead) + kMaxTokenBytes> in{};
  std::size_t in_done = 0;
  std::string where;

  std::string_view token() const noexcept { return parse_hello({in.data(), in_done}).token; }

  // True once the peer's HELLO is complete (or malformed enough to reject). Otherwise errno
  // in *err (0: try again later; -1: EOF).
  bool read_hello(int* err) {
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
        *err = (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : errno;
        return false;
      }
      in_done += static_cast<std::size_t>(n);
    }
  }
  // True once everything is written; errno in *err.
  bool write_out(int* err) {
    while (out_done < out.size()) {
      const ssize_t n = ::send(fd.get(), out.data() + out_done, out.size() - out_done,
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        *err = (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : errno;
        return false;
      }
      out_done += static_cast<std::size_t>(n);
    }
    return true;
  }
};

struct Outgoing {
  int peer = -1;
  int purpose = 0;
  bool active = false;
  bool done = false;
  Handshake hs;
  Clock::time_point retry_at{};
  milliseconds backoff = kFirstBackoff;
  std::string last_error = "not attempted yet";
  std::size_t next_addr = 0;
};

std::string failure_text(int err) {
  return err == -1 ? std::string("connection closed")
                   : fmt::format("{} ({})", transport::errno_text(err), err);
}

}  // namespace

Context::Context(int rank, int size, std::string address, std::string token)
    : rank_(rank), size_(size), address_(std::move(address)), token_(std::move(token)) {
  listener_ = net::listen_tcp(address_, 0, 4096);
  // Accepted sockets inherit the buffer sizes, and the window scale is fixed at the SYN.
  net::set_buffer_sizes(listener_.get(), kSocketBuffer, kSocketBuffer);
  net::set_nonblocking(listener_.get(), true);
  port_ = net::bound_port(listener_.get());
}

std::vector<PeerSockets> Context::connect_all(const std::vector<Target>& targets, Deadline deadline,
                                              const std::function<void()>& check_peers) {
  const auto start = Clock::now();
  std::vector<PeerSockets> result(static_cast<std::size_t>(size_));
  std::map<std::pair<int, int>, net::Fd> accepted;
  std::size_t incoming_expected = 0;
  std::vector<Outgoing> outgoing;
  std::vector<std::vector<net::SockAddr>> addrs(static_cast<std::size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const Target& t = targets[static_cast<std::size_t>(p)];
    result[static_cast<std::size_t>(p)].data.resize(static_cast<std::size_t>(t.streams));
    if (p < rank_) {
      incoming_expected += 1 + static_cast<std::size_t>(t.streams);
      continue;
    }
    addrs[static_cast<std::size_t>(p)] = net::resolve(t.host, t.port);
    for (int purpose = 0; purpose <= t.streams; ++purpose) {
      Outgoing o;
      o.peer = p;
      o.purpose = purpose;
      o.hs.where = net::format_host_port(t.host, t.port);
      outgoing.push_back(std::move(o));
    }
  }
  std::vector<Handshake> incoming;

  auto fail_attempt = [&](Outgoing& o, std::string why) {
    Handshake fresh;
    fresh.where = std::move(o.hs.where);
    o.hs = std::move(fresh);
    o.active = false;
    o.last_error = std::move(why);
    o.retry_at = Clock::now() + o.backoff;
    o.backoff = std::min(o.backoff * 2, kMaxBackoff);
  };
  auto start_attempt = [&](Outgoing& o) {
    const auto& list = addrs[static_cast<std::size_t>(o.peer)];
    const net::SockAddr& a = list[o.next_addr++ % list.size()];
    net::Fd fd(::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) TANDEM_THROW(ErrorCode::Io, "cannot create a socket: {}", errno_text(errno));
    tune_socket(fd.get(), o.purpose != kControlPurpose,
                targets[static_cast<std::size_t>(o.peer)].same_host);
    o.hs.out = encode_hello(rank_, o.peer, size_, o.purpose, token_);
    o.hs.fd = std::move(fd);
    o.active = true;
    if (::connect(o.hs.fd.get(), a.get(), a.len) == 0) {
      o.hs.state = Handshake::State::writing;
    } else if (errno == EINPROGRESS || errno == EINTR) {
      o.hs.state = Handshake::State::connecting;
    } else {
      fail_attempt(o, failure_text(errno));
    }
  };
  auto step_outgoing = [&](Outgoing& o) {
    int err = 0;
    if (o.hs.state == Handshake::State::connecting) {
      socklen_t len = sizeof err;
      ::getsockopt(o.hs.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return fail_attempt(o, failure_text(err));
      o.hs.state = Handshake::State::writing;
    }
    if (o.hs.state == Handshake::State::writing) {
      if (!o.hs.write_out(&err)) {
        if (err != 0) fail_attempt(o, failure_text(err));
        return;
      }
      o.hs.state = Handshake::State::reading;
    }
    if (!o.hs.read_hello(&err)) {
      if (err == -1)
        fail_attempt(o,
                     "the peer closed the connection during the handshake (it rejected this "
                     "rank's HELLO: a different TANDEM_STORE_TOKEN?)");
      else if (err != 0)
        fail_attempt(o, failure_text(err));
      return;
    }
    std::string why = check_hello(o.hs.head, o.hs.token(), rank_, size_, token_);
    if (why.empty() && (o.hs.head.from != o.peer || o.hs.head.purpose != o.purpose))
      why = fmt::format("answered as rank {} {} instead of rank {} {}", o.hs.head.from,
                        purpose_name(o.hs.head.purpose), o.peer, purpose_name(o.purpose));
    if (!why.empty()) {
      if (o.last_error.rfind("invalid HELLO", 0) != 0)
        TANDEM_WARN(init, "rank {} at {} answered with an invalid HELLO: {}", o.peer, o.hs.where,
                    why);
      return fail_attempt(o, "invalid HELLO answer: " + why);
    }
    auto& ps = result[static_cast<std::size_t>(o.peer)];
    (o.purpose == kControlPurpose ? ps.control : ps.data[static_cast<std::size_t>(o.purpose - 1)]) =
        std::move(o.hs.fd);
    o.active = false;
    o.done = true;
  };
  // Returns false when the connection is finished with (accepted or rejected).
  auto step_incoming = [&](Handshake& h) {
    int err = 0;
    if (h.state == Handshake::State::reading) {
      if (!h.read_hello(&err)) {
        if (err != 0) {
          TANDEM_DETAIL(init, "connection from {} closed during the handshake: {}", h.where,
                        failure_text(err));
          return false;
        }
        return true;
      }
      std::string why = check_hello(h.head, h.token(), rank_, size_, token_);
      const int from = h.head.from;
      if (why.empty() && from > rank_)
        why = fmt::format("rank {} should be accepting from this rank, not connecting", from);
      if (why.empty() && h.head.purpose > targets[static_cast<std::size_t>(from)].streams)
        why = fmt::format("{} from rank {}, which has only {} data streams to this rank",
                          purpose_name(h.head.purpose), from,
                          targets[static_cast<std::size_t>(from)].streams);
      if (why.empty() && accepted.count({from, h.head.purpose}) != 0)
        why = fmt::format("a second {} from rank {}", purpose_name(h.head.purpose), from);
      if (!why.empty()) {
        // A rejected peer retries with backoff: say it once, then only at DETAIL level.
        if (rejected_++ == 0)
          TANDEM_WARN(init,
                      "rejected connection from {}: {} (further rejections are logged at "
                      "TANDEM_DEBUG=DETAIL)",
                      h.where, why);
        else
          TANDEM_DETAIL(init, "rejected connection from {}: {}", h.where, why);
        return false;
      }
      h.out = encode_hello(rank_, from, size_, h.head.purpose, token_);
      h.state = Handshake::State::writing;
    }
    if (!h.write_out(&err)) {
      if (err != 0) {
        TANDEM_DETAIL(init, "connection from {} failed during the handshake: {}", h.where,
                      failure_text(err));
        return false;
      }
      return true;
    }
    tune_socket(h.fd.get(), h.head.purpose != kControlPurpose,
                targets[static_cast<std::size_t>(h.head.from)].same_host);
    accepted.emplace(std::pair{static_cast<int>(h.head.from), static_cast<int>(h.head.purpose)},
                     std::move(h.fd));
    return false;
  };

  std::vector<pollfd> pfds;
  std::vector<std::size_t> polled_out;
  auto next_check = start + kLivenessPoll;
  for (;;) {
    auto now = Clock::now();
    Clock::time_point wake = deadline;
    bool all_out = true;
    for (Outgoing& o : outgoing) {
      if (o.done) continue;
      all_out = false;
      if (!o.active && now >= o.retry_at) start_attempt(o);
      if (!o.active) wake = std::min(wake, o.retry_at);
    }
    if (all_out && accepted.size() == incoming_expected) break;
    if (now >= deadline) break;
    if (check_peers) {
      if (now >= next_check) {
        check_peers();  // a rank that died will never connect
        next_check = now + kLivenessPoll;
      }
      wake = std::min(wake, next_check);
    }

    pfds.clear();
    pfds.push_back({listener_.get(), POLLIN, 0});
    polled_out.clear();
    for (std::size_t k = 0; k < outgoing.size(); ++k) {
      const Outgoing& o = outgoing[k];
      if (!o.active) continue;
      const short ev = o.hs.state == Handshake::State::reading ? POLLIN : POLLOUT;
      pfds.push_back({o.hs.fd.get(), ev, 0});
      polled_out.push_back(k);
    }
    for (const Handshake& h : incoming)
      pfds.push_back({h.fd.get(),
                      static_cast<short>(h.state == Handshake::State::reading ? POLLIN : POLLOUT),
                      0});
    const int rc = ::poll(pfds.data(), pfds.size(), net::poll_timeout_ms(wake));
    if (rc < 0 && errno != EINTR)
      TANDEM_THROW(ErrorCode::Io, "poll failed while connecting ranks: {}", errno_text(errno));
    if (rc <= 0) continue;

    std::size_t i = 1;
    for (std::size_t k : polled_out)
      if (pfds[i++].revents != 0) step_outgoing(outgoing[k]);
    std::vector<Handshake> keep;
    for (Handshake& h : incoming) {
      const bool ready = pfds[i++].revents != 0;
      if (!ready || step_incoming(h)) keep.push_back(std::move(h));
    }
    incoming = std::move(keep);
    if (pfds[0].revents != 0) {
      for (;;) {
        sockaddr_storage from{};
        socklen_t len = sizeof from;
        const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&from), &len,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        Handshake h;
        h.fd = net::Fd(fd);
        h.where = net::format_address(reinterpret_cast<sockaddr*>(&from), len);
        if (incoming.size() >= kMaxPendingIncoming) incoming.erase(incoming.begin());
        // A HELLO usually arrives with the connection: try it now.
        if (step_incoming(h)) incoming.push_back(std::move(h));
      }
    }
  }

  std::vector<std::string> missing;
  for (const Outgoing& o : outgoing)
    if (!o.done)
      missing.push_back(fmt::format("rank {} {} at {}: {}", o.peer, purpose_name(o.purpose),
                                    o.hs.where, o.last_error));
  for (int p = 0; p < rank_; ++p) {
    for (int purpose = 0; purpose <= targets[static_cast<std::size_t>(p)].streams; ++purpose)
      if (accepted.count({p, purpose}) == 0)
        missing.push_back(fmt::format("no {} connection from rank {}", purpose_name(purpose), p));
  }
  if (!missing.empty()) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    TANDEM_THROW(ErrorCode::Timeout,
                 "rank {} could not connect to every peer within {:.1f} s ({} of {} connections "
                 "missing): {}. Check that every rank was started with the same "
                 "TANDEM_STORE_TOKEN, that the ranks can reach each other (firewall, "
                 "TANDEM_SOCKET_IFNAME), and that none of them failed during startup",
                 rank_, waited, missing.size(), outgoing.size() + incoming_expected,
                 fmt::join(missing, "; "));
  }
  for (auto& [key, fd] : accepted) {
    auto& ps = result[static_cast<std::size_t>(key.first)];
    (key.second == kControlPurpose ? ps.control
                                   : ps.data[static_cast<std::size_t>(key.second - 1)]) =
        std::move(fd);
  }
  listener_.reset();
  return result;
}

std::unique_ptr<transport::Endpoint> Context::make_endpoint(int peer, std::vector<net::Fd> data,
                                                            PeerFailureHandler& failures) const {
  return std::make_unique<Endpoint>(peer, failures, std::move(data));
}

}  // namespace tandem::transport::tcp
