#pragma once
// Helpers of the transport tests: the links under test, connecting a rank's mesh through the
// test's store, deterministic payloads, and listing a run's leftover shm segments.

#include "support/multiproc.hpp"
#include "transport/mesh.hpp"

#include <tandem/error.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

namespace tandem::transport::test {

/// One way of connecting ranks: shared memory, or tcp with `streams` data sockets per peer.
struct LinkParam {
  const char* name;
  bool shm_disable;
  int streams;
};

inline const LinkParam kShm{"shm", false, 1};
inline const LinkParam kTcp{"tcp", true, 1};
inline const LinkParam kTcpStriped{"tcp2", true, 3};

inline std::string link_name(const ::testing::TestParamInfo<LinkParam>& info) {
  return info.param.name;
}

inline MeshOptions options_for(const LinkParam& p) {
  MeshOptions o;
  o.shm_disable = p.shm_disable;
  o.sockets_per_peer = p.streams;
  o.token = "transport-test-token";
  o.connect_timeout = std::chrono::seconds(30);
  return o;
}

/// A rank's store client and mesh (the store outlives the mesh).
struct RankMesh {
  std::shared_ptr<store::Store> store;
  std::unique_ptr<Mesh> mesh;
};

inline RankMesh connect(const testing::RankContext& ctx, const MeshOptions& o) {
  RankMesh m;
  m.store = ctx.store();
  m.mesh = connect_mesh(*m.store, ctx.rank, ctx.size, o);
  return m;
}

/// Byte `i` of message `msg` from `from` to `to`: every byte of every message differs from
/// its neighbours, so a shifted, truncated or misrouted copy is caught.
inline std::uint8_t pattern(int from, int to, std::uint64_t msg, std::uint64_t i) {
  const std::uint64_t x = (i * 0x9E3779B97F4A7C15ull) ^ (msg * 0xC2B2AE3D27D4EB4Full) ^
                          (static_cast<std::uint64_t>(from) << 40) ^
                          (static_cast<std::uint64_t>(to) << 48);
  return static_cast<std::uint8_t>((x >> 29) ^ (x >> 7) ^ i);
}

inline std::vector<std::uint8_t> make_payload(int from, int to, std::uint64_t msg, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = pattern(from, to, msg, i);
  return v;
}

/// Index of the first byte that differs from the pattern, or -1.
inline long long first_bad(const std::vector<std::uint8_t>& v, int from, int to,
                           std::uint64_t msg) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != pattern(from, to, msg, i)) return static_cast<long long>(i);
  return -1;
}

/// Entries of /dev/shm whose name starts with "tandem-<run_id>-".
inline std::vector<std::string> shm_leftovers(const std::string& run_id) {
  std::vector<std::string> out;
  const std::string prefix = "tandem-" + run_id + "-";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

/// A run id unique to this test process and test.
inline std::string unique_run_id(const std::string& what) {
  static int counter = 0;
  return "tt" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + "-" + what;
}

inline testing::RunOptions run_options(const std::string& run_id,
                                       std::chrono::seconds timeout = std::chrono::seconds(120)) {
  testing::RunOptions o;
  o.timeout = timeout;
  o.env = {"TANDEM_RUN_ID=" + run_id};
  return o;
}

/// Runs `fn` and returns the Error it throws (fails the test when it throws nothing).
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

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace tandem::transport::test
