"""The compatibility matrix of torch.distributed: every collective x ReduceOp x dtype, in place
and out of place, as named cells. A cell runs on every rank and returns "ok" when its result
equals a reference that the rank computes itself, in Python integers and floats, from the
inputs every rank is known to give; "differs: ..." otherwise. A refusal is the exception the
cell raises. The references are NCCL's results where NCCL defines one: integer AVG is the sum
(wrapping in the dtype) divided by the world size, truncated toward zero; bool SUM is MAX and
PRODUCT is MIN; complex numbers reduce by parts. Bitwise operations, which NCCL lacks, are
Gloo's: the operation on the integers' bits (and bool BXOR is exclusive or)."""

import math

import torch
import torch.distributed as dist

N = 6  # elements per rank (per chunk where a collective splits its buffer)

DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "uint16": torch.uint16,
    "uint32": torch.uint32, "uint64": torch.uint64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "complex64": torch.complex64, "complex128": torch.complex128,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz, "float8_e5m2fnuz": torch.float8_e5m2fnuz,
}
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"]
PREMUL_FACTOR = 0.5
REDUCTIONS = ["all_reduce", "reduce", "reduce_scatter_tensor", "reduce_scatter_tensor (in place)",
              "reduce_scatter"]
MOVES = ["broadcast", "all_gather", "all_gather_into_tensor",
         "all_gather_into_tensor (in place)", "all_to_all_single", "all_to_all", "gather",
         "scatter", "send/recv"]

# The signed view of each unsigned integer dtype (unsigned tensors are made through it).
_SIGNED_OF = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
_INT_BITS = {torch.uint8: 8, torch.int8: 8, torch.int16: 16, torch.int32: 32, torch.int64: 64,
             torch.uint16: 16, torch.uint32: 32, torch.uint64: 64}
_UNSIGNED = {torch.uint8, torch.uint16, torch.uint32, torch.uint64}


def is_int(dtype):
    return dtype in _INT_BITS


def op_of(name):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(dist.ReduceOp, name)


def _wrap(v, dtype):
    bits = _INT_BITS[dtype]
    v &= (1 << bits) - 1
    if dtype not in _UNSIGNED and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _lcg(seed):
    return (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)


def values(dtype, op, rank, salt):
    """Rank `rank`'s N input values (Python numbers) for chunk `salt`: exact in `dtype`, with
    negative numbers, a sum that wraps and full bit patterns where they tell results apart."""
    out = []
    for i in range(N):
        k = i * 7 + rank * 3 + salt * 5
        if dtype == torch.bool:
            out.append((i + rank + salt) % 3 == 0)
        elif is_int(dtype):
            top = (1 << _INT_BITS[dtype]) - 1 if dtype in _UNSIGNED else (1 << (_INT_BITS[dtype] - 1)) - 1
            if op in ("MIN", "MAX", "BAND", "BOR", "BXOR", None):
                out.append(_wrap(_lcg(k * 131 + 17), dtype))
            elif op == "PRODUCT":
                sign = -1 if dtype not in _UNSIGNED and (i + 2 * rank) % 3 == 0 else 1
                out.append(top // 3 if i == N - 1 else sign * (1 + (i + rank) % 2))
            else:  # SUM, AVG, PREMUL_SUM: the last element wraps on any two ranks
                low = 0 if dtype in _UNSIGNED else -5
                out.append(top if i == N - 1 else k % 11 + low)
        else:
            if op == "PRODUCT":
                x = [1.0, 2.0, -1.0, 0.5][(i + rank + salt) % 4]
            else:
                x = float(k % 9 - 4)
            out.append(complex(x, -(k % 5)) if dtype.is_complex else x)
    return out


def make(vals, dtype):
    """A tensor of `dtype` holding `vals` exactly (or rounded once, for floats)."""
    if dtype == torch.bool:
        return torch.tensor(vals, dtype=torch.bool)
    if is_int(dtype):
        if dtype in _SIGNED_OF:
            signed = _SIGNED_OF[dtype]
            return torch.tensor([_wrap(v, signed) for v in vals], dtype=signed).view(dtype)
        return torch.tensor(vals, dtype=dtype)
    if dtype.is_complex:
        return torch.tensor(vals, dtype=torch.complex128).to(dtype)
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def reduced(dtype, op, world, salt):
    """The reference result of `op` over every rank's values(dtype, op, r, salt)."""
    cols = list(zip(*[values(dtype, op, r, salt) for r in range(world)]))
    out = []
    for xs in cols:
        if dtype == torch.bool:
            if op in ("SUM", "MAX", "BOR"):
                out.append(any(xs))
            elif op in ("PRODUCT", "MIN", "BAND"):
                out.append(all(xs))
            elif op == "BXOR":
                out.append(sum(xs) % 2 == 1)
            else:
                raise ValueError(op)
        elif is_int(dtype):
            if op in ("SUM", "PREMUL_SUM"):
                v = _wrap(sum(xs), dtype)
            elif op == "AVG":
                s = _wrap(sum(xs), dtype)
                v = int(math.copysign(abs(s) // world, s))
            elif op == "PRODUCT":
                v = _wrap(math.prod(xs), dtype)
            elif op == "MIN":
                v = min(xs)
            elif op == "MAX":
                v = max(xs)
            else:
                v = xs[0]
                for x in xs[1:]:
                    v = {"BAND": v & x, "BOR": v | x, "BXOR": v ^ x}[op]
                v = _wrap(v, dtype)
            out.append(v)
        else:
            if op == "SUM":
                v = sum(xs)
            elif op == "AVG":
                v = sum(xs) / world
            elif op == "PREMUL_SUM":
                v = sum(PREMUL_FACTOR * x for x in xs)
            elif op == "PRODUCT":
                v = math.prod(xs)
            elif op == "MIN":
                v = min(xs)
            elif op == "MAX":
                v = max(xs)
            else:
                raise ValueError(op)
            out.append(v)
    return make(out, dtype)


def same(got, want):
    """True when `got` holds exactly `want`'s bytes (any dtype, NaN-free references)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    a = got.contiguous().reshape(-1).view(torch.uint8)
    b = want.contiguous().reshape(-1).view(torch.uint8)
    return bool(torch.equal(a, b))


def _show(t):
    if t.dtype in _SIGNED_OF:
        return t.view(_SIGNED_OF[t.dtype]).tolist()
    if t.dtype.is_floating_point:
        return t.to(torch.float64).tolist()
    return t.tolist()


def verdict(got, want):
    if same(got, want):
        return "ok"
    return f"differs: got {_show(got)}, want {_show(want)}"


def checked(got, dtype, op, world, salt):
    """The verdict on `got`; "ran" where the operation has no meaning to compare with (a
    bitwise operation on floats, an order on complex numbers)."""
    try:
        want = reduced(dtype, op, world, salt)
    except (ValueError, TypeError):
        return "ran"
    return verdict(got, want)


def _reduction(coll, dtype, op):
    def run(rank, world):
        o = op_of(op)
        if coll == "all_reduce":
            t = make(values(dtype, op, rank, 0), dtype)
            dist.all_reduce(t, op=o)
            return checked(t, dtype, op, world, 0)
        if coll == "reduce":
            t = make(values(dtype, op, rank, 0), dtype)
            dist.reduce(t, dst=0, op=o)
            return checked(t, dtype, op, world, 0) if rank == 0 else "ok"
        chunks = [make(values(dtype, op, rank, j), dtype) for j in range(world)]
        if coll == "reduce_scatter":
            out = torch.empty(N, dtype=dtype)
            dist.reduce_scatter(out, chunks, op=o)
            return checked(out, dtype, op, world, rank)
        flat = torch.cat(chunks)
        if coll == "reduce_scatter_tensor":
            out = torch.empty(N, dtype=dtype)
        else:  # in place: the output is this rank's chunk of the input
            out = flat[rank * N:(rank + 1) * N]
        dist.reduce_scatter_tensor(out, flat, op=o)
        return checked(out, dtype, op, world, rank)
    return run


def _move(coll, dtype):
    def mine(rank, salt=0):
        return make(values(dtype, None, rank, salt), dtype)

    def run(rank, world):
        if coll == "broadcast":
            t = mine(rank)
            dist.broadcast(t, src=0)
            return verdict(t, mine(0))
        if coll == "all_gather":
            outs = [torch.empty(N, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, mine(rank))
            return verdict(torch.cat(outs), torch.cat([mine(r) for r in range(world)]))
        if coll.startswith("all_gather_into_tensor"):
            out = torch.empty(world * N, dtype=dtype)
            inp = mine(rank)
            if "in place" in coll:
                out[rank * N:(rank + 1) * N] = inp
                inp = out[rank * N:(rank + 1) * N]
            dist.all_gather_into_tensor(out, inp)
            return verdict(out, torch.cat([mine(r) for r in range(world)]))
        if coll == "all_to_all_single":
            inp = torch.cat([mine(rank, j) for j in range(world)])
            out = torch.empty(world * N, dtype=dtype)
            dist.all_to_all_single(out, inp)
            return verdict(out, torch.cat([mine(r, rank) for r in range(world)]))
        if coll == "all_to_all":
            outs = [torch.empty(N, dtype=dtype) for _ in range(world)]
            dist.all_to_all(outs, [mine(rank, j) for j in range(world)])
            return verdict(torch.cat(outs), torch.cat([mine(r, rank) for r in range(world)]))
        if coll == "gather":
            outs = [torch.empty(N, dtype=dtype) for _ in range(world)] if rank == 0 else None
            dist.gather(mine(rank), outs, dst=0)
            if rank != 0:
                return "ok"
            return verdict(torch.cat(outs), torch.cat([mine(r) for r in range(world)]))
        if coll == "scatter":
            out = torch.empty(N, dtype=dtype)
            ins = [mine(0, j) for j in range(world)] if rank == 0 else None
            dist.scatter(out, ins, src=0)
            return verdict(out, mine(0, rank))
        if coll == "send/recv":
            if rank == 0:
                dist.send(mine(0), dst=1)
                return "ok"
            if rank == 1:
                t = torch.empty(N, dtype=dtype)
                dist.recv(t, src=0)
                return verdict(t, mine(0))
            return "ok"
        raise ValueError(coll)
    return run


def all_cells():
    """{"collective | op | dtype": run(rank, world)}; moves have op "-"."""
    cells = {}
    for coll in REDUCTIONS:
        for op in OPS:
            for dname, dtype in DTYPES.items():
                cells[f"{coll} | {op} | {dname}"] = _reduction(coll, dtype, op)
    for coll in MOVES:
        for dname, dtype in DTYPES.items():
            cells[f"{coll} | - | {dname}"] = _move(coll, dtype)
    return cells


# ---- what NCCL accepts, as torch's ProcessGroupNCCL decides it ------------------------------
# (its dtype table maps bool to uint8 and the float8 types to NCCL's float8 or uint8; complex
# tensors are viewed as real for SUM, AVG and PREMUL_SUM; ncclRedOp has no bitwise operations;
# PREMUL_SUM is defined for half, float, double and bfloat16; bool AVG is refused; the fnuz
# float8 types move but do not reduce.)
_NCCL_TYPES = {"bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32",
               "float64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"}


def nccl_accepts(coll, op, dname):
    if dname.startswith("complex"):
        return coll in MOVES or op in ("SUM", "AVG", "PREMUL_SUM")
    if dname not in _NCCL_TYPES:
        return False
    if coll in MOVES:
        return True
    if dname.endswith("fnuz") or op in ("BAND", "BOR", "BXOR"):
        return False
    if dname == "bool":
        return op in ("SUM", "PRODUCT", "MIN", "MAX")
    if op == "PREMUL_SUM":
        return dname in ("float16", "bfloat16", "float32", "float64")
    return True


# ---- layouts: how a tensor is laid out, not what it holds ----------------------------------
# float32, SUM. Each case makes this rank's tensor(s), runs one collective, and compares with
# the same collective's result on plain contiguous copies, computed from every rank's inputs.

def _base(rank, n=N, salt=0):
    return make(values(torch.float32, "SUM", rank, salt)[:n] if n <= N else
                [float((i * 7 + rank * 3 + salt) % 9 - 4) for i in range(n)], torch.float32)


def _layout_cells():
    def noncontig(rank):  # every other element of a longer tensor
        return _base(rank, 2 * N).reshape(N, 2)[:, 0]

    def offset(rank):  # a slice that starts 3 elements into its storage
        return _base(rank, N + 3)[3:]

    def channels_last(rank):
        return _base(rank, 12).reshape(1, 3, 2, 2).contiguous(memory_format=torch.channels_last)

    def zero_dim(rank):
        return _base(rank, 1).reshape(())

    def empty(rank):
        return torch.empty(0)

    def grad(rank):  # a tensor that requires grad and is not a leaf (as in a model's forward)
        return _base(rank).requires_grad_() * 1

    shapes = {"non-contiguous": noncontig, "storage offset": offset,
              "channels_last": channels_last, "0-d": zero_dim, "zero elements": empty,
              "requires_grad": grad}

    def all_reduce(make_t):
        def run(rank, world):
            t = make_t(rank)
            want = sum(make_t(r).detach().contiguous() for r in range(world))
            with torch.no_grad():
                dist.all_reduce(t)
            return verdict(t.detach().contiguous(), want.contiguous())
        return run

    def broadcast(make_t):
        def run(rank, world):
            t = make_t(rank)
            with torch.no_grad():
                dist.broadcast(t, src=0)
            return verdict(t.detach().contiguous(), make_t(0).detach().contiguous())
        return run

    def all_gather(make_t):
        def run(rank, world):
            t = make_t(rank)
            outs = [torch.empty_like(t.detach()) for _ in range(world)]
            dist.all_gather(outs, t)
            return verdict(torch.stack([o.contiguous() for o in outs]),
                           torch.stack([make_t(r).detach().contiguous() for r in range(world)]))
        return run

    def all_gather_into_tensor(make_t):
        def run(rank, world):
            t = make_t(rank)
            out = torch.empty(world * t.numel())
            dist.all_gather_into_tensor(out, t)
            return verdict(out, torch.cat([make_t(r).detach().contiguous().reshape(-1)
                                           for r in range(world)]))
        return run

    def reduce_scatter_tensor(make_t):  # the output laid out so
        def run(rank, world):
            out = make_t(rank)
            if out.requires_grad:
                out = out.detach().requires_grad_()
            inp = torch.cat([make_t(r).detach().contiguous().reshape(-1) * (rank + 1)
                             for r in range(world)])
            with torch.no_grad():
                dist.reduce_scatter_tensor(out, inp)
            want = make_t(rank).detach().contiguous() * sum(q + 1 for q in range(world))
            return verdict(out.detach().contiguous(), want)
        return run

    def all_to_all_single(make_t):  # the input laid out so, world chunks of it
        def run(rank, world):
            t = make_t(rank)
            n = t.numel() // world * world
            out = torch.empty(n)
            # A 1-D tensor itself where it splits evenly (dim 0 is what splits), else its
            # first n elements, contiguous.
            dist.all_to_all_single(out, t if t.dim() == 1 and n == t.numel() else
                                   t.detach().contiguous().reshape(-1)[:n])
            k = n // world
            want = torch.cat([make_t(r).detach().contiguous().reshape(-1)[rank * k:(rank + 1) * k]
                              for r in range(world)])
            return verdict(out, want)
        return run

    colls = {"all_reduce": all_reduce, "broadcast": broadcast, "all_gather": all_gather,
             "all_gather_into_tensor": all_gather_into_tensor,
             "reduce_scatter_tensor (output)": reduce_scatter_tensor,
             "all_to_all_single": all_to_all_single}
    cells = {}
    for sname, make_t in shapes.items():
        for cname, wrap in colls.items():
            if sname == "0-d" and cname == "all_to_all_single":
                continue  # one element does not split among the ranks
            cells[f"layout: {sname} | {cname}"] = wrap(make_t)

    def mixed_coalesced(rank, world):  # one call, two dtypes
        a = _base(rank)
        b = torch.arange(N, dtype=torch.int64) * (rank + 1)
        dist.all_reduce_coalesced([a, b])
        wa = sum(_base(r) for r in range(world))
        wb = torch.arange(N, dtype=torch.int64) * sum(r + 1 for r in range(world))
        return "ok" if verdict(a, wa) == "ok" and verdict(b, wb) == "ok" else "differs"

    def mixed_manager(rank, world):  # the coalescing manager, as FSDP and DDP use it
        a = _base(rank)
        b = torch.arange(N, dtype=torch.int64) * (rank + 1)
        with dist._coalescing_manager(async_ops=True) as cm:
            dist.all_reduce(a)
            dist.all_reduce(b)
        cm.wait()
        wa = sum(_base(r) for r in range(world))
        wb = torch.arange(N, dtype=torch.int64) * sum(r + 1 for r in range(world))
        return "ok" if verdict(a, wa) == "ok" and verdict(b, wb) == "ok" else "differs"

    def mixed_gather_list(rank, world):  # all_gather into outputs of another dtype
        outs = [torch.empty(N, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(outs, _base(rank))
        return verdict(torch.cat(outs), torch.cat([_base(r).double() for r in range(world)]))

    cells["layout: mixed dtypes | all_reduce_coalesced"] = mixed_coalesced
    cells["layout: mixed dtypes | _coalescing_manager"] = mixed_manager
    cells["layout: mixed dtypes | all_gather (outputs float64)"] = mixed_gather_list
    return cells


# Cells that kill the process on Gloo (torch 2.13): a 0-d output of reduce_scatter_tensor.
GLOO_CRASHES = {"layout: 0-d | reduce_scatter_tensor (output)"}


def layout_cells():
    """{"layout: <case> | <collective>": run(rank, world)}."""
    return _layout_cells()
