#include "python_torch.hpp"

#include "subprocess.hpp"

#include <cstdlib>
#include <unistd.h>
#include <vector>

namespace tandem::testing {

std::string python_with_torch(std::string* why_not) {
  // The build's Python (.venv/bin/python, with torch from pip) first, then PATH's python3.
  std::vector<std::string> candidates{TANDEM_TEST_PYTHON};
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    std::size_t start = 0;
    while (start <= p.size()) {
      const std::size_t colon = std::min(p.find(':', start), p.size());
      if (colon > start) candidates.push_back(p.substr(start, colon - start) + "/python3");
      start = colon + 1;
    }
  }
  std::string last = "no python3 found";
  for (const auto& py : candidates) {
    if (::access(py.c_str(), X_OK) != 0) continue;
    const auto r = run_process(
        {py, "-c",
         "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()"},
        {}, std::chrono::seconds(120));
    if (r.exit_code == 0) return py;
    last = py + ": " + (r.err.empty() ? std::string("cannot import torch.distributed") : r.err);
  }
  if (why_not != nullptr) *why_not = last;
  return {};
}

const char* torch_allreduce_script() {
  return R"(import torch, torch.distributed as dist
dist.init_process_group(backend="gloo", init_method="env://")
r, w = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(r + 1)])
dist.all_reduce(t)
ok = t.item() == w * (w + 1) / 2
print(f"rank {r}/{w} allreduce {t.item():g} {'OK' if ok else 'WRONG'}", flush=True)
dist.destroy_process_group()
)";
}

}  // namespace tandem::testing
