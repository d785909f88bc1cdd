#include "topo/topology.hpp"

#include "tandem/error.hpp"
#include "topo/binding.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sched.h>
#include <string>

namespace tandem::topo {
namespace {

std::string fixture(const std::string& name) {
  return std::string(TANDEM_SOURCE_DIR) + "/tests/unit/topo/fixtures/" + name;
}

const Device& nic(const Topology& t, const std::string& name) {
  for (const Device& d : t.nics)
    if (d.name == name) return d;
  throw std::runtime_error("no NIC " + name);
}

std::string path(const Topology& t, const Device& a, const Device& b) {
  return path_type(t, a, b).str();
}

class DualSocket : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { t_ = new Topology(from_xml(fixture("dual_socket.xml"))); }
  static void TearDownTestSuite() {
    delete t_;
    t_ = nullptr;
  }
  static Topology* t_;
};
Topology* DualSocket::t_ = nullptr;

TEST_F(DualSocket, FindsNodesCoresCachesAndDevices) {
  const Topology& t = *t_;
  EXPECT_EQ(t.hostname, "fixture");
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(to_string(t.numa_nodes[0].cpus), "0-3,8-11");
  EXPECT_EQ(to_string(t.numa_nodes[1].cpus), "4-7,12-15");
  EXPECT_EQ(t.numa_nodes[1].memory, 64ull << 30);
  ASSERT_EQ(t.cores.size(), 8u);
  EXPECT_EQ(to_string(t.cores[5].pus), "5,13");
  EXPECT_EQ(t.cores[5].numa, 1);
  int l3 = 0;
  for (const Cache& c : t.caches) l3 += c.level == 3 && c.size == (32u << 20) ? 1 : 0;
  EXPECT_EQ(l3, 2);
  EXPECT_EQ(t.pci.size(), 7u);
  ASSERT_EQ(t.gpus.size(), 4u);
  EXPECT_EQ(t.gpus[0].busid, "0000:02:00.0");
  EXPECT_EQ(t.gpus[3].busid, "0000:84:00.0");
  EXPECT_EQ(t.gpus[3].numa, 1);
  EXPECT_EQ(to_string(t.gpus[0].cpus), "0-3,8-11");
  ASSERT_EQ(t.nics.size(), 3u);
  EXPECT_EQ(t.nics[0].name, "mlx5_0");  // the RDMA name before the netdev's (ib0)
  EXPECT_EQ(t.nics[1].name, "eth1");
  EXPECT_FALSE(t.nvml);
}

TEST_F(DualSocket, PathTypesAsNvidiaSmiNamesThem) {
  const Topology& t = *t_;
  const auto& g = t.gpus;
  EXPECT_EQ(path(t, g[0], g[0]), "X");
  EXPECT_EQ(path(t, g[0], g[1]), "NV4");
  EXPECT_EQ(path(t, g[1], g[0]), "NV4");
  EXPECT_EQ(path(t, g[0], g[2]), "NV2");
  EXPECT_EQ(path(t, g[2], g[0]), "NV2");
  EXPECT_EQ(path(t, g[1], g[2]), "NODE");  // two host bridges of package 0
  EXPECT_EQ(path(t, g[0], g[3]), "SYS");
  EXPECT_EQ(path(t, g[3], g[1]), "SYS");
  EXPECT_EQ(path(t, g[0], nic(t, "mlx5_0")), "PIX");  // the same switch
  EXPECT_EQ(path(t, nic(t, "mlx5_0"), g[1]), "PIX");
  EXPECT_EQ(path(t, g[2], nic(t, "eth1")), "PHB");    // two root ports of one host bridge
  EXPECT_EQ(path(t, g[3], nic(t, "mlx5_1")), "PXB");  // two switches deep
  EXPECT_EQ(path(t, nic(t, "mlx5_0"), nic(t, "eth1")), "NODE");
  EXPECT_EQ(path(t, nic(t, "mlx5_0"), nic(t, "mlx5_1")), "SYS");
  EXPECT_EQ(path(t, nic(t, "eth1"), nic(t, "eth1")), "X");
}

std::vector<std::string> sets(const Binding& b) {
  std::vector<std::string> out;
  for (const auto& c : b.cpus) out.push_back(to_string(c));
  return out;
}

TEST_F(DualSocket, CoreBindingSpreadsDisjointCoresOverNodes) {
  const Binding four = bind_local_ranks(*t_, CpuBind::core, 4);
  EXPECT_EQ(sets(four),
            (std::vector<std::string>{"0-1,8-9", "2-3,10-11", "4-5,12-13", "6-7,14-15"}));
  EXPECT_EQ(four.numa, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_TRUE(four.warning.empty());
  const Binding three = bind_local_ranks(*t_, CpuBind::core, 3);
  EXPECT_EQ(sets(three), (std::vector<std::string>{"0-1,8-9", "2-3,10-11", "4-7,12-15"}));
  const Binding two = bind_local_ranks(*t_, CpuBind::core, 2);
  EXPECT_EQ(sets(two), (std::vector<std::string>{"0-3,8-11", "4-7,12-15"}));
  const Binding eight = bind_local_ranks(*t_, CpuBind::core, 8);
  EXPECT_EQ(sets(eight)[7], "7,15");
  EXPECT_TRUE(eight.warning.empty());
}

TEST_F(DualSocket, MoreRanksThanCoresShareCoresWithAWarning) {
  const Binding b = bind_local_ranks(*t_, CpuBind::core, 10);
  ASSERT_EQ(b.cpus.size(), 10u);
  EXPECT_EQ(to_string(b.cpus[8]), "0,8");
  EXPECT_EQ(to_string(b.cpus[9]), "1,9");
  EXPECT_NE(b.warning.find("10 local ranks but 8 cores"), std::string::npos) << b.warning;
}

TEST_F(DualSocket, NumaBindingDealsNodesRoundRobin) {
  const Binding b = bind_local_ranks(*t_, CpuBind::numa, 3);
  EXPECT_EQ(sets(b), (std::vector<std::string>{"0-3,8-11", "4-7,12-15", "0-3,8-11"}));
  EXPECT_EQ(b.numa, (std::vector<int>{0, 1, 0}));
  const Binding none = bind_local_ranks(*t_, CpuBind::none, 2);
  EXPECT_EQ(sets(none), (std::vector<std::string>{"0-15", "0-15"}));
  EXPECT_EQ(none.numa, (std::vector<int>{-1, -1}));
}

TEST(SingleNuma, TwoCoresOneNic) {
  const Topology t = from_xml(fixture("single_numa.xml"));
  ASSERT_EQ(t.numa_nodes.size(), 1u);
  EXPECT_TRUE(t.gpus.empty());
  ASSERT_EQ(t.nics.size(), 1u);
  EXPECT_EQ(t.nics[0].name, "eth0");
  EXPECT_EQ(t.nics[0].numa, 0);
  EXPECT_EQ(sets(bind_local_ranks(t, CpuBind::core, 2)), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(sets(bind_local_ranks(t, CpuBind::numa, 2)), (std::vector<std::string>{"0-1", "0-1"}));
  EXPECT_THROW(bind_local_ranks(t, CpuBind::core, 0), Error);
}

TEST(Xml, MissingOrMalformedFileIsAClearError) {
  try {
    from_xml("/nonexistent/topology.xml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find("/nonexistent/topology.xml"), std::string::npos);
  }
  const std::string bad = ::testing::TempDir() + "/tandem_topo_bad.xml";
  std::ofstream(bad) << "<topology><object type=\"Machine\"";
  try {
    from_xml(bad);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find(bad), std::string::npos);
  }
}

TEST(CpuList, ParsesAndPrintsLinuxLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8-11\n"), (CpuList{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(to_string(CpuList{0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(to_string(parse_cpu_list("3,1,2")), "1-3");
  EXPECT_THROW(parse_cpu_list("1-"), Error);
  EXPECT_THROW(parse_cpu_list("3-1"), Error);
  EXPECT_THROW(parse_cpu_list("a"), Error);
  EXPECT_EQ(parse_cpu_bind("numa"), CpuBind::numa);
  EXPECT_EQ(parse_cpu_bind("cores"), std::nullopt);
}

TEST(Discover, ThisMachineMatchesOurAffinity) {
  const Topology t = discover();
  EXPECT_FALSE(t.numa_nodes.empty());
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  CpuList mine;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) mine.push_back(c);
  EXPECT_EQ(t.all_cpus(), mine);
  const Binding b = bind_local_ranks(t, CpuBind::core, 1);
  EXPECT_EQ(b.cpus.front(), mine);
}

}  // namespace
}  // namespace tandem::topo
