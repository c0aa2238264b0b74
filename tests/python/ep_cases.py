"""The expert-parallel CPU checks that test_nn_ep.py runs on the threads
of a VirtualGroup and, through ep_gloo_child.py, on the processes of a
gloo group: one global problem (the same on every rank, from a seed), the
float64 autograd reference of the whole model with all experts, and one
rank's results against it, as numbers the test asserts on."""
import torch

import headroom.nn as hnn
from headroom import ep_reference

E, H, I, K = 8, 256, 128, 2
MAX_TOKENS = 16


def counts_of(case, R):
    """Tokens per rank: uneven; the last rank none for "empty_last"."""
    base = [12, 7, 5, 9, 3, 8, 6, 4][:R]
    if case == "empty_last":
        base[-1] = 0
    return base


def problem(case, R, seed=0):
    """The global problem of `case` for R ranks, in fp32 holding bf16
    values: x, ids (k distinct experts a token, then some ids outside
    [0, E): -1, E, 1000), weights, w1, w2, dy, and the token counts.
    "none_to_last": no pair for the last rank's experts."""
    g = torch.Generator().manual_seed(seed)
    cnt = counts_of(case, R)
    T = sum(cnt)
    x = torch.randn(T, H, generator=g).bfloat16().float()
    ids = torch.rand(T, E, generator=g).argsort(dim=1)[:, :K].int()
    if case == "none_to_last":
        El = E // R
        last = ids >= (R - 1) * El
        ids[last] = ids[last] - El                 # the rank before's
    ids[0, K - 1] = -1
    ids[2, 0] = E
    ids[T - 1, 0] = 1000
    wts = torch.rand(T, K, generator=g) * 0.95 + 0.05
    w1 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).bfloat16().float()
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).bfloat16().float()
    dy = torch.randn(T, H, generator=g).bfloat16().float()
    return dict(x=x, ids=ids.contiguous(), wts=wts, w1=w1, w2=w2, dy=dy,
                cnt=cnt)


def reference(p):
    """y and the gradients (x, weights, w1, w2) of the whole model, by
    autograd of headroom.nn.reference_moe in float64."""
    leaves = [p[n].double().requires_grad_() for n in ("x", "wts", "w1", "w2")]
    y = hnn.reference_moe(leaves[0], p["ids"], leaves[1], leaves[2],
                          leaves[3])
    grads = torch.autograd.grad(y, leaves, p["dy"].double())
    return dict(y=y.detach(), dx=grads[0], dw=grads[1], dw1=grads[2],
                dw2=grads[3])


def rank_part(p, r, R):
    """Rank r's tokens (its rows of x, ids, weights, dy) and experts."""
    a = sum(p["cnt"][:r])
    b = a + p["cnt"][r]
    El = E // R
    e0, e1 = r * El, (r + 1) * El
    return dict(x=p["x"][a:b], ids=p["ids"][a:b], wts=p["wts"][a:b],
                dy=p["dy"][a:b], w1=p["w1"][e0:e1], w2=p["w2"][e0:e1],
                rows=(a, b), experts=(e0, e1))


def rel(a, b):
    a, b = a.double(), b.double()
    d = (a - b).norm().item()
    n = b.norm().item()
    return d / n if n > 0 else d


def ulps(a, b):
    """max |a - b| / (2^-7 |b| + tiny): at most 1 when a is b rounded to
    bf16 (one rounding of an fp32-accurate value), element by element."""
    a, b = a.double(), b.double()
    if b.numel() == 0:
        return 0.0
    tiny = 1e-6 * b.abs().max().item() + 1e-30
    return ((a - b).abs() / (b.abs() * 2.0 ** -7 + tiny)).max().item()


def run_rank(case, r, R, group, rank_arg):
    """Every check of one rank, collectively over `group` (a
    ProcessGroup, rank_arg None, or a VirtualGroup and this thread's
    rank): {name: number}. The test asserts on them."""
    p = problem(case, R)
    ref = reference(p)
    mine = rank_part(p, r, R)
    a, b = mine["rows"]
    e0, e1 = mine["experts"]
    want = dict(y=ref["y"][a:b], dx=ref["dx"][a:b], dw=ref["dw"][a:b],
                dw1=ref["dw1"][e0:e1], dw2=ref["dw2"][e0:e1])
    out = {"tokens": b - a}
    ids_all = p["ids"].long()
    out["pairs_here"] = int(((ids_all >= e0) & (ids_all < e1)).sum())

    # ep_reference.ep_moe in fp32, autograd through its all-to-alls.
    leaves = [mine[n].clone().requires_grad_() for n in ("x", "wts", "w1",
                                                         "w2")]
    y = ep_reference.ep_moe(leaves[0], mine["ids"], leaves[1], leaves[2],
                            leaves[3], group, rank_arg)
    g = torch.autograd.grad(y, leaves, mine["dy"])
    for name, got in zip(("y", "dx", "dw", "dw1", "dw2"), (y,) + g):
        out["ep_moe_" + name] = rel(got, want[name])

    # ep_reference.ep_moe_backward: the same gradient written out.
    dx, dw1, dw2, dw = ep_reference.ep_moe_backward(
        mine["dy"], mine["x"], mine["ids"], mine["wts"], mine["w1"],
        mine["w2"], group, rank_arg)
    for name, got in (("dx", dx), ("dw", dw), ("dw1", dw1), ("dw2", dw2)):
        out["backward_" + name] = rel(got, want[name])

    # The module: bf16 in, the ops' CPU path (fp32), bf16 out.
    m = hnn.MegaMoE(E, H, I, K, MAX_TOKENS, ep_group=group, ep_rank=rank_arg)
    with torch.no_grad():
        m.w1.copy_(mine["w1"])
        m.w2.copy_(mine["w2"])
    x = mine["x"].clone().requires_grad_()
    w = mine["wts"].clone().requires_grad_()
    y = m(x, mine["ids"], w)
    gx, gw1, gw2, gw = torch.autograd.grad(y, (x, m.w1, m.w2, w),
                                           mine["dy"].bfloat16())
    out["module_y_ulps"] = ulps(y, want["y"])
    out["module_dx_ulps"] = ulps(gx, want["dx"])
    out["module_dw1_ulps"] = ulps(gw1, want["dw1"])
    out["module_dw2_ulps"] = ulps(gw2, want["dw2"])
    out["module_dw"] = rel(gw, want["dw"])
    out["module_dtypes"] = [str(t.dtype) for t in (y, gx, gw1, gw)]
    # An expert without pairs: dW exactly 0; a dropped pair: d(w) 0.
    used = set(ids_all.flatten().tolist())
    idle = [e - e0 for e in range(e0, e1) if e not in used]
    out["idle_experts"] = len(idle)
    out["idle_dw_zero"] = all(bool((gw1[e] == 0).all() and (gw2[e] == 0).all())
                              for e in idle)
    bad = (mine["ids"] < 0) | (mine["ids"] >= E)
    out["dropped_pairs"] = int(bad.sum())
    out["dropped_dw_zero"] = bool((gw[bad] == 0).all())
    return out
