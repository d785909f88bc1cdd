// The mesh's wait loop, driven deterministically: scripted endpoints (no real transport)
// deliver a peer's last message at the worst moment, exactly when the mesh reads what the
// peer's control connection carried (BYE or ABORT). In a real run that happens when a peer
// publishes its last message and closes, or aborts, between the waiter's progress pass and
// its next look at the control connections (a waiter preempted there, on a loaded host).
// Also: the request queues' checks of debug builds.

#include "transport/control.hpp"
#include "transport/endpoint.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace tandem::transport::test {
namespace {

using namespace std::chrono_literals;

// A peer whose messages become deliverable only once the mesh has read everything the peer
// wrote on its control connection: the data "arrives" inside the pass that notices the BYE
// or ABORT. It delivers at most `budget` requests (what the peer sent before it left).
class ScriptedEndpoint final : public Endpoint {
 public:
  ScriptedEndpoint(int peer, PeerFailureHandler& failures, int control_fd, int budget)
      : Endpoint(peer, failures), control_fd_(control_fd), budget_(budget) {}

  Link link() const noexcept override { return Link::tcp; }

  bool progress() override {
    int unread = 0;
    if (::ioctl(control_fd_, FIONREAD, &unread) != 0 || unread > 0) return false;
    bool moved = false;
    for (RequestQueue* q : {&sends_, &recvs_}) {
      while (budget_ > 0 && q->front() != nullptr) {
        Request* r = q->pop();
        r->done = r->bytes;
        r->complete = true;
        --budget_;
        moved = true;
      }
    }
    return moved;
  }

 private:
  int control_fd_;  // the mesh's end of the control connection (owned by the mesh)
  int budget_;
};

// Rank 0 of two; `peer` is rank 1's end of the control connection.
struct ScriptedPair {
  std::unique_ptr<Mesh> mesh;
  Control peer;
};

ScriptedPair make_pair(int budget) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw std::system_error(errno, std::generic_category(), "socketpair");
  std::vector<PeerInfo> peers{{0, "here", "here-id", 100}, {1, "here", "here-id", 101}};
  std::vector<net::Fd> controls;
  controls.emplace_back();
  controls.emplace_back(sv[0]);
  MeshOptions o;
  // No spinning: the loop blocks after one fruitless pass, so the pass that reads the
  // control connection is followed by a sleep decision, not by another progress pass.
  o.spin_time = 0ns;
  const int mesh_end = sv[0];
  ScriptedPair p;
  p.mesh = make_mesh(
      0, peers, std::move(controls),
      [&](int peer, PeerFailureHandler& f) {
        return std::make_unique<ScriptedEndpoint>(peer, f, mesh_end, budget);
      },
      o);
  p.peer = Control(net::Fd(sv[1]));
  return p;
}

template <class F>
Error expect_error(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a tandem::Error";
  return Error(ErrorCode::Internal, "no error");
}

// The peer's last message completes the wait in the same pass that finds the peer gone:
// the wait finishes. (It used to go on to sleep, find no pending request and report
// "wait() on a request that was never posted".)
TEST(WaitLoop, LastMessageOfAPeerThatLeftCompletesTheWait) {
  auto pair = make_pair(1);
  char byte = 7;
  pair.peer.send_bye();
  Request s = Request::make_send(1, 5, &byte, 1);
  pair.mesh->post(s);
  EXPECT_NO_THROW(pair.mesh->wait(s, deadline_in(10s)));
  EXPECT_TRUE(s.complete);
  EXPECT_EQ(pair.mesh->error(), nullptr);

  // Nothing more comes from it: the next transfer fails, naming the peer that left.
  Request more = Request::make_send(1, 6, &byte, 1);
  pair.mesh->post(more);
  const Error e = expect_error([&] { pair.mesh->wait(more, deadline_in(10s)); });
  EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
  EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("left normally"), std::string::npos) << e.what();
}

// The same with a peer that aborted after sending: what it sent is still delivered.
TEST(WaitLoop, LastMessageOfAPeerThatAbortedCompletesTheWait) {
  auto pair = make_pair(1);
  char byte = 0;
  pair.peer.send_abort(ErrorCode::Timeout, "rank 1 gave up");
  Request r = Request::make_recv(1, 5, &byte, 1);
  pair.mesh->post(r);
  EXPECT_NO_THROW(pair.mesh->wait(r, deadline_in(10s)));
  EXPECT_TRUE(r.complete);

  Request more = Request::make_recv(1, 6, &byte, 1);
  pair.mesh->post(more);
  const Error e = expect_error([&] { pair.mesh->wait(more, deadline_in(10s)); });
  EXPECT_EQ(e.code(), ErrorCode::Aborted) << e.what();
  EXPECT_NE(e.message().find("rank 1 gave up"), std::string::npos) << e.what();
}

// Waiting on a request that was never posted is still reported as such.
TEST(WaitLoop, RequestNeverPostedIsReported) {
  auto pair = make_pair(1);
  char byte = 0;
  Request r = Request::make_recv(1, 5, &byte, 1);
  const Error e = expect_error([&] { pair.mesh->wait(r, deadline_in(10s)); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  EXPECT_NE(e.message().find("never posted"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("recv of 1 bytes from rank 1"), std::string::npos) << e.what();
}

TEST(WaitLoop, RepostingAPendingRequestIsCaughtInDebugBuilds) {
  if (!kCheckQueues) GTEST_SKIP() << "checked in debug builds only";
  auto pair = make_pair(0);  // delivers nothing: both stay pending
  char bytes[2] = {};
  Request a = Request::make_recv(1, 5, &bytes[0], 1);
  Request b = Request::make_recv(1, 5, &bytes[1], 1);
  pair.mesh->post(a);
  pair.mesh->post(b);
  const Error e = expect_error([&] { pair.mesh->post(a); });
  EXPECT_EQ(e.code(), ErrorCode::Internal) << e.what();
  EXPECT_NE(e.message().find("posted again while still pending with rank 1"), std::string::npos)
      << e.what();
  EXPECT_EQ(a.next, &b) << "the queue was left as it was";
}

TEST(RequestQueue, PoppedRequestsAreUnlinked) {
  RequestQueue q;
  Request a, b;
  q.push(a);
  q.push(b);
  EXPECT_TRUE(q.contains(a) && q.contains(b));
  EXPECT_EQ(q.pop(), &a);
  EXPECT_EQ(a.next, nullptr);
  EXPECT_FALSE(q.contains(a));
  EXPECT_EQ(q.pop(), &b);
  EXPECT_TRUE(q.empty());
  q.push(a);  // a completed request may be posted again
  EXPECT_EQ(q.front(), &a);
}

TEST(RequestQueue, BrokenLinksAreCaughtInDebugBuilds) {
  if (!kCheckQueues) GTEST_SKIP() << "checked in debug builds only";
  {
    RequestQueue q;
    Request a, b;
    q.push(a);
    q.push(b);
    a.next = nullptr;  // what overwriting (or reusing the memory of) a pending request does
    const Error e = expect_error([&] { q.pop(); });
    EXPECT_EQ(e.code(), ErrorCode::Internal) << e.what();
    EXPECT_NE(e.message().find("changed or destroyed"), std::string::npos) << e.what();
  }
  {
    RequestQueue q;
    Request a, stray;
    q.push(a);
    a.next = &stray;
    const Error e = expect_error([&] { q.push(stray); });
    EXPECT_EQ(e.code(), ErrorCode::Internal) << e.what();
  }
  {
    RequestQueue q;
    Request a;
    q.push(a);
    EXPECT_EQ(expect_error([&] { q.push(a); }).code(), ErrorCode::Internal);
  }
}

}  // namespace
}  // namespace tandem::transport::test
