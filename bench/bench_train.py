#!/usr/bin/env python3
"""bench_train.py: one MoE training step (forward + backward) on the
mega-MoE kernels against torch autograd through torch._grouped_mm.

In one run on one GPU, per shape (Qwen3-30B-A3B, DeepSeek-V3) and T:
  1. the reference: torch autograd through ref_moe_train below, the
     path torchtitan's MoE takes in bf16 (sort the (token, slot) pairs by
     expert, gather x, torch._grouped_mm with offsets for W1, SwiGLU,
     grouped mm for W2, scale by the routing weights, index_add back;
     no padding of the experts' groups); its step y = f(x), y.backward(dy)
     gives dx, dW1, dW2 (bf16, the parameters' dtype) and d(weights);
  2. headroom through the lower-level path: Moe.forward_grid then
     Moe.backward_grid on the whole device (the barrier kernel, clusters
     of 2 for the forward), g and u kept by the forward for the backward
     (gate_up, as headroom.nn does when training) with dW in bf16 and in
     fp32, and beside it g and u recomputed by the backward (dW bf16);
  3. headroom through the module: headroom.nn.MegaMoE (its parameters
     the same weights), y = moe(x, ids, weights), y.backward(dy), on the
     lease's grid (no daemon: the process's fail-safe lease, full grid
     unless HEADROOM_ALLOW_FULL_GRID / DG_MEGA_MOE_SM_HEADROOM are set);
each captured once as a CUDA graph and replayed (eager where a capture
fails: the table says which), timed as the median of per-rep CUDA events
with a head start for the host (bench_moe.median_ms). Forward alone is
timed the same way; backward = step - forward.

Reported per cell: ms per step each and the ratio, the forward's and
backward's TFLOP/s, the memory the forward keeps for the backward
(torch.cuda.memory_allocated after an eager forward with grad, less
before and less y; for headroom also the context's workspace, which
the C library allocates outside torch), and the relative L2 difference
of each gradient from torch's (a sanity check: torch rounds GEMM1's
output to bf16, the kernel keeps it fp32, so ~1e-2 is expected).
FLOPs: P = T k pairs; forward 6 P H I; backward 12 P H I as autograd
does it and as the kernel does reading g and u (16 P H I recomputing
them); the table's TFLOP/s count the work each side executes, and "step
model TFLOP/s" 18 P H I for both.

    python3 bench/bench_train.py --lib build/lib/libheadroom_moe.so --out FILE

Without a GPU (or PyTorch, or torch._grouped_mm) it says it needs one
and exits 0, measuring nothing.
"""
import argparse
import datetime
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_common  # noqa: E402  (beside this script)
from bench_common import routing  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:                   # the reference needs it; the CLI says so
    torch = F = None

SHAPES = {
    # name: (E, H, I, k), as bench_moe.py
    "qwen3-30b-a3b": (128, 2048, 768, 8),
    "deepseek-v3": (256, 7168, 2048, 8),
}
DEFAULT_TOKENS = "1024,4096,8192,16384"


# ---- the reference ------------------------------------------------------


def ref_moe_train(x, ids, w, w1, w2):
    """y [T, H] of the MoE with the routing given, in differentiable torch
    ops: x [T, H], ids [T, k] (every id in [0, E)), w [T, k] (fp32; rounded
    to x's dtype where it scales the rows, as bench_moe.ref_moe does),
    w1 [E, 2I, H] (gate rows, then up rows), w2 [E, H, I]. Autograd of it
    gives dx, dW1, dW2 and dw. The pairs are sorted by expert (stably:
    pair order within an expert), each expert's contiguous group taken by
    torch._grouped_mm through cumulative offsets; an expert without pairs
    is an empty group. Any device and dtype _grouped_mm takes (CUDA: bf16;
    CPU: also fp32, strides multiples of 16 bytes)."""
    T, k = ids.shape
    E, I2, H = w1.shape
    I = I2 // 2
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    tok = order // k
    # scatter_add_, not bincount: a fixed-size result, so no host sync and
    # the step stays capturable in a CUDA graph.
    counts = torch.zeros(E, dtype=torch.int64, device=x.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    h = torch._grouped_mm(x[tok], w1.transpose(-2, -1), offs=offs)
    a = F.silu(h[:, :I]) * h[:, I:]
    o = torch._grouped_mm(a, w2.transpose(-2, -1), offs=offs)
    o = o * w.reshape(-1)[order].unsqueeze(1).to(o.dtype)
    return torch.zeros_like(x).index_add(0, tok, o)


# ---- helpers ---------------------------------------------------------------


def rel_l2(a, b):
    """||a - b|| / ||b|| in fp64."""
    a, b = a.double(), b.double()
    den = b.norm().item()
    num = (a - b).norm().item()
    return num / den if den > 0 else num


def capture(fn, reset=None, warmup=2):
    """(graph, fn's output) after warmup calls on a side stream; raises
    what the capture raised. reset() (then the allocator's cache emptied)
    before the capture drops what the warmup left, the gradients: memory
    the capture cannot give back, which DeepSeek-V3 could not spare."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if reset is not None:
        reset()
    torch.cuda.empty_cache()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    torch.cuda.synchronize()
    return g, out


def timed(bm, fn, reps, use_graph, reset=None):
    """(median ms, "graph" or "eager: why", fn's output of the last call)."""
    how = "graph"
    if use_graph:
        try:
            g, out = capture(fn, reset)
            ms = bm.median_ms(lambda i: g.replay(), reps, 1)
            torch.cuda.synchronize()
            del g
            return ms, how, out
        except Exception as e:                 # noqa: BLE001 (reported)
            torch.cuda.synchronize()
            how = "eager (capture failed: %s)" % str(e).splitlines()[0][:120]
    else:
        how = "eager"
    out = [None]

    def run(i):
        out[0] = fn()
    ms = bm.median_ms(run, reps, 1)
    torch.cuda.synchronize()
    return ms, how, out[0]


def kept_bytes(fwd, y_given=False):
    """What an eager forward leaves allocated, less y: what autograd keeps
    for the backward (torch's caching allocator only). And the forward's
    peak above the start. y_given: fwd writes a y allocated before."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = fwd()
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - base
    if not y_given:
        kept -= y.numel() * y.element_size()
    peak = torch.cuda.max_memory_allocated() - base
    del y
    torch.cuda.synchronize()
    return kept, peak


def fit_experts(E, H, I, k, T, free):
    """E, or fewer (halved) when one phase would not fit in `free` bytes:
    the weights, then the larger of torch's step (its bf16 weight grads and
    the activations autograd keeps and their grads, generously) and ours
    with fp32 dW (and the backward's workspace)."""
    def need(e):
        w = 3 * e * H * I * 2
        P = T * k
        torch_step = w + w + P * (6 * H + 8 * I) * 2 * 2
        ours = w + 2 * w + P * (4 * I + 4 + I // 16) + 2 * P * (2 * I) * 4 + 8 * T * H * 2
        return max(torch_step, ours) + 4 * T * H * 2
    e = E
    while e > 2 * k and need(e) > 0.9 * free:
        e //= 2
    return e


# ---- one shape ---------------------------------------------------------------


def bench_shape(bm, headroom, name, tokens, opt, rows, notes):
    E0, H, I, k = SHAPES[name]
    free = torch.cuda.mem_get_info()[0]
    E = fit_experts(E0, H, I, k, max(tokens), free)
    if E != E0:
        notes.append("%s: %d experts instead of %d: the weights and gradients of "
                     "%d did not fit in the %.0f GiB free (each phase's estimate "
                     "in fit_experts)" % (name, E, E0, E0, free / 2**30))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    w1 = torch.empty(E, 2 * I, H, dtype=torch.bfloat16, device="cuda")
    w2 = torch.empty(E, H, I, dtype=torch.bfloat16, device="cuda")
    w1.uniform_(-H ** -0.5, H ** -0.5, generator=gen)
    w2.uniform_(-I ** -0.5, I ** -0.5, generator=gen)
    maxT = max(tokens)
    moe = headroom.Moe(E, H, I, k, maxT, device=torch.cuda.current_device(),
                       lib=opt.lib)
    moe.backward_prepare()
    sms = moe.sms
    mod = make_module(headroom, E, H, I, k, maxT, w1, w2, notes) if opt.module else None

    for T in tokens:
        P = T * k
        fl_fwd = 6.0 * P * H * I
        fl_bwd_auto = 12.0 * P * H * I
        fl_bwd_ours = 12.0 * P * H * I        # g and u kept by the forward
        x = (torch.rand(T, H, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
        ids, w = routing(T, E, k, gen)
        dy = ((torch.rand(T, H, generator=gen, device="cuda") * 2 - 1) * 0.1).to(torch.bfloat16)
        # The experts whose dW the table compares: the first and last few
        # with pairs (a copy of all of torch's dW would not fit beside
        # ours for DeepSeek-V3).
        used = torch.unique(ids.long()).tolist()
        sample = sorted(set(used[:3] + used[-3:]))
        r = dict(shape=name, T=T, E=E, sms=sms)

        # -- torch autograd
        xt = x.detach().requires_grad_()
        wt = w.detach().requires_grad_()
        w1t = w1.detach().requires_grad_()
        w2t = w2.detach().requires_grad_()
        leaves = (xt, wt, w1t, w2t)

        def t_fwd():
            return ref_moe_train(xt, ids, wt, w1t, w2t)

        def t_reset():
            for t in leaves:
                t.grad = None

        def t_step():
            t_reset()
            y = ref_moe_train(xt, ids, wt, w1t, w2t)
            y.backward(dy)
            return y

        r["t_kept"], r["t_peak"] = kept_bytes(t_fwd)
        with torch.no_grad():
            r["t_fwd"], r["t_how"], _ = timed(bm, t_fwd, opt.reps, not opt.eager)
        r["t_step"], how, _ = timed(bm, t_step, opt.reps, not opt.eager, t_reset)
        if how != r["t_how"]:
            r["t_how"] += " / step " + how
        ref = dict(dx=xt.grad.clone(), dw=wt.grad.clone(),
                   dw1=w1t.grad[sample].clone(), dw2=w2t.grad[sample].clone())
        for t in leaves:
            t.grad = None
        del xt, wt, w1t, w2t, leaves
        torch.cuda.empty_cache()

        # -- headroom, Moe.forward_grid + Moe.backward_grid: g and u kept by
        # the forward (gate_up, as headroom.nn does when training) with dW
        # bf16 and fp32, and recomputed by the backward with dW bf16
        y = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
        dx = torch.empty_like(y)
        dws = torch.empty(T, k, dtype=torch.float32, device="cuda")
        gu = torch.empty(P, 2 * I, dtype=torch.float32, device="cuda")

        def h_fwd(keep=True):
            moe.forward_grid(sms, x, ids, w, w1, w2, y, mode=headroom.Mode.HEADROOM,
                             cluster=2, timeout_ms=opt.timeout_ms,
                             gate_up=gu if keep else None)
            return y

        r["h_ws"] = moe.workspace_bytes
        r["h_fwd"], r["h_how"], _ = timed(bm, h_fwd, opt.reps, not opt.eager)
        moe.sync()
        for dt, key, keep in ((torch.bfloat16, "h16", True), (torch.float32, "h32", True),
                              (torch.bfloat16, "h16r", False)):
            dw1 = torch.empty(E, 2 * I, H, dtype=dt, device="cuda")
            dw2 = torch.empty(E, H, I, dtype=dt, device="cuda")

            def h_step():
                h_fwd(keep)
                moe.backward_grid(sms, headroom.Mode.HEADROOM, x, ids, w, w1, w2,
                                  dy, dx, dw1, dw2, dws, timeout_ms=opt.timeout_ms,
                                  gate_up=gu if keep else None)
                return y

            for t in (dx, dw1, dw2, dws):
                t.fill_(float("nan"))
            r[key], how, _ = timed(bm, h_step, opt.reps, not opt.eager)
            moe.sync()                                # raises on any failure
            if how != r["h_how"]:
                r["h_how"] += " / step " + how
            r[key + "_err"] = errors(ref, sample, dx, dws, dw1, dw2)
            del dw1, dw2
            torch.cuda.empty_cache()
        # kept for the backward: the inputs and gate_up (the C library's
        # workspace, outside torch, is r["h_ws"]); the module's measured
        # figure replaces it where the module ran
        r["h_kept"] = gu.numel() * gu.element_size()
        del y, dx, dws, gu

        # -- headroom through headroom.nn.MegaMoE and autograd
        if mod is not None:
            module_cell(mod, x, ids, w, dy, ref, sample, opt, r, bm)

        r.update(fl_fwd=fl_fwd, fl_bwd_auto=fl_bwd_auto, fl_bwd_ours=fl_bwd_ours,
                 fl_model=fl_fwd + fl_bwd_auto)
        rows.append(r)
        print_row(r)
        del ref, x, ids, w, dy
        torch.cuda.empty_cache()
    moe.close()
    del mod, w1, w2
    torch.cuda.empty_cache()


def errors(ref, sample, dx, dws, dw1, dw2):
    return dict(dx=rel_l2(dx, ref["dx"]), dw=rel_l2(dws, ref["dw"]),
                dw1=rel_l2(dw1[sample], ref["dw1"]), dw2=rel_l2(dw2[sample], ref["dw2"]),
                nan=bool(torch.isnan(dx).any() or torch.isnan(dws).any() or
                         torch.isnan(dw1).any() or torch.isnan(dw2).any()))


def make_module(headroom, E, H, I, k, maxT, w1, w2, notes):
    """A MegaMoE whose parameters are w1 and w2 themselves (the storage
    shared: a second copy of DeepSeek-V3's weights would not fit), or None
    with a note when headroom.nn is not there."""
    try:
        import headroom.nn as hnn
    except Exception as e:                     # noqa: BLE001 (reported)
        notes.append("module path left out: import headroom.nn: %s" % e)
        return None
    try:
        mod = hnn.MegaMoE(E, H, I, k, maxT, device="meta")
        mod.w1 = torch.nn.Parameter(w1.detach())
        mod.w2 = torch.nn.Parameter(w2.detach())
        mod.prepare()
        return mod
    except Exception as e:                     # noqa: BLE001 (reported)
        notes.append("module path left out: headroom.nn.MegaMoE: %s" % e)
        return None


def module_cell(mod, x, ids, w, dy, ref, sample, opt, r, bm):
    xm = x.detach().requires_grad_()
    wm = w.detach().requires_grad_()
    leaves = (xm, wm, mod.w1, mod.w2)

    def m_fwd():
        return mod(xm, ids, wm)

    def m_reset():
        for t in leaves:
            t.grad = None

    def m_step():
        m_reset()
        y = mod(xm, ids, wm)
        y.backward(dy)
        return y

    try:
        r["m_kept"], _ = kept_bytes(m_fwd)
        with torch.no_grad():
            r["m_fwd"], r["m_how"], _ = timed(bm, m_fwd, opt.reps, not opt.eager)
        r["m_step"], how, _ = timed(bm, m_step, opt.reps, not opt.eager, m_reset)
        mod.check()
        if how != r["m_how"]:
            r["m_how"] += " / step " + how
        r["m_grid"] = mod.last_grid
        r["m_err"] = errors(ref, sample, xm.grad, wm.grad, mod.w1.grad, mod.w2.grad)
    except Exception as e:                     # noqa: BLE001 (reported)
        r["m_fail"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160])
    for t in leaves:
        t.grad = None


def fmt_ms(v):
    return "-" if v is None else "%.3f" % v


def tflops(fl, ms):
    return "-" if not ms or ms <= 0 else "%.0f" % (fl / (ms * 1e-3) / 1e12)


def print_row(r):
    line = ("%-14s T=%-5d torch %8.3f ms (fwd %.3f)  headroom bf16 dW %8.3f ms "
            "(fwd %.3f) x%.2f  fp32 dW %8.3f ms"
            % (r["shape"], r["T"], r["t_step"], r["t_fwd"], r["h16"], r["h_fwd"],
               r["t_step"] / r["h16"], r["h32"]))
    line += "  recomputing g, u %8.3f ms" % r["h16r"]
    if "m_step" in r:
        line += "  module %8.3f ms (grid %s)" % (r["m_step"], r.get("m_grid"))
    elif "m_fail" in r:
        line += "  module FAILED: %s" % r["m_fail"]
    e = r["h16_err"]
    line += ("  kept torch %.0f MiB, headroom %.0f MiB (+ %.0f MiB workspace); "
             "rel diff dx %.1e dW1 %.1e dW2 %.1e dw %.1e%s"
             % (r["t_kept"] / 2**20, r["h_kept"] / 2**20, r["h_ws"] / 2**20,
                e["dx"], e["dw1"], e["dw2"], e["dw"], "  NaN!" if e["nan"] else ""))
    print(line, flush=True)


def table(rows, notes, opt, bm, prop):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# MoE training step: the mega-MoE kernels against torch autograd (%s)" % now,
        "",
        "- machine: %s, %d SMs; torch %s" % (bm.machine(), prop.multi_processor_count,
                                           torch.__version__),
        "- command: `%s` (`make bench-train`, and `make bench-gpu` after its "
        "forward table, run this script); commit %s" % (" ".join(["python3"] + sys.argv),
                                                       bench_common.commit()),
        "- step = forward + backward of one MoE layer, routing given (k distinct "
        "experts per token, uniform), dy uniform; median of %d per-rep CUDA events, "
        "each side replaying one CUDA graph of its step (\"how\" says where a "
        "capture failed and it ran eager)" % opt.reps,
        "- torch: autograd through `ref_moe_train` (bench/bench_train.py): sort "
        "pairs by expert, gather x, `torch._grouped_mm` with offsets for W1, "
        "SwiGLU, `_grouped_mm` for W2, scale by the weights, `index_add` back "
        "(torchtitan's bf16 path, no group padding); dW bf16",
        "- headroom: `Moe.forward_grid` (barrier kernel, all SMs, clusters of 2) + "
        "`Moe.backward_grid` (all SMs), g and u kept by the forward for the backward "
        "(`gate_up`, what headroom.nn does when training), dW bf16 and fp32 (one fp32 "
        "sum per element either way, rounded once for bf16); beside it the same step "
        "with g and u recomputed by the backward (nothing kept); module: "
        "`headroom.nn.MegaMoE` + autograd on the lease's grid (column `grid`)",
        "- FLOPs, P = T k: forward 6 P H I; backward 12 P H I (autograd, and the "
        "kernel reading g and u; 16 P H I recomputing them); fwd/bwd TFLOP/s count "
        "what each side executes (bwd ms = step - fwd); model TFLOP/s = 18 P H I / "
        "step for both",
        "- kept = memory_allocated after an eager forward with grad, less before and "
        "less y (torch's allocator: the module's; gate_up's size where the module did "
        "not run); headroom's context workspace (forward + backward, cudaMalloc'd by "
        "the C library, sized for max_tokens = %d) is its own column"
        % max(int(t) for t in opt.tokens.split(",")),
        "- rel diff: ||headroom - torch|| / ||torch|| of dx, dW1, dW2 (the experts "
        "sampled: the first and last three with pairs) and d(weights); a sanity check, "
        "not the test (tests/gpu/test_moe_backward.c checks the kernel against the CPU "
        "reference): torch rounds GEMM1's output to bf16, the kernel does not",
    ]
    lines += ["- " + n for n in notes]
    lines += [
        "",
        "| shape | T | torch step ms | headroom step ms (dW bf16) | torch / headroom "
        "| headroom step ms, g u recomputed (dW bf16) "
        "| headroom step ms (dW fp32) | module step ms | module grid "
        "| torch fwd ms | headroom fwd ms | torch fwd TFLOP/s | headroom fwd TFLOP/s "
        "| torch bwd TFLOP/s | headroom bwd TFLOP/s | model TFLOP/s torch / headroom "
        "| kept torch MiB | kept headroom MiB | headroom workspace MiB "
        "| rel diff dx / dW1 / dW2 / dw (bf16 dW) | how (torch; headroom; module) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        e = r["h16_err"]
        tb = r["t_step"] - r["t_fwd"]
        hb = r["h16"] - r["h_fwd"]
        mod_ms = fmt_ms(r.get("m_step")) if "m_fail" not in r else "failed"
        kept_h = r["h_kept"] if "m_kept" not in r else r["m_kept"]
        lines.append(
            "| %s%s | %d | %.3f | %.3f | %.2fx | %.3f | %.3f | %s | %s | %.3f | %.3f | %s | %s "
            "| %s | %s | %s / %s | %.0f | %.0f | %.0f | %.1e / %.1e / %.1e / %.1e%s "
            "| %s; %s; %s |"
            % (r["shape"], "" if r["E"] == SHAPES[r["shape"]][0] else " (E=%d)" % r["E"],
               r["T"], r["t_step"], r["h16"], r["t_step"] / r["h16"], r["h16r"], r["h32"],
               mod_ms,
               r.get("m_grid", "-"), r["t_fwd"], r["h_fwd"],
               tflops(r["fl_fwd"], r["t_fwd"]), tflops(r["fl_fwd"], r["h_fwd"]),
               tflops(r["fl_bwd_auto"], tb), tflops(r["fl_bwd_ours"], hb),
               tflops(r["fl_model"], r["t_step"]), tflops(r["fl_model"], r["h16"]),
               r["t_kept"] / 2**20, kept_h / 2**20, r["h_ws"] / 2**20,
               e["dx"], e["dw1"], e["dw2"], e["dw"], " NaN" if e["nan"] else "",
               r["t_how"], r["h_how"], r.get("m_how", r.get("m_fail", "-"))))
    if any("m_err" in r for r in rows):
        lines += ["", "The module's gradients against torch's (rel diff dx / dW1 / dW2 / dw):",
                  ""]
        for r in rows:
            if "m_err" in r:
                e = r["m_err"]
                lines.append("- %s T=%d: %.1e / %.1e / %.1e / %.1e%s"
                             % (r["shape"], r["T"], e["dx"], e["dw1"], e["dw2"], e["dw"],
                                " NaN" if e["nan"] else ""))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build/lib/libheadroom_moe.so"),
                    help="libheadroom_moe.so (also what headroom.nn loads)")
    ap.add_argument("--out", help="write the markdown table here too")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--tokens", default=DEFAULT_TOKENS)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--timeout-ms", type=int, default=10000,
                    help="each barrier's wait bound in headroom's launches")
    ap.add_argument("--eager", action="store_true",
                    help="no CUDA graphs on either side")
    ap.add_argument("--no-module", dest="module", action="store_false",
                    help="leave out headroom.nn.MegaMoE")
    opt = ap.parse_args()

    bench_common.check_gpu("bench_train.py")
    opt.lib = os.path.abspath(opt.lib)
    if not os.path.exists(opt.lib):
        sys.exit("bench_train.py: %s is not built (make kernels)" % opt.lib)
    # headroom.nn finds the same library; its fail-safe lease (no daemon)
    # gives the module the full grid, as the lower-level path has, unless
    # the caller set these.
    os.environ.setdefault("HEADROOM_MOE_LIB", opt.lib)
    os.environ.setdefault("HEADROOM_ALLOW_FULL_GRID", "1")
    os.environ.setdefault("DG_MEGA_MOE_SM_HEADROOM", "0")
    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.path.insert(0, HERE)
    import headroom
    import bench_moe as bm

    torch.manual_seed(0)
    prop = torch.cuda.get_device_properties(0)
    torch.cuda.synchronize()
    set_aside = bm.l2_set_aside_reset()
    notes = []
    if set_aside is not None and set_aside[1]:
        notes.append("a persisting-L2 set-aside of %d bytes is in force: it slows the "
                     "kernels" % set_aside[1])
    tokens = [int(t) for t in opt.tokens.split(",")]
    print("%s; %d SMs; torch %s" % (bm.machine(), prop.multi_processor_count,
                                    torch.__version__), flush=True)
    rows = []
    for name in opt.shapes.split(","):
        bench_shape(bm, headroom, name, tokens, opt, rows, notes)
    bench_common.emit(table(rows, notes, opt, bm, prop), opt.out)


if __name__ == "__main__":
    main()
