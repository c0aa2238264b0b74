"""headroom.ep_reference: the expert-parallel MoE in plain torch, the way
trainers run it today (torchtitan's design), for comparisons: the CPU path
of headroom.nn's EP ops and the baseline of bench/bench_ep.py.

Rank r of R holds experts r E/R .. (r+1) E/R - 1 (w1 [E/R, 2I, H], w2
[E/R, H, I]) and brings its own T tokens with GLOBAL ids. One layer:

  1. route: the (token, slot) pairs sorted by global expert (stably: pair
     order within an expert), pairs with an id outside [0, E) dropped; the
     pair counts per (rank, local expert) exchanged with an all-to-all and
     read on the host (one sync: the split sizes);
  2. dispatch: each pair's x row to the rank that owns its expert,
     all_to_all_single with those splits (a row per pair, not per token);
  3. experts: the received rows regrouped by local expert (they arrive by
     source, then expert), W1, SwiGLU, W2 as torch._grouped_mm over the
     groups on CUDA, a loop over the experts on the CPU; back in arrival
     order;
  4. combine: all_to_all_single back to the sources, each pair's
     unweighted row to its (token, slot), then y[t] = sum over j in slot
     order of w[t,j] row[t,j] in fp32, rounded once to x's dtype.

ep_moe() is one rank's layer, differentiable: the all-to-alls are an
autograd.Function around the plain collective (the backward is the
reverse all-to-all), so autograd gives dx, d(weights), dW1 and dW2 of this
rank's experts. ep_moe_backward() is the same gradient written out (no
autograd: what an op's backward can run), ep_moe_lockstep() all R ranks of
a VirtualGroup driven from one thread.

The group is a torch.distributed ProcessGroup (all_to_all_single over it:
gloo for CPU tensors, nccl for CUDA ones) or a headroom VirtualGroup with
this thread's rank (CPU tensors): then the exchange is a direct copy
between the virtual ranks' tensors, a zero-cost stand-in for the
interconnect. Every rank must call each function the same number of times
in the same order (they are collectives).
"""
from contextlib import nullcontext
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F

from .moe_ep import VirtualGroup, VirtualRank

__all__ = ["ep_moe", "ep_moe_backward", "ep_moe_lockstep", "comm_of"]


# ---- the exchange -----------------------------------------------------------


class _GroupComm:
    """all_to_all_single over a torch.distributed ProcessGroup."""

    def __init__(self, group):
        import torch.distributed as dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.nranks = dist.get_world_size(group)

    def all_to_all(self, x, out_splits: List[int], in_splits: List[int]):
        import torch.distributed as dist
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits,
                               group=self.group)
        return out

    def counts(self, c):
        """c [R, n] int64, row d for rank d -> [R, n], row s from rank s."""
        out = torch.empty_like(c)
        import torch.distributed as dist
        dist.all_to_all_single(out, c.contiguous(), group=self.group)
        return out


class _VirtualComm:
    """The exchange between the threads of a VirtualGroup: rank d's rows
    are copied from the senders' tensors (torch.cat), nothing else."""

    def __init__(self, member: VirtualRank):
        self.member = member
        self.rank = member.rank
        self.nranks = member.nranks

    def _parts(self, x):
        if x.device.type != "cpu":
            raise ValueError(
                "ep_reference: a VirtualGroup's threads exchange CPU tensors "
                "only (a CUDA tensor of another thread's stream, and "
                "autograd's one CUDA thread per device, would need the "
                "streams' order); for virtual ranks on one GPU drive every "
                "rank from one thread: ep_moe_lockstep")

    def all_to_all(self, x, out_splits: List[int], in_splits: List[int]):
        self._parts(x)
        got = self.member.group.exchange(self.rank, list(x.split(in_splits)))
        for s, (t, n) in enumerate(zip(got, out_splits)):
            if t.shape[0] != n:
                raise RuntimeError("ep_reference: rank %d sent %d rows to "
                                   "rank %d, which expected %d"
                                   % (s, t.shape[0], self.rank, n))
        if not got:
            return x.new_empty((0,) + tuple(x.shape[1:]))
        return torch.cat(got)

    def counts(self, c):
        self._parts(c)
        return torch.stack(self.member.group.exchange(self.rank,
                                                      list(c.unbind(0))))


def comm_of(group, rank: Optional[int] = None):
    """The exchange of `group` for this rank: a ProcessGroup (rank, if
    given, must be this process's), a VirtualGroup with `rank`, or a
    VirtualRank; an object with rank, nranks, all_to_all and counts
    passes through."""
    if isinstance(group, (_GroupComm, _VirtualComm)):
        return group
    if isinstance(group, VirtualGroup):
        if rank is None:
            raise ValueError("a VirtualGroup needs this thread's rank")
        return _VirtualComm(group.member(rank))
    if isinstance(group, VirtualRank):
        return _VirtualComm(group)
    import torch.distributed as dist
    if dist.is_available() and isinstance(group, dist.ProcessGroup):
        c = _GroupComm(group)
        if rank is not None and rank != c.rank:
            raise ValueError("rank %d is not this process's rank in the "
                             "group (%d)" % (rank, c.rank))
        return c
    if all(hasattr(group, a) for a in ("rank", "nranks", "all_to_all",
                                        "counts")):
        return group
    raise TypeError("group must be a torch.distributed ProcessGroup or a "
                    "headroom.VirtualGroup, not %s" % type(group).__name__)


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with autograd: the gradient goes back by the
    reverse exchange (the splits swapped)."""

    @staticmethod
    def forward(ctx, x, out_splits, in_splits, comm):
        ctx.splits = (list(out_splits), list(in_splits))
        ctx.comm = comm
        return comm.all_to_all(x, list(out_splits), list(in_splits))

    @staticmethod
    def backward(ctx, dy):
        out_splits, in_splits = ctx.splits
        return (ctx.comm.all_to_all(dy.contiguous(), in_splits, out_splits),
                None, None, None)


# ---- the pieces -------------------------------------------------------------


class _Route:
    """Where this rank's pairs go: order (the kept pairs, sorted by global
    expert, as indices into the T k pairs), tok (their tokens), send[d]
    (rows to rank d), recv_se[s][e] (rows from rank s for local expert e),
    recv[s]."""

    def __init__(self, order, k, send_e, recv_e, R, El):
        self.send = [sum(send_e[d * El:(d + 1) * El]) for d in range(R)]
        self.recv_se = [recv_e[s * El:(s + 1) * El] for s in range(R)]
        self.recv = [sum(r) for r in self.recv_se]
        self.order = order[:sum(self.send)]
        self.tok = self.order // k


def _sorted_pairs(ids, E: int):
    """(order of all T k pairs by global expert, the dropped ones last;
    pair counts per expert [E])."""
    flat = ids.reshape(-1).long()
    key = torch.where((flat >= 0) & (flat < E), flat, torch.full_like(flat, E))
    order = torch.argsort(key, stable=True)
    counts = torch.zeros(E + 1, dtype=torch.int64, device=ids.device)
    counts.scatter_add_(0, key, torch.ones_like(key))
    return order, counts[:E]


def _route(ids, E: int, comm) -> _Route:
    R = comm.nranks
    El = E // R
    order, counts = _sorted_pairs(ids, E)
    sc = counts.view(R, El)
    rc = comm.counts(sc)
    both = torch.cat([sc.reshape(-1), rc.reshape(-1)]).tolist()   # the sync
    return _Route(order, ids.shape[1], both[:R * El], both[R * El:], R, El)


def _by_expert(recv_se, El: int, device):
    """Received rows arrive by source, then local expert: the permutation
    that groups them by expert (source order within one), its inverse,
    and the rows per expert."""
    R = len(recv_se)
    flat = [c for row in recv_se for c in row]
    n = sum(flat)
    per_e = [sum(recv_se[s][e] for s in range(R)) for e in range(El)]
    le = torch.arange(El, device=device).repeat(R)
    le = torch.repeat_interleave(le, torch.tensor(flat, device=device),
                                 output_size=n)
    perm = torch.argsort(le, stable=True)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n, device=device)
    return perm, inv, per_e


def _swiglu_experts(xg, per_e: Sequence[int], w1, w2):
    """Each expert's rows (xg grouped, per_e rows each) through W2 (silu(W1g
    x) * W1u x): torch._grouped_mm on CUDA, a loop over the experts
    elsewhere (or when nothing arrived)."""
    I = w1.shape[1] // 2
    if xg.is_cuda and hasattr(torch, "_grouped_mm") and xg.shape[0] > 0:
        ends = torch.tensor(per_e, device=xg.device).cumsum(0)
        offs = ends.to(torch.int32)
        h = torch._grouped_mm(xg, w1.transpose(-2, -1), offs=offs)
        a = F.silu(h[:, :I]) * h[:, I:]
        return torch._grouped_mm(a, w2.transpose(-2, -1), offs=offs)
    outs = []
    for e, xe in enumerate(xg.split(list(per_e))):
        h = xe @ w1[e].t()
        outs.append((F.silu(h[:, :I]) * h[:, I:]) @ w2[e].t())
    return torch.cat(outs)


def _experts(xr, recv_se, w1, w2):
    """The local experts' output rows, unweighted, in arrival order."""
    perm, inv, per_e = _by_expert(recv_se, w1.shape[0], xr.device)
    o = _swiglu_experts(xr.index_select(0, perm), per_e, w1, w2)
    return o.index_select(0, inv)


def _combine(ob, order, weights, T: int, k: int, out_dtype):
    """y[t] = sum over j in slot order of w[t,j] row[t,j], in fp32 (at
    least); the pairs not kept (ids outside [0, E)) contribute nothing."""
    H = ob.shape[1]
    rows = ob.new_zeros(T * k, H).index_copy(0, order, ob).view(T, k, H)
    acc_dtype = torch.promote_types(ob.dtype, torch.float32)
    acc = torch.zeros(T, H, dtype=acc_dtype, device=ob.device)
    w = weights.to(acc_dtype)
    for j in range(k):
        acc = torch.addcmul(acc, rows[:, j], w[:, j:j + 1])
    return acc.to(out_dtype)


def _shapes(x, ids, weights, w1, w2, R: int):
    if x.dim() != 2 or ids.dim() != 2 or \
            tuple(weights.shape) != tuple(ids.shape) or \
            ids.shape[0] != x.shape[0]:
        raise ValueError("x must be [T, H], topk_ids and topk_weights [T, k]; "
                         "got %s, %s, %s" % (tuple(x.shape), tuple(ids.shape),
                                             tuple(weights.shape)))
    El, I2, H = w1.shape
    if H != x.shape[1] or tuple(w2.shape) != (El, H, I2 // 2):
        raise ValueError("w1 must be [E/R, 2I, H] and w2 [E/R, H, I] with "
                         "H = %d; got %s, %s" % (x.shape[1], tuple(w1.shape),
                                                 tuple(w2.shape)))
    return El * R


# ---- one rank ---------------------------------------------------------------


def ep_moe(x, topk_ids, topk_weights, w1, w2, group,
           rank: Optional[int] = None):
    """This rank's y [T, H] of the EP layer (the module's docstring),
    differentiable: x [T, H] (T may be 0), topk_ids [T, k] GLOBAL ids,
    topk_weights [T, k], w1 [E/R, 2I, H] and w2 [E/R, H, I] this rank's
    experts (E = R E/R). Computed in the inputs' dtypes (the combine in
    fp32 at least), y in x's dtype. group: see comm_of."""
    comm = comm_of(group, rank)
    E = _shapes(x, topk_ids, topk_weights, w1, w2, comm.nranks)
    T, k = topk_ids.shape
    r = _route(topk_ids, E, comm)
    xs = x.index_select(0, r.tok)
    xr = _AllToAll.apply(xs, r.recv, r.send, comm)
    o = _experts(xr, r.recv_se, w1, w2)
    ob = _AllToAll.apply(o, r.send, r.recv, comm)
    return _combine(ob, r.order, topk_weights, T, k, x.dtype)


def expert_backward(xs, dys, w, w1e, w2e):
    """One expert's backward over its rows, as the kernel computes it
    (kernels/moe_ref.h: d(w) = <W2^T dy, a>, the SwiGLU's derivative by
    hand) in the inputs' dtype with nothing rounded: xs, dys [n, H] and w
    [n, 1] the rows' x, dy and routing weights, w1e [2I, H] and w2e [H, I]
    the expert's. Returns (dx rows [n, H], dW1 [2I, H], dW2 [H, I], d(w)
    [n]). The ops' CPU backward (headroom.nn) and the EP one share it."""
    I = w1e.shape[0] // 2
    g = xs @ w1e[:I].t()
    u = xs @ w1e[I:].t()
    s = torch.sigmoid(g)
    silu = g * s
    a = silu * u
    q = dys @ w2e                               # [n, I]: W2^T dy
    da = w * q
    du = da * silu
    dg = da * u * s * (1 + g * (1 - s))
    dw1 = torch.cat([dg.t() @ xs, du.t() @ xs])
    return dg @ w1e[:I] + du @ w1e[I:], dw1, dys.t() @ (w * a), (q * a).sum(1)


def ep_moe_backward(dy, x, topk_ids, topk_weights, w1, w2, group,
                    rank: Optional[int] = None):
    """The gradient of ep_moe for dy at y, written out (no autograd, in
    fp32, nothing rounded): (dx [T, H], dw1 [E/R, 2I, H], dw2 [E/R, H, I],
    dtopk_weights [T, k]) in the dtypes of x, w1, w2 and the weights. The
    same exchanges as the forward: each kept pair's x row, dy row and
    weight to its expert's rank, and its dx row and d(weight) back.
    Per pair, g, u = W1g x, W1u x, a = silu(g) u, q = W2^T dy:
    d(w) = <q, a>, dW2 += dy (w a)^T, and through the SwiGLU dW1 and dx
    (as kernels/moe_ref.h). An expert without pairs gets dW 0, a dropped
    pair d(w) 0."""
    f = torch.float32
    comm = comm_of(group, rank)
    E = _shapes(x, topk_ids, topk_weights, w1, w2, comm.nranks)
    T, k = topk_ids.shape
    H = x.shape[1]
    El, I2, _ = w1.shape
    I = I2 // 2
    xf, dyf, w1f, w2f = x.to(f), dy.to(f), w1.to(f), w2.to(f)
    r = _route(topk_ids, E, comm)
    wp = topk_weights.reshape(-1).to(f).index_select(0, r.order)
    payload = torch.cat([xf.index_select(0, r.tok), dyf.index_select(0, r.tok),
                         wp.unsqueeze(1)], 1)
    got = comm.all_to_all(payload, r.recv, r.send)
    perm, inv, per_e = _by_expert(r.recv_se, El, x.device)
    got = got.index_select(0, perm)
    dw1 = torch.zeros(El, I2, H, dtype=f, device=x.device)
    dw2 = torch.zeros(El, H, I, dtype=f, device=x.device)
    back = []
    for e, part in enumerate(got.split(per_e)):
        xs, dys, w = part[:, :H], part[:, H:2 * H], part[:, 2 * H:]
        dxs, dw1[e], dw2[e], dwt = expert_backward(xs, dys, w, w1f[e], w2f[e])
        back.append(torch.cat([dxs, dwt.unsqueeze(1)], 1))
    back = torch.cat(back).index_select(0, inv)
    ret = comm.all_to_all(back, r.send, r.recv)
    dx = torch.zeros(T, H, dtype=f, device=x.device)
    dx.index_add_(0, r.tok, ret[:, :H])
    dwt = torch.zeros(T * k, dtype=f, device=x.device)
    dwt.index_copy_(0, r.order, ret[:, H])
    return (dx.to(x.dtype), dw1.to(w1.dtype), dw2.to(w2.dtype),
            dwt.view(T, k).to(topk_weights.dtype))


# ---- every rank from one thread ---------------------------------------------


def ep_moe_lockstep(xs, ids, weights, w1s, w2s, streams=None) -> list:
    """ep_moe for all R virtual ranks at once, driven from this thread:
    lists of each rank's x, topk_ids, topk_weights, w1 and w2 (as
    ep_moe's) in, the list of their y out, differentiable as one graph
    (a backward over every rank's y gives every rank's gradients). The
    exchange is a direct copy between the ranks' tensors (torch.cat), the
    zero-cost stand-in for an interconnect. streams: one torch.cuda.Stream
    per rank, or None: each rank's work is issued on its own stream,
    after the streams it reads from (autograd orders the backward the same
    way). One host sync for the routing of all ranks, as ep_moe has one
    per rank."""
    R = len(xs)
    if not (len(ids) == len(weights) == len(w1s) == len(w2s) == R) or R < 1:
        raise ValueError("xs, ids, weights, w1s and w2s must be lists of one "
                         "entry per rank")
    if streams is not None and len(streams) != R:
        raise ValueError("streams must have one stream per rank (%d), got %d"
                         % (R, len(streams)))

    def on(r):
        return torch.cuda.stream(streams[r]) if streams is not None \
            else nullcontext()

    def after_all(r, tensors):
        # Rank r's stream waits for every rank's (what it reads), and the
        # tensors it reads are marked as used there for the allocator.
        if streams is None:
            return
        for s in range(R):
            if s != r:
                streams[r].wait_stream(streams[s])
        for t in tensors:
            t.record_stream(streams[r])

    E = _shapes(xs[0], ids[0], weights[0], w1s[0], w2s[0], R)
    El = E // R
    routes, sends = [], []
    for r in range(R):
        _shapes(xs[r], ids[r], weights[r], w1s[r], w2s[r], R)
        with on(r):
            order, counts = _sorted_pairs(ids[r], E)
            sends.append((order, counts.tolist()))        # the host sync
    for r in range(R):
        order, send_e = sends[r]
        recv_e = [c for s in range(R)
                  for c in sends[s][1][r * El:(r + 1) * El]]
        routes.append(_Route(order, ids[r].shape[1], send_e, recv_e, R, El))
    parts = []
    for r in range(R):
        with on(r):
            parts.append(xs[r].index_select(0, routes[r].tok)
                         .split(routes[r].send))
    outs = []
    for d in range(R):
        with on(d):
            got = [parts[s][d] for s in range(R)]
            after_all(d, got)
            o = _experts(torch.cat(got), routes[d].recv_se, w1s[d], w2s[d])
            outs.append(o.split(routes[d].recv))
    ys = []
    for s in range(R):
        with on(s):
            got = [outs[d][s] for d in range(R)]
            after_all(s, got)
            ys.append(_combine(torch.cat(got), routes[s].order, weights[s],
                               ids[s].shape[0], ids[s].shape[1], xs[s].dtype))
    return ys
