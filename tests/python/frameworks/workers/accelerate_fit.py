"""A Hugging Face Accelerate training loop on backend argv[1] ("tandem" or "gloo") under
tandemrun. On the CPU, Accelerate replaces any backend but MPI with Gloo when it makes the
process group itself (state.py, PartialState._prepare_backend) and refuses a backend passed in
InitProcessGroupKwargs; it keeps a default group that exists already. So the script makes the
group first, then the Accelerator. Writes $REPORT_DIR/rank<R>.json: the backend in use, the
losses and the final parameters."""

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore")
backend = sys.argv[1]
if backend == "tandem":
    import tandem.torch  # noqa: F401

dist.init_process_group(backend)          # before the Accelerator: Accelerate keeps it

from accelerate import Accelerator  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(1)
accelerator = Accelerator(cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(1)
data = torch.utils.data.TensorDataset(torch.randn(128, 8, generator=g), torch.randn(128, 1, generator=g))
loader = torch.utils.data.DataLoader(data, batch_size=16)
model, opt, loader = accelerator.prepare(model, opt, loader)
losses = []
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    losses.append(accelerator.gather(loss.detach()).tolist())
accelerator.wait_for_everyone()
report = {"backend": dist.get_backend(), "accelerate_says": str(accelerator.state.backend),
          "losses": losses,
          "params": [p.detach().reshape(-1).tolist() for p in accelerator.unwrap_model(model).parameters()]}
with open(os.path.join(os.environ["REPORT_DIR"], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
