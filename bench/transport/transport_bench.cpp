// Transport figures between two ranks of this host, forked by the tests' multi-process harness:
//   build/bin/tandem-transport-bench [shm|tcp]...   (both when none is named)
// Prints latency (ping-pong round trip, one-way = half of it, the two-way 8-byte
// exchange an allreduce does, and a one-way stream of 8-byte messages) and bandwidth (64 MiB one
// way and both ways, and a 2-rank ring allreduce of 128 MiB built from one reduce-scatter and one
// allgather step), for shm and tcp, spinning (TANDEM_SPIN_US=50) and blocking at once
// (TANDEM_SPIN_US=0). The "(cpu)" lines divide by the busier rank's CPU time instead of wall time:
// on a shared machine they show what a transfer costs regardless of who else runs.
//
// Do not raise the priority of the ranks (nice -20) to shield them from other load: loopback
// tcp is processed in softirq context, often by ksoftirqd, and starving it stalls every
// stream in 4 ms timer ticks.

#include "unit/transport/mesh_test_util.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <sys/resource.h>
#include <thread>

namespace tandem::transport::test {
namespace {

using testing::RankContext;
using namespace std::chrono_literals;

double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// CPU seconds (user + system) this process has used.
double cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

void sync(Mesh& mesh, int peer) {
  std::uint8_t a = 0, b = 0;
  Request s = Request::make_send(peer, 0xFFFF, &a, 1);
  Request r = Request::make_recv(peer, 0xFFFF, &b, 1);
  mesh.post(s);
  mesh.post(r);
  Request* both[] = {&s, &r};
  mesh.wait(both, deadline_in(60s));
}

void bench(const RankContext& ctx, const LinkParam& link, std::chrono::microseconds spin) {
  // One core per rank when there are enough: figures then do not depend on where the
  // scheduler happens to put two spinning ranks.
  if (std::thread::hardware_concurrency() >= 2) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<unsigned>(ctx.rank), &set);
    ::sched_setaffinity(0, sizeof set, &set);
  }
  MeshOptions o = options_for(link);
  o.spin_time = spin;
  auto m = connect(ctx, o);
  Mesh& mesh = *m.mesh;
  const int peer = 1 - ctx.rank;
  const auto dl = [] { return deadline_in(60s); };
  auto report = [&](const char* what, double value, const char* unit) {
    if (ctx.rank == 0)
      std::printf("%-5s spin=%3lldus  %-34s %10.3f %s\n", link.name,
                  static_cast<long long>(spin.count()), what, value, unit);
  };
  // Bandwidth with the busier rank's CPU time instead of wall time: what the transfer costs
  // when the machine is shared (meaningful when waiting blocks, spin=0).
  double cpu_start = 0;
  auto cpu_mark = [&] { cpu_start = cpu_s(); };
  auto cpu_report = [&](const char* what, double bytes) {
    double used[2] = {cpu_s() - cpu_start, 0};
    Request s = Request::make_send(peer, 0xFFFE, &used[0], 8);
    Request r = Request::make_recv(peer, 0xFFFE, &used[1], 8);
    mesh.post(s);
    mesh.post(r);
    Request* both[] = {&s, &r};
    mesh.wait(both, deadline_in(60s));
    report(what, bytes / std::max(used[0], used[1]) / 1e9, "GB/s per busiest-rank CPU second");
  };

  // ---- latency ----
  const int iters = spin.count() > 0 ? 20000 : 5000;
  float x[2] = {1, 2}, y[2] = {0, 0};
  for (int warm = 0; warm < 2; ++warm) {
    sync(mesh, peer);
    const double t0 = now_s();
    for (int i = 0; i < iters; ++i) {
      Request s = Request::make_send(peer, 1, x, 8);
      Request r = Request::make_recv(peer, 1, y, 8);
      if (ctx.rank == 0) {
        mesh.post(s);
        mesh.post(r);
        mesh.wait(s, dl());
        mesh.wait(r, dl());
      } else {
        mesh.post(r);
        mesh.wait(r, dl());
        mesh.post(s);
        mesh.wait(s, dl());
      }
    }
    const double rtt = (now_s() - t0) / iters * 1e6;
    if (warm == 1) {
      report("8 B ping-pong round trip", rtt, "us");
      report("8 B one-way (half round trip)", rtt / 2, "us");
    }
  }
  for (int warm = 0; warm < 2; ++warm) {
    sync(mesh, peer);
    const double t0 = now_s();
    for (int i = 0; i < iters; ++i) {
      Request s = Request::make_send(peer, 2, x, 8);
      Request r = Request::make_recv_reduce(peer, 2, y, x, 2, DataType::f32, ReduceOp::sum);
      mesh.post(s);
      mesh.post(r);
      Request* both[] = {&s, &r};
      mesh.wait(both, dl());
    }
    if (warm == 1) report("8 B exchange+reduce (allreduce)", (now_s() - t0) / iters * 1e6, "us");
  }
  // A stream of 8 B messages one way, one request each (what an in-place broadcast leaves to
  // the transport): against bench/latency/run.sh's broadcast loop, what the layers above add.
  for (int warm = 0; warm < 2; ++warm) {
    sync(mesh, peer);
    const double t0 = now_s();
    const int stream = 50 * iters;
    for (int i = 0; i < stream; ++i) {
      Request q =
          ctx.rank == 0 ? Request::make_send(peer, 7, x, 8) : Request::make_recv(peer, 7, y, 8);
      mesh.post(q);
      mesh.wait(q, dl());
    }
    sync(mesh, peer);
    if (warm == 1) report("8 B stream one way, per message", (now_s() - t0) / stream * 1e6, "us");
  }

  // ---- bandwidth ----
  constexpr std::size_t kBig = 64u << 20;
  std::vector<std::uint8_t> out(kBig, 1), in(kBig, 0);
  const int reps = 5;
  for (int warm = 0; warm < 2; ++warm) {
    sync(mesh, peer);
    cpu_mark();
    const double t0 = now_s();
    for (int i = 0; i < reps; ++i) {
      Request req = ctx.rank == 0 ? Request::make_send(peer, 3, out.data(), kBig)
                                  : Request::make_recv(peer, 3, in.data(), kBig);
      mesh.post(req);
      mesh.wait(req, dl());
    }
    sync(mesh, peer);
    if (warm == 1) {
      report("64 MiB one way", reps * kBig / (now_s() - t0) / 1e9, "GB/s");
      cpu_report("64 MiB one way (cpu)", reps * kBig);
    }
  }
  for (int warm = 0; warm < 2; ++warm) {
    sync(mesh, peer);
    cpu_mark();
    const double t0 = now_s();
    for (int i = 0; i < reps; ++i) {
      Request s = Request::make_send(peer, 4, out.data(), kBig);
      Request r = Request::make_recv(peer, 4, in.data(), kBig);
      mesh.post(s);
      mesh.post(r);
      Request* both[] = {&s, &r};
      mesh.wait(both, dl());
    }
    if (warm == 1) {
      report("64 MiB both ways (per direction)", reps * kBig / (now_s() - t0) / 1e9, "GB/s");
      cpu_report("64 MiB both ways (cpu, per dir.)", reps * kBig);
    }
  }
  // 2-rank ring allreduce of 128 MiB of f32: reduce-scatter step, then allgather step.
  std::vector<float> data(2 * kBig / sizeof(float), 1.0f);
  const std::size_t half = data.size() / 2;
  float* mine = data.data() + ctx.rank * half;
  float* theirs = data.data() + peer * half;
  for (int warm = 0; warm < 3; ++warm) {
    sync(mesh, peer);
    cpu_mark();
    const double t0 = now_s();
    Request s1 = Request::make_send(peer, 5, theirs, half * 4);
    Request r1 = Request::make_recv_reduce(peer, 5, mine, mine, half, DataType::f32, ReduceOp::sum);
    mesh.post(s1);
    mesh.post(r1);
    Request* rs1[] = {&s1, &r1};
    mesh.wait(rs1, dl());
    Request s2 = Request::make_send(peer, 6, mine, half * 4);
    Request r2 = Request::make_recv(peer, 6, theirs, half * 4);
    mesh.post(s2);
    mesh.post(r2);
    Request* rs2[] = {&s2, &r2};
    mesh.wait(rs2, dl());
    if (warm == 2) {
      report("128 MiB ring allreduce busbw", 2 * kBig / (now_s() - t0) / 1e9, "GB/s");
      cpu_report("128 MiB ring allreduce (cpu)", 2 * kBig);
    }
  }
}

// Both spin settings for `link`; false when a rank failed (its exit printed).
bool bench_link(const LinkParam& link) {
  bool ok = true;
  for (auto spin : {50us, 0us}) {
    const auto exits = testing::run_ranks(
        2, [&](const RankContext& ctx) { bench(ctx, link, spin); },
        run_options(unique_run_id("bench"), 600s));
    for (const auto& e : exits) {
      if (e.ok()) continue;
      std::fprintf(stderr, "%s\n", testing::describe(e).c_str());
      ok = false;
    }
  }
  return ok;
}

}  // namespace
}  // namespace tandem::transport::test

int main(int argc, char** argv) {
  using namespace tandem::transport::test;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], kShm.name) != 0 && std::strcmp(argv[i], kTcp.name) != 0) {
      std::fprintf(stderr, "usage: %s [shm|tcp]...: %s is not a link\n", argv[0], argv[i]);
      return 2;
    }
  }
  bool ok = true;
  for (const LinkParam* link : {&kShm, &kTcp}) {
    bool named = argc < 2;
    for (int i = 1; i < argc; ++i) named = named || std::strcmp(argv[i], link->name) == 0;
    if (named) ok = bench_link(*link) && ok;
  }
  return ok ? 0 : 1;
}
