"""Every collective of torch.distributed x dtype x op x awkward size, as named cases. Each case
runs on every rank and checks the result against a reference the rank computes itself, from
the inputs every rank is known to give (no communication in the reference)."""

import datetime

import torch
import torch.distributed as dist

DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int8": torch.int8, "uint8": torch.uint8,
    "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
    "complex64": torch.complex64,
}
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG}
SIZES = [0, 1, 7, 1031]


def values(rank, n, dtype, op="SUM"):
    """Rank `rank`'s input: small integers, so that every sum and product is exact in every
    dtype (products stay in 1..2)."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((i + rank) % 3 == 0)
    if op == "PRODUCT":
        base = 1 + (i + rank) % 2
    else:
        base = (i * 7 + rank * 3) % 11 + 1
    if dtype.is_complex:
        return torch.complex(base.double(), -base.double()).to(dtype)
    return base.to(dtype)


def reference(world, n, dtype, op):
    """The reduction of every rank's input, computed here in float64/int64/bool."""
    if dtype == torch.bool:
        xs = torch.stack([values(r, n, dtype) for r in range(world)])
        return xs.any(0) if op in ("SUM", "MAX") else xs.all(0)
    wide = torch.complex128 if dtype.is_complex else (
        torch.float64 if dtype.is_floating_point else torch.int64)
    xs = torch.stack([values(r, n, dtype, op).to(wide) for r in range(world)])
    if op == "SUM":
        out = xs.sum(0)
    elif op == "AVG":  # integers: truncated toward zero by .to(dtype), as NCCL divides
        out = xs.sum(0) / world
    elif op == "PRODUCT":
        out = xs.prod(0)
    elif op == "MIN":
        out = xs.min(0).values
    else:
        out = xs.max(0).values
    return out.to(dtype)


def check(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"{what}: got {got.dtype} {tuple(got.shape)}, "
                             f"want {want.dtype} {tuple(want.shape)}")
    tol = {torch.float16: 1e-2, torch.bfloat16: 2e-2}.get(want.dtype, 1e-6)
    if want.dtype == torch.bool or not (want.dtype.is_floating_point or want.dtype.is_complex):
        ok = torch.equal(got, want)
    else:
        ok = torch.allclose(got.to(torch.complex128 if want.dtype.is_complex else torch.float64),
                            want.to(torch.complex128 if want.dtype.is_complex else torch.float64),
                            rtol=tol, atol=tol)
    if not ok:
        bad = (got != want).nonzero()[:3].flatten().tolist()
        raise AssertionError(f"{what}: wrong values at {bad}: got {got.flatten()[:6].tolist()} "
                             f"want {want.flatten()[:6].tolist()}")


def supported(dtype, op):
    """Whether tandem reduces `dtype` with `op` (the others must fail with a clear error)."""
    if dtype == torch.bool:
        return op in ("SUM", "PRODUCT", "MIN", "MAX")
    if dtype.is_complex:
        return op in ("SUM", "AVG")
    return True  # integer AVG too: the sum divided by the world size, truncated (NCCL's)


def _all_reduce(dt, op, n):
    def run(rank, world):
        dtype = DTYPES[dt]
        t = values(rank, n, dtype, op)
        if not supported(dtype, op):
            try:
                dist.all_reduce(t, op=OPS[op])
            # torch 2.x refuses some pairs itself (ValueError) before asking the backend.
            except (RuntimeError, ValueError) as e:
                if any(s in str(e) for s in ("refused by NCCL and Gloo", "does not support")):
                    return
                raise
            raise AssertionError(f"all_reduce {op} of {dt} was expected to be refused")
        dist.all_reduce(t, op=OPS[op])
        check(t, reference(world, n, dtype, op), f"all_reduce {op} {dt} x {n}")
    return run


def _broadcast(dt, n, root_last):
    def run(rank, world):
        dtype = DTYPES[dt]
        root = world - 1 if root_last else 0
        t = values(rank, n, dtype)
        dist.broadcast(t, src=root)
        check(t, values(root, n, dtype), f"broadcast {dt} x {n} from {root}")
    return run


def _reduce(dt, op, n):
    def run(rank, world):
        dtype = DTYPES[dt]
        root = world - 1
        t = values(rank, n, dtype, op)
        dist.reduce(t, dst=root, op=OPS[op])
        if rank == root:
            check(t, reference(world, n, dtype, op), f"reduce {op} {dt} x {n}")
    return run


def _all_gather(dt, n):
    def run(rank, world):
        dtype = DTYPES[dt]
        out = [torch.zeros(n, dtype=dtype) for _ in range(world)]
        dist.all_gather(out, values(rank, n, dtype))
        for r in range(world):
            check(out[r], values(r, n, dtype), f"all_gather {dt} x {n} block {r}")
        if n > 0:  # blocks of one tensor: gathered in place, no staging copy
            whole = torch.zeros(world * n, dtype=dtype)
            dist.all_gather(list(whole.split(n)), values(rank, n, dtype))
            check(whole, torch.cat([values(r, n, dtype) for r in range(world)]),
                  f"all_gather into the blocks of one tensor {dt} x {n}")
        flat = torch.zeros(world * n, dtype=dtype)
        dist.all_gather_into_tensor(flat, values(rank, n, dtype))
        check(flat, torch.cat([values(r, n, dtype) for r in range(world)]),
              f"all_gather_into_tensor {dt} x {n}")
    return run


def _gather_scatter(dt, n):
    def run(rank, world):
        dtype = DTYPES[dt]
        root = world - 1
        out = [torch.zeros(n, dtype=dtype) for _ in range(world)] if rank == root else None
        dist.gather(values(rank, n, dtype), gather_list=out, dst=root)
        if rank == root:
            for r in range(world):
                check(out[r], values(r, n, dtype), f"gather {dt} x {n} block {r}")
        got = torch.zeros(n, dtype=dtype)
        src = [values(r + 5, n, dtype) for r in range(world)] if rank == 0 else None
        dist.scatter(got, scatter_list=src, src=0)
        check(got, values(rank + 5, n, dtype), f"scatter {dt} x {n}")
    return run


def _reduce_scatter(dt, op, n):
    def run(rank, world):
        dtype = DTYPES[dt]
        full = [values(rank, world * n, dtype, op)]
        want = reference(world, world * n, dtype, op)[rank * n:(rank + 1) * n]
        out = torch.zeros(n, dtype=dtype)
        dist.reduce_scatter_tensor(out, full[0], op=OPS[op])
        check(out, want, f"reduce_scatter_tensor {op} {dt} x {n}")
        out2 = torch.zeros(n, dtype=dtype)
        dist.reduce_scatter(out2, list(full[0].split(n)) if n else
                            [torch.zeros(0, dtype=dtype)] * world, op=OPS[op])
        check(out2, want, f"reduce_scatter {op} {dt} x {n}")
    return run


def _all_to_all(dt, uneven):
    def run(rank, world):
        dtype = DTYPES[dt]
        # Rank s sends (s + d) % 3 + (1 if uneven) rows of 2 to rank d; even: 3 rows each.
        rows = (lambda s, d: (s + d) % 3 + 1) if uneven else (lambda s, d: 3)
        send_rows = [rows(rank, d) for d in range(world)]
        recv_rows = [rows(s, rank) for s in range(world)]
        inp = torch.cat([values(rank * 10 + d, rows(rank, d) * 2, dtype).view(-1, 2)
                         for d in range(world)])
        want = torch.cat([values(s * 10 + rank, rows(s, rank) * 2, dtype).view(-1, 2)
                          for s in range(world)])
        out = torch.zeros(sum(recv_rows), 2, dtype=dtype)
        if uneven:
            dist.all_to_all_single(out, inp, recv_rows, send_rows)
        else:
            dist.all_to_all_single(out, inp)
        check(out, want, f"all_to_all_single {dt} uneven={uneven}")
        outs = [torch.zeros(r, 2, dtype=dtype) for r in recv_rows]
        dist.all_to_all(outs, list(inp.split(send_rows)))
        check(torch.cat(outs), want, f"all_to_all (lists) {dt} uneven={uneven}")
    return run


def _send_recv(dt, n):
    def run(rank, world):
        dtype = DTYPES[dt]
        right, left = (rank + 1) % world, (rank - 1) % world
        got = torch.zeros(n, dtype=dtype)
        got7 = torch.zeros(n + 1, dtype=dtype)
        # Receives posted before the sends; tandem matches a peer's messages in posting order
        # (as NCCL does) and checks each tag.
        reqs = [dist.irecv(got, src=left, tag=3), dist.irecv(got7, src=left, tag=7),
                dist.isend(values(rank + 1, n, dtype), dst=right, tag=3),
                dist.isend(values(rank, n + 1, dtype), dst=right, tag=7)]
        for q in reqs:
            q.wait()
        check(got, values(left + 1, n, dtype), f"irecv tag 3 {dt} x {n}")
        check(got7, values(left, n + 1, dtype), f"irecv tag 7 {dt} x {n + 1}")
        # Blocking pairs: 0 -> 1, 2 -> 3, ... (the last rank of an odd world sits out).
        if rank % 2 == 0 and rank + 1 < world:
            dist.send(values(rank, n, dtype), dst=rank + 1)
        if rank % 2 == 1:
            t = torch.zeros(n, dtype=dtype)
            dist.recv(t, src=left)
            check(t, values(left, n, dtype), f"send/recv {dt} x {n}")
        dist.barrier()
    return run


def _non_contiguous():
    def run(rank, world):
        base = values(rank, 24, torch.float32).view(4, 6)
        t = base.t()  # 6 x 4, not contiguous
        assert not t.is_contiguous()
        dist.all_reduce(t)
        check(t.contiguous(), reference(world, 24, torch.float32, "SUM").view(4, 6).t().contiguous(),
              "all_reduce of a transposed tensor")
        b = values(rank, 12, torch.float64).view(3, 4)[:, ::2]
        dist.broadcast(b, src=0)
        check(b.contiguous(), values(0, 12, torch.float64).view(3, 4)[:, ::2].contiguous(),
              "broadcast of a strided slice")
        out = torch.zeros(world * 3, 2).t()  # written through a staging copy
        dist.all_gather_into_tensor(out, values(rank, 6, torch.float32))
        check(out, torch.cat([values(r, 6, torch.float32) for r in range(world)])
              .view(2, world * 3), "all_gather_into_tensor into a transposed tensor")
    return run


def _int16_moves():
    def run(rank, world):
        t = torch.arange(5, dtype=torch.int16) * (rank + 1) - 300
        dist.broadcast(t, src=0)
        check(t, torch.arange(5, dtype=torch.int16) - 300, "broadcast int16 (moved as bytes)")
        try:
            dist.all_reduce(torch.ones(3, dtype=torch.int16))
        except RuntimeError as e:
            assert "do not reduce on NCCL or Gloo" in str(e), str(e)
        else:
            raise AssertionError("all_reduce of int16 was expected to be refused")
    return run


def _lists_and_coalesced():
    def run(rank, world):
        pg = dist.distributed_c10d._get_default_group()
        a, b = values(rank, 5, torch.float32), values(rank + 1, 5, torch.float32)
        pg.allreduce([a, b]).wait()
        want = reference(world, 5, torch.float32, "SUM") + torch.stack(
            [values(r + 1, 5, torch.float32) for r in range(world)]).sum(0)
        check(a, want, "allreduce of a list of two tensors (first)")
        check(b, want, "allreduce of a list of two tensors (second)")
        xs = [values(rank, 3, torch.float64), values(rank, 4, torch.float64).view(2, 2)]
        dist.all_reduce_coalesced(xs)
        check(xs[0], reference(world, 3, torch.float64, "SUM"), "all_reduce_coalesced [0]")
        check(xs[1], reference(world, 4, torch.float64, "SUM").view(2, 2),
              "all_reduce_coalesced [1]")
    return run


def _async_work():
    def run(rank, world):
        t = values(rank, 1000, torch.float32)
        w = dist.all_reduce(t, async_op=True)
        fut = w.get_future()
        chained = fut.then(lambda f: f.value()[0] * 2)
        assert w.wait() is True
        assert w.is_completed() and w.is_success()
        want = reference(world, 1000, torch.float32, "SUM")
        check(t, want, "async all_reduce")
        check(chained.wait(), want * 2, "future.then of an async all_reduce")
        assert torch.equal(w.result()[0], t)
        # The process group's monitored barrier (torch.distributed.monitored_barrier itself
        # accepts Gloo only in this torch).
        pg = dist.distributed_c10d._get_default_group()
        pg.monitored_barrier(datetime.timedelta(seconds=30))
        # A future asked for after completion is completed at once.
        w2 = dist.broadcast(torch.zeros(3), src=0, async_op=True)
        w2.wait()
        assert w2.get_future().done()
    return run


def _bitwise():
    def run(rank, world):
        # Integers: Gloo's bitwise reductions.
        t = torch.tensor([6, 5, -1], dtype=torch.int32) << rank
        dist.all_reduce(t, op=dist.ReduceOp.BXOR)
        want = torch.tensor([6, 5, -1], dtype=torch.int32)
        for r in range(1, world):
            want ^= torch.tensor([6, 5, -1], dtype=torch.int32) << r
        check(t, want, "BXOR of int32")
        t = torch.tensor([True, False, rank == 0])
        dist.all_reduce(t, op=dist.ReduceOp.BOR)
        check(t, torch.tensor([True, False, True]), "BOR of bool")
        # Floating types: refused by NCCL and Gloo alike, with what to do instead.
        try:
            dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)
        except RuntimeError as e:
            assert "view(torch.uint8)" in str(e), str(e)
            assert type(e).__name__ == "InvalidArgumentError", type(e)
        else:
            raise AssertionError("BAND of float32 was expected to be refused")
    return run


def _inference_mode():
    # Lightning validates under torch.inference_mode(), and torchmetrics all_gathers there:
    # results copied back into inference tensors by tandem's worker thread (get_future()
    # hands the call to it) must be written in inference mode too.
    def run(rank, world):
        with torch.inference_mode():
            outs = [torch.zeros(4, 2)[:, 0] for _ in range(world)]  # not adjacent: copied back
            w = dist.all_gather(outs, torch.full((4,), float(rank)), async_op=True)
            w.get_future()
            w.wait()
            for r in range(world):
                check(outs[r], torch.full((4,), float(r)), f"inference-mode all_gather block {r}")
            t = torch.ones(6, 2)[:, 1]  # not contiguous: copied back
            w = dist.all_reduce(t, async_op=True)
            w.get_future()
            w.wait()
            check(t, torch.full((6,), float(world)), "inference-mode all_reduce")
    return run


def _subgroup():
    def run(rank, world):
        members = [r for r in range(world) if r % 2 == 0]
        g = dist.new_group(members, backend="tandem")
        odd = dist.new_group([r for r in range(world) if r % 2 == 1], backend="tandem")
        if rank in members:
            t = torch.tensor([float(rank)])
            dist.all_reduce(t, group=g)
            check(t, torch.tensor([float(sum(members))]), "all_reduce in new_group(even ranks)")
            b = torch.tensor([float(rank)])
            dist.broadcast(b, src=members[-1], group=g)  # global rank as src
            check(b, torch.tensor([float(members[-1])]), "broadcast in a subgroup")
        else:
            t = torch.tensor([1.0])
            dist.all_reduce(t, group=odd)
            check(t, torch.tensor([float(len(range(1, world, 2)))]), "all_reduce in the odd group")
        dist.barrier()
    return run


def _all_gather_coalesced():
    def run(rank, world):
        # outputs[r][i] is rank r's input i, any shapes, one exchange.
        ins = [values(rank, 5, torch.float32), values(rank, 6, torch.float32).view(3, 2),
               values(rank, 0, torch.float32), values(rank, 1031, torch.float32)]
        outs = [[torch.empty_like(t) for t in ins] for _ in range(world)]
        dist.all_gather_coalesced(outs, ins)
        for r in range(world):
            for i, t in enumerate(ins):
                check(outs[r][i], values(r, t.numel(), t.dtype).view(t.shape),
                      f"all_gather_coalesced rank {r} input {i}")
        # torch.distributed's function takes one dtype; the backend takes any mix.
        ins = [values(rank, 5, torch.float32), values(rank, 3, torch.int64).view(3, 1),
               values(rank, 7, torch.bfloat16), values(rank, 2, torch.complex64),
               values(rank, 3, torch.bool)]
        outs = [[torch.empty_like(t) for t in ins] for _ in range(world)]
        dist.distributed_c10d._get_default_group().allgather_coalesced(outs, ins).wait()
        for r in range(world):
            for i, t in enumerate(ins):
                check(outs[r][i], values(r, t.numel(), t.dtype).view(t.shape),
                      f"allgather_coalesced of mixed dtypes, rank {r} input {i}")
    return run


def _coalesced_tensor_pairs(world_op):
    def run(rank, world):
        pg = dist.distributed_c10d._get_default_group()
        # all_gather_into_tensor and reduce_scatter_tensor inside _coalescing_manager: torch
        # hands the whole block to allgather_into_tensor_coalesced / reduce_scatter_tensor_
        # coalesced at its end.
        dtypes = (torch.float32, torch.bfloat16, torch.int32)
        ins = [values(rank, 6, dt) for dt in dtypes]
        outs = [torch.empty(world * 6, dtype=dt) for dt in dtypes]
        with dist.distributed_c10d._coalescing_manager(async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        cm.wait()
        for o, dt in zip(outs, dtypes):
            want = torch.cat([values(r, 6, dt) for r in range(world)])
            check(o, want, f"all_gather_into_tensor coalesced {dt}")
        dtypes = (torch.float32, torch.bfloat16) + (
            (torch.int32,) if world_op == "SUM" else (torch.float64,))
        big = [torch.cat([values(rank + k, 4, dt) for k in range(world)]) for dt in dtypes]
        small = [torch.empty(4, dtype=dt) for dt in dtypes]
        with dist.distributed_c10d._coalescing_manager():
            for o, i in zip(small, big):
                dist.reduce_scatter_tensor(o, i, op=OPS[world_op])
        for o, dt in zip(small, dtypes):
            want = torch.stack([values(r + rank, 4, dt).to(torch.float64)
                                for r in range(world)]).sum(0)
            if world_op == "AVG":
                want = want / world
            check(o, want.to(dt), f"reduce_scatter_tensor coalesced {world_op} {dt}")
        # The backend's entry points themselves (what functional collectives call).
        outs2 = [torch.empty(world * 3), torch.empty(world * 2, dtype=torch.float64)]
        ins2 = [values(rank, 3, torch.float32), values(rank, 2, torch.float64)]
        pg.allgather_into_tensor_coalesced(outs2, ins2).wait()
        check(outs2[1], torch.cat([values(r, 2, torch.float64) for r in range(world)]),
              "allgather_into_tensor_coalesced")
    return run


def _premul_sum():
    def run(rank, world):
        # PREMUL_SUM: each contribution multiplied by the factor, then summed (FSDP's divide
        # factors); a number or a one-element tensor.
        for factor in (0.25, torch.tensor([0.5], dtype=torch.float64)):
            op = dist._make_nccl_premul_sum(factor)
            f = float(factor) if isinstance(factor, float) else float(factor.item())
            for dt in (torch.float32, torch.float64, torch.bfloat16):
                sum_ = reference(world, 9, dt, "SUM").to(torch.float64)
                t = values(rank, 9, dt)
                dist.all_reduce(t, op=op)
                check(t, (sum_ * f).to(dt), f"all_reduce PREMUL_SUM({f}) {dt}")
                t = values(rank, 9, dt)
                dist.reduce(t, dst=world - 1, op=op)
                if rank == world - 1:
                    check(t, (sum_ * f).to(dt), f"reduce PREMUL_SUM({f}) {dt}")
                else:  # a copy was scaled, not the caller's tensor
                    check(t, values(rank, 9, dt), f"reduce PREMUL_SUM leaves rank {rank}'s input")
                src = torch.cat([values(rank + k, 3, dt) for k in range(world)])
                before = src.clone()
                out = torch.empty(3, dtype=dt)
                dist.reduce_scatter_tensor(out, src, op=op)
                want = torch.stack([values(r + rank, 3, dt).to(torch.float64)
                                    for r in range(world)]).sum(0) * f
                check(out, want.to(dt), f"reduce_scatter_tensor PREMUL_SUM({f}) {dt}")
                check(src, before, "reduce_scatter_tensor PREMUL_SUM leaves the input")
        try:
            dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0))
        except RuntimeError as e:
            assert "PREMUL_SUM of Int tensors is refused by NCCL and Gloo" in str(e), str(e)
        else:
            raise AssertionError("PREMUL_SUM of int32 was expected to be refused")
    return run


def _batch_isend_irecv():
    def run(rank, world):
        # A ring both ways in one batch: torch brackets it with startCoalescing/endCoalescing
        # (supports_coalescing) and returns one Work for the whole block.
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        assert dist.distributed_c10d._get_default_group()._get_backend(
            torch.device("cpu")).supports_coalescing
        for n in (1, 1031, 70000):
            to_next, to_prev = values(rank, n, torch.float32), values(rank + 100, n, torch.float32)
            from_prev, from_next = torch.empty(n), torch.empty(n)
            ops = [dist.P2POp(dist.isend, to_next, nxt), dist.P2POp(dist.irecv, from_prev, prv),
                   dist.P2POp(dist.isend, to_prev, prv), dist.P2POp(dist.irecv, from_next, nxt)]
            works = dist.batch_isend_irecv(ops)
            assert len(works) == 1, f"{len(works)} works for one coalesced block"
            works[0].wait()
            check(from_prev, values(prv, n, torch.float32), f"batch_isend_irecv from prev {n}")
            check(from_next, values(nxt + 100, n, torch.float32), f"batch_isend_irecv from next {n}")
    return run


def _recv_any_source():
    def run(rank, world):
        # recv without src takes whichever rank's message comes first and returns its rank;
        # each rank's messages arrive in the order it sent them.
        for n in (3, 70000):
            if rank != 0:
                for k in range(2):
                    dist.send(torch.full((n,), float(rank * 100 + k)), dst=0, tag=3)
            else:
                seen = {}
                for _ in range(2 * (world - 1)):
                    t = torch.empty(n)
                    src = dist.recv(t, tag=3)
                    k = seen.get(src, 0)
                    seen[src] = k + 1
                    check(t, torch.full((n,), float(src * 100 + k)), f"recv without src ({src})")
                assert seen == {r: 2 for r in range(1, world)}, seen
        # irecv without src, then a collective: the message sent before the collective is
        # the receive's, not the collective's.
        if rank == world - 1:
            dist.send(torch.full((5,), 9.0), dst=0)
        if rank == 0:
            t = torch.empty(5)
            work = dist.irecv(t)
        s = torch.ones(4)
        dist.all_reduce(s)
        check(s, torch.full((4,), float(world)), "all_reduce after irecv without src")
        if rank == 0:
            work.wait()
            assert work._source_rank() == world - 1, work._source_rank()
            check(t, torch.full((5,), 9.0), "irecv without src")
        # In a subgroup, recv returns the sender's global rank.
        members = list(range(1, world))
        g = dist.new_group(members, backend="tandem")
        if world > 2 and rank == world - 1:
            dist.send(torch.full((2,), 4.0), dst=1, group=g)
        if world > 2 and rank == 1:
            t = torch.empty(2)
            assert dist.recv(t, group=g) == world - 1
            check(t, torch.full((2,), 4.0), "recv without src in a subgroup")
        dist.barrier()
    return run


def _sparse_all_reduce():
    def run(rank, world):
        # Sparse COO tensors (DDP's sparse gradients): summed into one coalesced tensor; each
        # rank's indices overlap the next rank's, and one rank has no nonzeros at all.
        def mine(r, dtype):
            if r == 1:
                return torch.sparse_coo_tensor(torch.empty(2, 0, dtype=torch.long),
                                               torch.empty(0, 3, dtype=dtype), (6, 5, 3))
            idx = torch.tensor([[r % 6, (r + 1) % 6, (r + 1) % 6], [0, 2, 4]])
            val = torch.arange(9, dtype=dtype).view(3, 3) + 10 * r
            return torch.sparse_coo_tensor(idx, val, (6, 5, 3))
        for dtype in (torch.float32, torch.float64, torch.int64):
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
                if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
                    continue
                t = mine(rank, dtype)
                dist.all_reduce(t, op=op)
                want = sum(mine(r, dtype).to_dense() for r in range(world))
                if op == dist.ReduceOp.AVG:
                    want = want / world
                assert t.is_sparse, "the result is not sparse"
                check(t.to_dense(), want, f"sparse all_reduce {op} {dtype}")
        try:
            dist.all_reduce(mine(rank, torch.float32), op=dist.ReduceOp.MAX)
        except RuntimeError as e:
            assert "summed (SUM) or averaged (AVG)" in str(e), str(e)
        else:
            raise AssertionError("sparse all_reduce with MAX was expected to be refused")
    return run


def _group_management():
    def run(rank, world):
        pg = dist.distributed_c10d._get_default_group()
        backend = pg._get_backend(torch.device("cpu"))
        assert backend.supports_splitting
        # set_timeout: the calls made afterwards run under the new timeout.
        pg.set_timeout(datetime.timedelta(seconds=45))
        t = torch.ones(3)
        dist.all_reduce(t)
        check(t, torch.full((3,), float(world)), "all_reduce after set_timeout")
        pg.set_timeout(datetime.timedelta(seconds=60))
        # split_group (torch's dist.split_group asks for an accelerator; the process group's
        # own method does not): ranks 0 and 1 get a group, the others None. The child's
        # options are the parent's (getBackendOptions) with the timeout given here.
        sub = pg.split_group([0, 1], timeout=datetime.timedelta(seconds=30),
                             group_name=f"tandem_split_{world}")
        if rank in (0, 1):
            assert sub is not None and sub.size() == 2 and sub.rank() == rank
            t = torch.full((4,), float(rank + 1))
            sub.allreduce([t]).wait()
            check(t, torch.full((4,), 3.0), "all_reduce in a split group")
            sub.shutdown()
        else:
            assert sub is None, "a rank outside split_group's ranks got a group"
        # merge_remote_group: a group of every rank over a store they share, each rank at
        # the place the store gave it.
        store = dist.PrefixStore(f"tandem_merge_{world}", dist.distributed_c10d._get_default_store())
        merged = pg.merge_remote_group(store, world, datetime.timedelta(seconds=30),
                                       group_name=f"tandem_merged_{world}")
        places = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
        merged.allgather([places], [torch.tensor([rank])]).wait()
        assert sorted(int(p) for p in places) == list(range(world)), places
        merged.shutdown()
        # shrink_group asks supports_shrinking, then the backend's shrink on the remaining
        # ranks only: a healthy group without its last rank, renumbered in order; the parent
        # stays usable. A rank that excludes itself is refused.
        assert backend.supports_shrinking
        if rank != world - 1:
            small = backend.shrink([world - 1])
            assert (small.rank(), small.size()) == (rank, world - 1)
            t = torch.ones(2)
            small.allreduce([t]).wait()
            check(t, torch.full((2,), float(world - 1)), "all_reduce on the shrunk backend")
            small.shutdown()
        try:
            backend.shrink([rank])
        except RuntimeError as e:
            assert "excludes itself" in str(e), str(e)
        else:
            raise AssertionError("a shrink excluding this rank was expected to be refused")
        # What only ProcessGroupNCCL has: each refusal names what does the same here (torch
        # itself refuses completion hooks for any other backend: "Only ProcessGrouppNCCL
        # supports onCompletion hook").
        for call, hint in ((pg._wait_for_pending_works, "barrier()"),
                           (pg._enable_collectives_timing, "TANDEM_TRACE")):
            try:
                call()
            except RuntimeError as e:
                assert hint in str(e), str(e)
            else:
                raise AssertionError(f"expected a refusal naming {hint}")
        dist.barrier()
    return run


def all_cases():
    cases = {}
    for dt in DTYPES:
        for op in OPS:
            for n in SIZES:
                cases[f"all_reduce-{op}-{dt}-{n}"] = _all_reduce(dt, op, n)
        for n in SIZES:
            cases[f"broadcast-{dt}-{n}-root0"] = _broadcast(dt, n, False)
            cases[f"all_gather-{dt}-{n}"] = _all_gather(dt, n)
            cases[f"gather_scatter-{dt}-{n}"] = _gather_scatter(dt, n)
        cases[f"broadcast-{dt}-7-rootlast"] = _broadcast(dt, 7, True)
        for op in OPS:
            if supported(DTYPES[dt], op):
                cases[f"reduce-{op}-{dt}-7"] = _reduce(dt, op, 7)
                for n in (0, 1, 5):
                    cases[f"reduce_scatter-{op}-{dt}-{n}"] = _reduce_scatter(dt, op, n)
        cases[f"all_to_all-{dt}-even"] = _all_to_all(dt, False)
        cases[f"all_to_all-{dt}-uneven"] = _all_to_all(dt, True)
        for n in (0, 1, 1031):
            cases[f"send_recv-{dt}-{n}"] = _send_recv(dt, n)
    cases["non_contiguous"] = _non_contiguous()
    cases["int16_moves"] = _int16_moves()
    cases["lists_and_coalesced"] = _lists_and_coalesced()
    cases["async_work"] = _async_work()
    cases["bitwise"] = _bitwise()
    cases["inference_mode"] = _inference_mode()
    cases["subgroup"] = _subgroup()
    cases["all_gather_coalesced"] = _all_gather_coalesced()
    for op in ("SUM", "AVG"):
        cases[f"coalesced_tensor_pairs-{op}"] = _coalesced_tensor_pairs(op)
    cases["premul_sum"] = _premul_sum()
    cases["batch_isend_irecv"] = _batch_isend_irecv()
    cases["recv_any_source"] = _recv_any_source()
    cases["sparse_all_reduce"] = _sparse_all_reduce()
    cases["group_management"] = _group_management()
    return cases
