#include "tools_api/topology.hpp"

namespace tandem::tools_api {

std::vector<std::vector<std::string>> path_matrix(const Topology& t) {
  std::vector<const TopoDevice*> devices;
  for (const TopoDevice& g : t.gpus) devices.push_back(&g);
  for (const TopoDevice& n : t.nics) devices.push_back(&n);
  std::vector<std::vector<std::string>> paths;
  for (const TopoDevice* a : devices) {
    std::vector<std::string>& row = paths.emplace_back();
    for (const TopoDevice* b : devices) row.push_back(path_type(t, *a, *b).str());
  }
  return paths;
}

}  // namespace tandem::tools_api
