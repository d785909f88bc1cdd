// NVML's view merged into a topology (fake answers: no driver needed).
#include "topo/nvml.hpp"

#include <gtest/gtest.h>

namespace tandem::topo {
namespace {

Topology dual_socket() {
  return from_xml(std::string(TANDEM_SOURCE_DIR) + "/tests/unit/topo/fixtures/dual_socket.xml");
}

NvmlGpu gpu(const std::string& busid, std::vector<std::string> peers, int switch_links = 0) {
  NvmlGpu g;
  g.busid = busid;
  g.name = "NVIDIA H100 80GB HBM3";
  g.to_switch.assign(peers.size(), false);
  g.link_peers = std::move(peers);
  for (int i = 0; i < switch_links; ++i) {
    g.link_peers.push_back("0000:f0:00.0");
    g.to_switch.push_back(true);
  }
  return g;
}

TEST(Nvml, DirectLinksReplaceThoseOfTheFile) {
  Topology t = dual_socket();
  apply_nvml({gpu("0000:02:00.0", {"0000:84:00.0", "0000:84:00.0"}),
              gpu("0000:84:00.0", {"0000:02:00.0", "0000:02:00.0"})},
             t);
  EXPECT_TRUE(t.nvml);
  ASSERT_EQ(t.gpus.size(), 4u);
  EXPECT_EQ(t.gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(path_type(t, t.gpus[0], t.gpus[3]).str(), "NV2");
  EXPECT_EQ(path_type(t, t.gpus[3], t.gpus[0]).str(), "NV2");
  EXPECT_EQ(path_type(t, t.gpus[0], t.gpus[1]).str(), "PIX");  // NVML lists no link there
}

TEST(Nvml, SwitchLinksConnectEveryPairAndUnplacedGpusAreAdded) {
  Topology t = dual_socket();
  apply_nvml({gpu("0000:02:00.0", {}, 18), gpu("0000:04:00.0", {}, 18), gpu("0000:c1:00.0", {}, 12),
              gpu("0000:11:00.0", {})},
             t);
  ASSERT_EQ(t.gpus.size(), 5u);
  EXPECT_EQ(t.gpus[4].busid, "0000:c1:00.0");  // bus order
  EXPECT_EQ(path_type(t, t.gpus[0], t.gpus[1]).str(), "NV18");
  EXPECT_EQ(path_type(t, t.gpus[0], t.gpus[4]).str(), "NV12");
  EXPECT_EQ(path_type(t, t.gpus[4], t.gpus[1]).str(), "NV12");
  EXPECT_EQ(path_type(t, t.gpus[0], t.gpus[2]).str(), "NODE");  // 11:00.0 has no links
  EXPECT_EQ(path_type(t, t.gpus[3], t.gpus[4]).str(), "SYS");   // not in NVML's answer
  EXPECT_EQ(t.gpus[4].numa, -1);
  EXPECT_EQ(to_string(t.gpus[4].cpus), "0-15");
}

TEST(Nvml, AbsentLibraryIsNoError) {
  // Without the driver: nullopt, and discover() reports no NVML; with it, real bus ids.
  std::optional<std::vector<NvmlGpu>> nv;
  EXPECT_NO_THROW(nv = query_nvml());
  EXPECT_EQ(discover().nvml, nv.has_value());
  for (const auto& g : nv.value_or(std::vector<NvmlGpu>{})) EXPECT_EQ(g.busid.size(), 12u);
}

}  // namespace
}  // namespace tandem::topo
