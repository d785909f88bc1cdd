#!/usr/bin/env bash
# The training checks of docs/gpu.md in one run, on a machine with a GPU and a CUDA build of
# torch, with the tandem package importable (PYTHONPATH=build/python after a build against that
# torch) and tandemrun in $BIN:
#  - a 6-layer, d=512 transformer LM (bench/gpu/train_lm.py) under DDP and FSDP2: backend nccl
#    on 1 rank, backend tandem on 1, 2 and 4 ranks sharing the GPU, each against a one-process
#    reference of the same global batch (losses within bf16 tolerance);
#  - the same with NCCL's several-ranks-per-GPU mode (NCCL_MULTI_RANK_GPU_ENABLE=1) on 2 ranks,
#    where the NCCL on the machine has it (its version is in env.txt);
#  - a rank killed mid-step: the survivors' error, how long after the kill, and a new group
#    on their CUDA context;
#  - dist.all_reduce 8 B..256 MiB for the same backends (bench/gpu/allreduce.py).
#
#   BIN=build/bin OUT=/tmp/tandem-train bash bench/gpu/train.sh
#   DEVICE=cpu bash bench/gpu/train.sh   # the same plumbing on the CPU: a tiny model, gloo for
#                                        # nccl, no all_reduce sweep
#
# Logs and JSON land in $OUT (summary.txt, train-table.md, allreduce-*.jsonl); the exit status
# is the number of failed steps.
set -u
BIN=${BIN:-build/bin}
OUT=${OUT:-/tmp/tandem-train}
PY=${PY:-python3}
STEPS=${STEPS:-30}
DEVICE=${DEVICE:-cuda}
MODEL=()
NCCL=nccl
if [ "$DEVICE" = cpu ]; then
  MODEL=(--device cpu --dtype fp32 --layers 2 --dim 64 --heads 4 --vocab 128 --seq 32 --batch 4)
  NCCL=gloo
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT/train"
summary="$OUT/summary.txt"
: >"$summary"
. "$here/steps.sh"
log="$OUT/train.log"
: >"$log"

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$PY" -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")' 2>&1
} >"$OUT/env.txt"

lm() {  # lm NAME ARGS...: bench/gpu/train_lm.py run ARGS into $OUT/train
  local name=$1
  shift
  step "$name" 240 "$log" "$PY" "$here/train_lm.py" run --steps "$STEPS" --out "$OUT/train" \
    ${MODEL[@]+"${MODEL[@]}"} "$@"
}

for wb in 1 2 4; do
  lm "reference, global batch of $wb ranks" --nproc 1 --mode reference --world-batch "$wb"
done
for mode in ddp fsdp2; do
  lm "$mode $NCCL 1 rank" --nproc 1 --mode "$mode" --backend "$NCCL"
  for n in 1 2 4; do
    lm "$mode tandem $n ranks" --nproc "$n" --mode "$mode" --backend tandem
  done
  NCCL_MULTI_RANK_GPU_ENABLE=1 lm "$mode $NCCL 2 ranks, multi-rank GPU mode" \
    --nproc 2 --mode "$mode" --backend "$NCCL"
done
lm "ddp tandem 2 ranks, rank 1 killed" --nproc 2 --mode ddp --backend tandem --kill-rank 1 \
  --timeout 60
NCCL_MULTI_RANK_GPU_ENABLE=1 lm "ddp $NCCL 2 ranks (multi-rank mode), rank 1 killed" \
  --nproc 2 --mode ddp --backend "$NCCL" --kill-rank 1 --timeout 60

t="$OUT/train"
{
  for n in 1 2 4; do
    files=("$t/reference-none-$n.json")
    for f in "$t"/ddp-*-"$n".json "$t"/fsdp2-*-"$n".json; do
      [ -e "$f" ] && files+=("$f")
    done
    echo "global batch of $n ranks:"
    "$PY" "$here/train_lm.py" compare "${files[@]}" || echo "(over the tolerance)"
    echo
  done
  for f in "$t"/*-kill.json; do
    echo "$(basename "$f"):"
    "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d.get("survivors"), indent=1), d.get("exit_codes"))' "$f"
  done
} >"$OUT/train-table.md" 2>&1
cat "$OUT/train-table.md"

ar() {  # ar NAME RANKS BACKEND [ENV...]
  local name=$1 n=$2 backend=$3
  shift 3
  step "all_reduce $name" 180 "$OUT/allreduce-$name.jsonl" env "$@" PYTHONPATH="${PYTHONPATH:-}" \
    "$BIN/tandemrun" --nproc-per-node "$n" "$PY" "$here/allreduce.py" --backend "$backend"
}
if [ "$DEVICE" = cpu ]; then
  echo "$failed failed steps" | tee -a "$summary"
  exit "$failed"
fi
ar nccl-1 1 nccl
ar nccl-2-multirank 2 nccl NCCL_MULTI_RANK_GPU_ENABLE=1
for n in 1 2 4; do
  ar "tandem-$n" "$n" tandem
done

echo "$failed failed steps" | tee -a "$summary"
exit "$failed"
