#pragma once
// Finding a Python that can import torch.distributed (the build's .venv), for the tests
// that run a PyTorch script under tandemrun unchanged.

#include <string>

namespace tandem::testing {

/// Path of a python3 that imports torch.distributed with gloo, or empty; `why_not` says what
/// failed (for the visible skip).
std::string python_with_torch(std::string* why_not);

/// A script that joins torch.distributed (gloo, env://), all-reduces rank + 1 and prints
/// "rank R/W allreduce V OK" (or WRONG) on every rank.
const char* torch_allreduce_script();

}  // namespace tandem::testing
