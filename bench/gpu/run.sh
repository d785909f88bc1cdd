#!/usr/bin/env bash
# Every GPU check in one call on a lent GPU machine that has a CUDA build of torch and no
# network: installs the tandem wheel built for that torch (make wheel TORCH=<its version>,
# carried in dist/) into a virtual environment that sees the machine's torch, then runs
#   1. bench/gpu/check.sh with the bundle of bench/gpu/bundle.sh, where build-carry/ was
#      carried too (test_gpu, tandem-perf on 1, 2 and 4 ranks sharing the GPU);
#   2. bench/gpu/train.sh with the wheel's tandemrun: DDP and FSDP2 of a transformer LM on 1, 2
#      and 4 ranks per GPU against NCCL and a one-process reference, NCCL's multi-rank mode
#      where its NCCL has it, a killed rank, the all_reduce sweep.
# Results land in RESULTS (default: bench/gpu/results/<card>/), one folder per part.
#
#   # here: make wheel TORCH=2.11.0 && BUILD_DIR=build OUT=build-carry bash bench/gpu/bundle.sh
#   # device tool: run with carry ["dist", "build-carry"]:
#   RESULTS=$OUT bash bench/gpu/run.sh
#
# The exit status is the number of failed steps of both parts.
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 |
  tr 'A-Z' 'a-z' | sed -E 's/nvidia //; s/[^a-z0-9]+/-/g; s/-+$//')
RESULTS=${RESULTS:-bench/gpu/results/${card:-unknown}}
mkdir -p "$RESULTS"

torch_minor=$("$PY" -c 'import torch; print(".".join(torch.__version__.split("+")[0].split(".")[:2]))')
wheel=$(ls dist/tandem-*+torch"$torch_minor"-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
  echo "run.sh: no dist/tandem-*+torch$torch_minor-*.whl for this machine's torch" \
    "$("$PY" -c 'import torch; print(torch.__version__)'): make wheel TORCH=<that version> here," \
    "and carry dist/" >&2
  exit 1
fi
venv=$(mktemp -d)/venv
"$PY" -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --no-index --no-deps "$wheel" || exit 1
site=$("$venv/bin/python" -c 'import tandem, os; print(os.path.dirname(tandem.__file__))')
echo "run.sh: $(basename "$wheel") on $card, torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')" |
  tee "$RESULTS/run.txt"

failed=0
if [ -x build-carry/run.sh ]; then
  OUT="$RESULTS/check" bash build-carry/run.sh
  failed=$((failed + $?))
fi
TANDEM_PYTHON="$venv/bin/python" BIN="$site/bin" PY="$venv/bin/python" OUT="$RESULTS/train" bash bench/gpu/train.sh
failed=$((failed + $?))
echo "run.sh: $failed failed steps" | tee -a "$RESULTS/run.txt"
exit "$failed"
