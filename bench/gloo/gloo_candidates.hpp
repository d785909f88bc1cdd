#pragma once
// The Gloo algorithms gloo_bench chooses from, wrapped so that each one is prepared once on
// fixed buffers and then run many times.

#include <climits>

#include <cstdint>
#include <cstring>
#include <functional>
#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/broadcast.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/context.h>
#include <gloo/math.h>
#include <memory>
#include <string>
#include <vector>

namespace gloo_bench {

using Ctx = std::shared_ptr<gloo::Context>;

enum class Coll { allreduce, broadcast, allgather };

inline constexpr std::uint32_t kBenchTag = 1;

// What one measurement runs on: `in` and `out` as tandem-perf lays them out.
struct Views {
  float* in = nullptr;
  float* out = nullptr;
  std::size_t per = 0;        // elements per rank (allgather) or in total
  std::size_t out_count = 0;  // elements of `out`
  bool in_place = false;
};

// A candidate ready to run on fixed buffers; `keep` owns whatever Gloo state it needs.
struct Prepared {
  std::shared_ptr<void> keep;
  std::function<void()> run;
};

struct Candidate {
  std::string name;
  std::function<Prepared(const Ctx&, const Views&, int root)> prepare;
};

inline void sum_f32(void* c, const void* a, const void* b, std::size_t n) {
  gloo::sum<float>(c, a, b, n);
}

inline Prepared new_allreduce(const Ctx& ctx, const Views& v,
                              gloo::AllreduceOptions::Algorithm algo) {
  auto opts = std::make_shared<gloo::AllreduceOptions>(ctx);
  opts->setAlgorithm(algo);
  if (!v.in_place) opts->setInput(v.in, v.per);
  opts->setOutput(v.out, v.per);
  opts->setReduceFunction(&sum_f32);
  opts->setTag(kBenchTag);
  gloo::AllreduceOptions* p = opts.get();
  return {opts, [p] { gloo::allreduce(*p); }};
}

// The Algorithm classes reduce in place on `out`; out-of-place copies `in` there first, as a
// caller of these classes has to.
template <typename A>
Prepared legacy_allreduce(const Ctx& ctx, const Views& v) {
  auto algo = std::make_shared<A>(ctx, std::vector<float*>{v.out}, static_cast<int>(v.per));
  A* p = algo.get();
  if (v.in_place) return {algo, [p] { p->run(); }};
  float* in = v.in;
  float* out = v.out;
  const std::size_t bytes = v.per * sizeof(float);
  return {algo, [p, in, out, bytes] {
            std::memcpy(out, in, bytes);
            p->run();
          }};
}

inline std::vector<Candidate> candidates(Coll c, std::size_t max_count, int world) {
  std::vector<Candidate> list;
  const bool legacy_ok = max_count <= static_cast<std::size_t>(INT_MAX);  // they count in int
  // BCube groups ranks by the context's base (2); offered where the world is a power of it.
  const bool bcube_ok = (world & (world - 1)) == 0;
  switch (c) {
    case Coll::allreduce:
      list.push_back({"ring", [](const Ctx& ctx, const Views& v, int) {
                        return new_allreduce(ctx, v, gloo::AllreduceOptions::Algorithm::RING);
                      }});
      if (bcube_ok)
        list.push_back({"bcube", [](const Ctx& ctx, const Views& v, int) {
                          return new_allreduce(ctx, v, gloo::AllreduceOptions::Algorithm::BCUBE);
                        }});
      if (!legacy_ok) break;
      list.push_back({"legacy_ring", [](const Ctx& ctx, const Views& v, int) {
                        return legacy_allreduce<gloo::AllreduceRing<float>>(ctx, v);
                      }});
      list.push_back({"legacy_ring_chunked", [](const Ctx& ctx, const Views& v, int) {
                        return legacy_allreduce<gloo::AllreduceRingChunked<float>>(ctx, v);
                      }});
      list.push_back({"legacy_halving_doubling", [](const Ctx& ctx, const Views& v, int) {
                        return legacy_allreduce<gloo::AllreduceHalvingDoubling<float>>(ctx, v);
                      }});
      if (bcube_ok)
        list.push_back({"legacy_bcube", [](const Ctx& ctx, const Views& v, int) {
                          return legacy_allreduce<gloo::AllreduceBcube<float>>(ctx, v);
                        }});
      break;
    case Coll::broadcast:
      list.push_back({"binomial", [](const Ctx& ctx, const Views& v, int root) {
                        auto opts = std::make_shared<gloo::BroadcastOptions>(ctx);
                        opts->setRoot(root);
                        if (!v.in_place && ctx->rank == root) opts->setInput(v.in, v.per);
                        opts->setOutput(v.out, v.per);
                        opts->setTag(kBenchTag);
                        gloo::BroadcastOptions* p = opts.get();
                        return Prepared{opts, [p] { gloo::broadcast(*p); }};
                      }});
      if (!legacy_ok) break;
      list.push_back({"legacy_one_to_all", [](const Ctx& ctx, const Views& v, int root) {
                        auto algo = std::make_shared<gloo::BroadcastOneToAll<float>>(
                            ctx, std::vector<float*>{v.out}, v.per, root);
                        auto* p = algo.get();
                        if (v.in_place || ctx->rank != root)
                          return Prepared{algo, [p] { p->run(); }};
                        float* in = v.in;
                        float* out = v.out;
                        const std::size_t bytes = v.per * sizeof(float);
                        return Prepared{algo, [p, in, out, bytes] {
                                          std::memcpy(out, in, bytes);
                                          p->run();
                                        }};
                      }});
      break;
    case Coll::allgather:
      list.push_back({"ring", [](const Ctx& ctx, const Views& v, int) {
                        auto opts = std::make_shared<gloo::AllgatherOptions>(ctx);
                        if (!v.in_place) opts->setInput(v.in, v.per);
                        opts->setOutput(v.out, v.out_count);
                        opts->setTag(kBenchTag);
                        gloo::AllgatherOptions* p = opts.get();
                        return Prepared{opts, [p] { gloo::allgather(*p); }};
                      }});
      if (!legacy_ok) break;
      list.push_back({"legacy_ring", [](const Ctx& ctx, const Views& v, int) {
                        // In place the input already is this rank's block of the output (the
                        // class then copies the block onto itself).
                        auto algo = std::make_shared<gloo::AllgatherRing<float>>(
                            ctx, std::vector<const float*>{v.in}, v.out, static_cast<int>(v.per));
                        auto* p = algo.get();
                        return Prepared{algo, [p] { p->run(); }};
                      }});
      break;
  }
  return list;
}

}  // namespace gloo_bench
