#!/usr/bin/env python3
"""bench_ep.py: the expert-parallel MoE layer on the EP kernel against the
plain-torch EP layer trainers run today, per rank.

Per shape (Qwen3-30B-A3B, DeepSeek-V3) and T tokens per rank, on the same
inputs (each rank its own T tokens, k distinct experts each, uniformly
over all E; each rank its E/R experts' weights):
  1. the baseline: headroom.ep_reference.ep_moe under autograd, the design
     of torchtitan's EP MoE in bf16: pairs sorted by expert, their counts
     exchanged and read on the host, all_to_all_single of the x rows,
     torch._grouped_mm over the local experts, all_to_all_single back, the
     weighted sum in slot order in fp32;
  2. headroom: headroom.nn.MegaMoE(ep_group=...) (hr_moe_ep_forward, and
     hr_moe_ep_backward under autograd where the library has it), on the
     lease's grid (no daemon: the process's fail-safe lease, the full grid
     unless HEADROOM_ALLOW_FULL_GRID / DG_MEGA_MOE_SM_HEADROOM are set).
Each is timed forward alone (no grad) and as a step, forward + backward
(y.backward(dy)): per rank, the median of per-rep CUDA events; the table
gives the slowest rank's median and the ratio baseline / headroom.

Two ways to run:
  torchrun --nproc-per-node R bench/bench_ep.py ...   R GPUs, one process
      each, an NCCL group (the baseline's all-to-alls over NCCL, the
      kernel's exchange over NVLink by CUDA IPC);
  python3 bench/bench_ep.py --virtual R ...   R virtual ranks on GPU 0:
      headroom's R ranks are threads, each on its own stream with the
      grid SMs / R (a VirtualGroup: every launch of a step resident at
      once); the baseline's ranks are driven from one thread in lockstep
      (ep_reference.ep_moe_lockstep), each rank's work on its own stream,
      and its exchange is a local copy between the ranks' tensors.

No CUDA graphs on either side: hr_moe_ep_* refuse capture (each launch is
an epoch of the group), and the baseline reads its split sizes on the
host; both are timed eager, every rank's rep started together (virtual:
behind one event after a head start for the host; torchrun: after a
barrier and a head start).

    python3 bench/bench_ep.py --virtual 2 --out FILE
    torchrun --nproc-per-node 8 bench/bench_ep.py --out FILE

Without a GPU (or PyTorch) it says it needs one and exits 0, measuring
nothing. --smoke: one tiny shape, few tokens and reps, to see it run.
"""
import argparse
import datetime
import os
import statistics
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_common  # noqa: E402  (beside this script)
from bench_common import routing, run_quiet  # noqa: E402

try:
    import torch
except ImportError:                   # the CLI says so
    torch = None

SHAPES = {
    # name: (E, H, I, k), as bench_train.py
    "qwen3-30b-a3b": (128, 2048, 768, 8),
    "deepseek-v3": (256, 7168, 2048, 8),
    "smoke": (8, 256, 128, 2),
}
DEFAULT_SHAPES = "qwen3-30b-a3b,deepseek-v3"
DEFAULT_TOKENS = "1024,4096,8192,16384"
MAX_RANKS = 8
HEAD_START_CYCLES = 20_000_000        # torch.cuda._sleep before each rep


# ---- arguments ----------------------------------------------------------------


def parse_args(argv=None):
    """The command line; --smoke replaces shapes, tokens and reps (and
    takes 2 virtual ranks unless --virtual says otherwise)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build/lib/libheadroom_moe.so"),
                    help="libheadroom_moe.so (also what headroom.nn loads)")
    ap.add_argument("--out", help="write the markdown table here too")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--tokens", default=DEFAULT_TOKENS, help="T per rank")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout-ms", type=int, default=10000,
                    help="each wait's bound in headroom's launches")
    ap.add_argument("--virtual", type=int, metavar="R",
                    help="R virtual ranks on GPU 0 (threads) instead of torchrun")
    ap.add_argument("--no-backward", dest="backward", action="store_false",
                    help="forward only on both sides")
    ap.add_argument("--commit", help="the commit to name in the header "
                    "(default: git rev-parse of this tree)")
    ap.add_argument("--smoke", action="store_true",
                    help="the tiny shape, 64 tokens a rank, 3 reps")
    opt = ap.parse_args(argv)
    if opt.smoke:
        opt.shapes, opt.tokens, opt.reps, opt.warmup = "smoke", "64", 3, 1
        if opt.virtual is None and "WORLD_SIZE" not in os.environ:
            opt.virtual = 2
    try:
        opt.token_list = sorted({int(t) for t in opt.tokens.split(",")})
    except ValueError:
        ap.error("--tokens must be a comma-separated list of integers, got %r"
                 % opt.tokens)
    if not opt.token_list or opt.token_list[0] < 1:
        ap.error("--tokens must be >= 1 each, got %r" % opt.tokens)
    opt.shape_list = opt.shapes.split(",")
    for s in opt.shape_list:
        if s not in SHAPES:
            ap.error("--shapes: unknown shape %r (known: %s)" % (s, ", ".join(SHAPES)))
    if opt.virtual is not None and not 1 <= opt.virtual <= MAX_RANKS:
        ap.error("--virtual must be 1..%d, got %d" % (MAX_RANKS, opt.virtual))
    if opt.reps < 1 or opt.warmup < 0:
        ap.error("--reps must be >= 1 and --warmup >= 0")
    for s in opt.shape_list:
        E = SHAPES[s][0]
        R = opt.virtual or int(os.environ.get("WORLD_SIZE", "1"))
        if E % R:
            ap.error("%s: %d experts do not split over %d ranks" % (s, E, R))
    return opt


def mode_of(opt, env):
    """("torchrun", R) under torchrun (WORLD_SIZE set, no --virtual),
    ("virtual", R) with --virtual, or (None, why) when neither."""
    if opt.virtual is not None:
        return "virtual", opt.virtual
    if env.get("WORLD_SIZE"):
        R = int(env["WORLD_SIZE"])
        if not 1 <= R <= MAX_RANKS:
            return None, "WORLD_SIZE %d: the EP kernel takes 1..%d ranks" % (R, MAX_RANKS)
        return "torchrun", R
    return None, ("run it under torchrun (one process per GPU, e.g. torchrun "
                  "--nproc-per-node 8 bench/bench_ep.py) or with --virtual R "
                  "(R ranks on one GPU)")


# ---- the table (pure) -------------------------------------------------------------


def fmt_ms(v):
    return "-" if v is None else "%.3f" % v


def fmt_ratio(base, ours):
    """baseline / headroom, "-" where either is missing."""
    if base is None or ours is None or ours <= 0:
        return "-"
    return "%.2fx" % (base / ours)


def fmt_rel(v):
    return "-" if v is None else "%.1e" % v


def fmt_bytes(n):
    """MiB under a GiB, GiB above; "-" for none."""
    if not n:
        return "-"
    return "%.0f MiB" % (n / 2**20) if n < 2**30 else "%.2f GiB" % (n / 2**30)


def slowest(per_rank):
    """The slowest rank's median (None when any rank has none)."""
    if not per_rank or any(v is None for v in per_rank):
        return None
    return max(per_rank)


def table(rows, notes, meta):
    """The markdown: a header from meta (date, machine, command, commit,
    mode, R, grid, reps, backward), the notes, one row per cell, then each
    rank's medians. A row: shape, E, R, T, and per side (t = baseline,
    h = headroom) lists of per-rank ms for fwd and step (None: not
    measured), rel diffs, the context's bytes a rank (hr_moe_ep_memory,
    or _backward when the step runs), or a `skipped` reason."""
    virtual = meta["mode"] == "virtual"
    lines = [
        "# Expert-parallel MoE layer: the EP kernel against plain-torch EP (%s)"
        % meta["date"],
        "",
        "- machine: %s; driver %s; torch %s" % (meta["gpu"], meta["driver"],
                                               meta["torch"]),
        "- command: `%s` (`make bench-ep`); commit %s" % (meta["command"],
                                                         meta["commit"]),
    ]
    if virtual:
        lines.append(
            "- %d virtual ranks on one GPU: headroom's ranks are threads, each "
            "on its own stream with grid %s (SMs / R: every rank's launch "
            "resident at once); the baseline's ranks are driven from one "
            "thread in lockstep (`ep_reference.ep_moe_lockstep`: autograd "
            "runs CUDA backward on one thread per device, where a blocking "
            "exchange between threads would deadlock), each rank's work on "
            "its own stream, and **its exchange is a local copy** (torch.cat "
            "between the ranks' tensors: a zero-cost stand-in for the "
            "interconnect), so the baseline's communication costs nothing "
            "here; all ranks share one GPU's SMs and memory bandwidth"
            % (meta["R"], meta["grid"]))
    else:
        lines.append(
            "- %d ranks under torchrun, one GPU each: the baseline's "
            "all_to_all_single over NCCL, headroom's exchange by CUDA IPC "
            "over NVLink; grid %s a rank (the lease's)" % (meta["R"], meta["grid"]))
    lines += [
        "- baseline: autograd through `headroom.ep_reference.ep_moe` "
        "(torchtitan's EP design in bf16: pairs sorted by expert, counts "
        "exchanged and read on the host, `all_to_all_single` of the x rows, "
        "`torch._grouped_mm` over the local experts, `all_to_all_single` "
        "back, the weighted sum in slot order in fp32); headroom: "
        "`headroom.nn.MegaMoE(ep_group=...)` under autograd "
        "(`hr_moe_ep_forward`, `hr_moe_ep_backward`)",
        "- T tokens per rank, k distinct experts each, uniform over all E; "
        "step = forward + `y.backward(dy)`; fwd under `torch.no_grad()`",
        "- timing: no CUDA graphs (`hr_moe_ep_*` refuse capture: each launch "
        "is an epoch of the group; the baseline reads its split sizes on "
        "the host), both eager with CUDA events, %d reps after %d warmup, "
        "every rank's rep started together (%s); per-rank ms = the slowest "
        "rank's median; ratio = baseline / headroom"
        % (meta["reps"], meta["warmup"],
           "behind one event after a head start" if virtual
           else "after a barrier and a head start"),
        "- rel diff: ||headroom - baseline|| / ||baseline|| over every rank "
        "(the largest): y, and dx / dW1 / d(weights) of the step; a sanity "
        "check (the baseline rounds GEMM1's output to bf16, the kernel does "
        "not)",
    ]
    if not meta["backward"]:
        lines.append("- headroom's step not measured: %s" % meta["backward_why"])
    lines += ["- " + n for n in notes]
    lines += [
        "",
        "| shape | R | T/rank | baseline fwd ms | headroom fwd ms | fwd baseline / "
        "headroom | baseline step ms | headroom step ms | step baseline / headroom "
        "| rel diff y | rel diff dx / dW1 / dw | headroom context a rank |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = r["shape"] + ("" if r["E"] == SHAPES[r["shape"]][0]
                             else " (E=%d)" % r["E"])
        if r.get("skipped"):
            lines.append("| %s | %d | %d | skipped: %s |  |  |  |  |  |  |  |  |"
                         % (name, r["R"], r["T"], r["skipped"]))
            continue
        tf, hf = slowest(r["t_fwd"]), slowest(r["h_fwd"])
        ts, hs = slowest(r["t_step"]), slowest(r["h_step"])
        grads = r.get("rel_grads")
        lines.append(
            "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
            % (name, r["R"], r["T"], fmt_ms(tf), fmt_ms(hf), fmt_ratio(tf, hf),
               fmt_ms(ts), fmt_ms(hs), fmt_ratio(ts, hs), fmt_rel(r.get("rel_y")),
               " / ".join(fmt_rel(v) for v in grads) if grads else "-",
               fmt_bytes(r.get("ctx_bytes"))))
    per = [r for r in rows if not r.get("skipped")]
    if per and per[0]["R"] > 1:
        lines += ["", "Each rank's median ms (baseline fwd; headroom fwd; "
                  "baseline step; headroom step):", ""]
        for r in per:
            lines.append("- %s T=%d: %s" % (r["shape"], r["T"], "; ".join(
                "/".join(fmt_ms(v) for v in r[k]) if r[k] else "-"
                for k in ("t_fwd", "h_fwd", "t_step", "h_step"))))
    return "\n".join(lines) + "\n"


def need_bytes(E, H, I, k, T, R, R_here, ctx_bytes):
    """A generous estimate of the device memory a cell takes on one GPU
    holding R_here of the R ranks: each rank's E/R experts' weights and
    their gradient (bf16), its context (ctx_bytes), and the larger side's
    activations: the baseline keeps, per pair, the x row sent and
    received, h, the SwiGLU output and the returned row (and about as much
    again in the backward); headroom keeps only its inputs and outputs."""
    El = E // R
    P = T * k
    weights = 2 * 3 * El * H * I * 2
    baseline = P * (8 * H + 4 * I) * 2 * 2 + T * H * 4
    io = 8 * T * H * 2
    return R_here * (weights + ctx_bytes + max(baseline, io))


# ---- helpers (GPU) ----------------------------------------------------------------


def driver():
    return run_quiet(["nvidia-smi", "-i", "0", "--query-gpu=driver_version",
                      "--format=csv,noheader"]) or "unknown"


def rank_inputs(r, E, H, k, T, device, seed):
    """Rank r's tokens: x, ids (GLOBAL, over all E), weights, dy."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 1000 + r)
    x = (torch.rand(T, H, generator=gen, device=device) * 2 - 1).to(torch.bfloat16)
    ids, w = routing(T, E, k, gen, device)
    dy = ((torch.rand(T, H, generator=gen, device=device) * 2 - 1) * 0.1).to(torch.bfloat16)
    return dict(x=x, ids=ids, w=w, dy=dy)


def rank_weights(r, El, H, I, device, seed):
    """Rank r's experts' w1 [El, 2I, H], w2 [El, H, I], as bench_train's."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 1000 + 500 + r)
    w1 = torch.empty(El, 2 * I, H, dtype=torch.bfloat16, device=device)
    w2 = torch.empty(El, H, I, dtype=torch.bfloat16, device=device)
    w1.uniform_(-H ** -0.5, H ** -0.5, generator=gen)
    w2.uniform_(-I ** -0.5, I ** -0.5, generator=gen)
    return w1, w2


def rel_l2(a, b, chunk=1 << 24):
    """||a - b|| / ||b||, in float64 a chunk of `chunk` elements at a time
    (DeepSeek-V3's dW1 is 7.5 G elements: whole in float64, 56 GiB)."""
    a, b = a.reshape(-1), b.reshape(-1)
    num = den = 0.0
    for i in range(0, b.numel(), chunk):
        bb = b[i:i + chunk].double()
        num += (a[i:i + chunk].double() - bb).square().sum().item()
        den += bb.square().sum().item()
    num, den = num ** 0.5, den ** 0.5
    return num / den if den > 0 else num


class Clock:
    """Per-rank CUDA events of every rep, and the medians of the timed
    ones (the first `warmup` are not counted)."""

    def __init__(self, R, reps, warmup):
        n = reps + warmup
        self.warmup = warmup
        self.starts = [[torch.cuda.Event(enable_timing=True) for _ in range(n)]
                       for _ in range(R)]
        self.ends = [[torch.cuda.Event(enable_timing=True) for _ in range(n)]
                     for _ in range(R)]

    def medians(self):
        return [statistics.median(s.elapsed_time(e) for s, e in
                                  list(zip(st, en))[self.warmup:])
                for st, en in zip(self.starts, self.ends)]


# ---- virtual ranks ------------------------------------------------------------------


class Virtual:
    """R ranks on GPU 0: their streams, the gate every rep starts behind,
    headroom's modules (made collectively on R threads)."""

    def __init__(self, R, headroom, hnn, opt):
        self.R = R
        self.hnn = hnn
        self.opt = opt
        self.group = headroom.VirtualGroup(R, timeout_s=120.0)
        self.streams = [torch.cuda.Stream() for _ in range(R)]
        self.gate_stream = torch.cuda.Stream()
        self.gate = torch.cuda.Event()
        self.bar = threading.Barrier(R, timeout=600)
        self.mods = None

    def on_threads(self, fn):
        """fn(r) on R threads; their results, raising the first error."""
        out = [None] * self.R

        def run(r):
            try:
                torch.cuda.set_device(0)
                out[r] = ("ok", fn(r))
            except BaseException as e:            # noqa: BLE001 (re-raised)
                self.bar.abort()
                out[r] = ("error", e)
        ts = [threading.Thread(target=run, args=(r,)) for r in range(self.R)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for kind, v in out:
            if kind == "error":
                raise v
        return [v for _, v in out]

    def make_modules(self, E, H, I, k, maxT, weights):
        hnn = self.hnn

        def make(r):
            m = hnn.MegaMoE(E, H, I, k, maxT, device="meta", ep_group=self.group,
                            ep_rank=r, timeout_ms=self.opt.timeout_ms)
            m.w1 = torch.nn.Parameter(weights[r][0].detach(),
                                      requires_grad=self.opt.backward)
            m.w2 = torch.nn.Parameter(weights[r][1].detach(),
                                      requires_grad=self.opt.backward)
            m.prepare()                            # collective
            return m
        self.mods = self.on_threads(make)

    def close(self):
        if self.mods:
            self.on_threads(lambda r: self.mods[r].close())
            self.mods = None

    def least(self, v):
        return v                               # one process, one GPU

    def open_gate(self):
        with torch.cuda.stream(self.gate_stream):
            torch.cuda._sleep(HEAD_START_CYCLES)
            self.gate.record(self.gate_stream)

    def after_inputs(self):
        # The inputs were made on this thread's stream: every rank's
        # stream runs after them.
        for s in self.streams:
            s.wait_stream(torch.cuda.current_stream())

    def time_headroom(self, ins, step):
        """headroom's ranks on their threads: (per-rank medians, per-rank
        (y, grads) of the last rep)."""
        opt = self.opt
        clock = Clock(self.R, opt.reps, opt.warmup)
        self.after_inputs()

        def rank(r):
            m, st, d = self.mods[r], self.streams[r], ins[r]
            x = d["x"].detach().requires_grad_(step)
            w = d["w"].detach().requires_grad_(step)
            out = None
            with torch.cuda.stream(st):
                for i in range(opt.reps + opt.warmup):
                    self.bar.wait()
                    if r == 0:
                        self.open_gate()
                    self.bar.wait()
                    st.wait_event(self.gate)
                    clock.starts[r][i].record(st)
                    if step:
                        x.grad = w.grad = m.w1.grad = m.w2.grad = None
                        y = m(x, d["ids"], w)
                        y.backward(d["dy"])
                    else:
                        with torch.no_grad():
                            y = m(x, d["ids"], w)
                    clock.ends[r][i].record(st)
                    out = y
                    st.synchronize()           # reps do not overlap
            m.check()
            grads = (x.grad, m.w1.grad, w.grad) if step else None
            return out.detach(), grads
        res = self.on_threads(rank)
        return clock.medians(), res

    def time_baseline(self, ins, wts, step):
        """The baseline's ranks in lockstep from this thread."""
        from headroom import ep_reference
        opt = self.opt
        R = self.R
        clock = Clock(R, opt.reps, opt.warmup)
        self.after_inputs()
        xs = [d["x"].detach().requires_grad_(step) for d in ins]
        ws = [d["w"].detach().requires_grad_(step) for d in ins]
        w1s = [w[0].detach().requires_grad_(step) for w in wts]
        w2s = [w[1].detach().requires_grad_(step) for w in wts]
        ys = None
        for i in range(opt.reps + opt.warmup):
            self.open_gate()
            for r in range(R):
                self.streams[r].wait_event(self.gate)
                clock.starts[r][i].record(self.streams[r])
            if step:
                for t in xs + ws + w1s + w2s:
                    t.grad = None
                ys = ep_reference.ep_moe_lockstep(xs, [d["ids"] for d in ins], ws,
                                                  w1s, w2s, self.streams)
                torch.autograd.backward(ys, [d["dy"] for d in ins])
            else:
                with torch.no_grad():
                    ys = ep_reference.ep_moe_lockstep(xs, [d["ids"] for d in ins],
                                                      ws, w1s, w2s, self.streams)
            for r in range(R):
                clock.ends[r][i].record(self.streams[r])
            torch.cuda.synchronize()           # reps do not overlap
        grads = [(xs[r].grad, w1s[r].grad, ws[r].grad) for r in range(R)] if step \
            else None
        return clock.medians(), [y.detach() for y in ys], grads


# ---- torchrun --------------------------------------------------------------------------


class Real:
    """This process's rank of an NCCL group, one GPU."""

    def __init__(self, R, headroom, hnn, opt):
        import torch.distributed as dist
        self.dist = dist
        self.R = R
        self.hnn = hnn
        self.opt = opt
        self.rank = dist.get_rank()
        self.group = dist.group.WORLD
        self.mods = None

    def make_modules(self, E, H, I, k, maxT, weights):
        w1, w2 = weights[0]
        m = self.hnn.MegaMoE(E, H, I, k, maxT, device="meta", ep_group=self.group,
                             timeout_ms=self.opt.timeout_ms)
        m.w1 = torch.nn.Parameter(w1.detach(), requires_grad=self.opt.backward)
        m.w2 = torch.nn.Parameter(w2.detach(), requires_grad=self.opt.backward)
        m.prepare()                                # collective
        self.mods = [m]

    def close(self):
        if self.mods:
            self.mods[0].close()
            self.mods = None

    def _rep_start(self, clock, i):
        torch.cuda.synchronize()
        self.dist.barrier()
        torch.cuda._sleep(HEAD_START_CYCLES)
        clock.starts[0][i].record()

    def time_headroom(self, ins, step):
        opt = self.opt
        clock = Clock(1, opt.reps, opt.warmup)
        m, d = self.mods[0], ins[0]
        x = d["x"].detach().requires_grad_(step)
        w = d["w"].detach().requires_grad_(step)
        for i in range(opt.reps + opt.warmup):
            self._rep_start(clock, i)
            if step:
                x.grad = w.grad = m.w1.grad = m.w2.grad = None
                y = m(x, d["ids"], w)
                y.backward(d["dy"])
            else:
                with torch.no_grad():
                    y = m(x, d["ids"], w)
            clock.ends[0][i].record()
        torch.cuda.synchronize()
        m.check()
        return clock.medians(), [(y.detach(), (x.grad, m.w1.grad, w.grad)
                                  if step else None)]

    def time_baseline(self, ins, wts, step):
        from headroom import ep_reference
        opt = self.opt
        clock = Clock(1, opt.reps, opt.warmup)
        d = ins[0]
        x = d["x"].detach().requires_grad_(step)
        w = d["w"].detach().requires_grad_(step)
        w1 = wts[0][0].detach().requires_grad_(step)
        w2 = wts[0][1].detach().requires_grad_(step)
        for i in range(opt.reps + opt.warmup):
            self._rep_start(clock, i)
            if step:
                for t in (x, w, w1, w2):
                    t.grad = None
                y = ep_reference.ep_moe(x, d["ids"], w, w1, w2, self.group)
                y.backward(d["dy"])
            else:
                with torch.no_grad():
                    y = ep_reference.ep_moe(x, d["ids"], w, w1, w2, self.group)
            clock.ends[0][i].record()
        torch.cuda.synchronize()
        return clock.medians(), [y.detach()], [(x.grad, w1.grad, w.grad)] if step else None

    def gather(self, obj):
        out = [None] * self.R
        self.dist.all_gather_object(out, obj)
        return out

    def least(self, v):
        return min(self.gather(v))


# ---- one shape ---------------------------------------------------------------------------


def bench_shape(side, headroom, name, opt, rows, notes, backward, R_here, device):
    """Every T of one shape: the rows (on rank 0 under torchrun)."""
    E0, H, I, k = SHAPES[name]
    R = side.R
    ranks = range(R) if R_here == R else [side.rank]
    E = E0
    # Every rank must choose the same E and cells: the least free memory.
    free = side.least(torch.cuda.mem_get_info()[0])
    tokens = list(opt.token_list)

    def ctx(T):
        # hr_moe_ep_memory(_backward): what a rank's context allocates.
        return sum(headroom.ep_memory(headroom.MoeShape(E, H, I, k, T), R,
                                      backward=backward))
    while E > max(k, R) and E % (2 * R) == 0 and \
            need_bytes(E, H, I, k, tokens[0], R, R_here, ctx(tokens[0])) > 0.9 * free:
        E //= 2
    if E != E0:
        notes.append("%s: %d experts instead of %d (the weights did not fit "
                     "in %.0f GiB free)" % (name, E, E0, free / 2**30))
    fit = [T for T in tokens
           if need_bytes(E, H, I, k, T, R, R_here, ctx(T)) <= 0.9 * free]
    for T in tokens:
        if T not in fit:
            rows.append(dict(shape=name, E=E, R=R, T=T, skipped="about %.0f GiB "
                             "needed, %.0f free" % (need_bytes(E, H, I, k, T, R, R_here,
                                                               ctx(T)) / 2**30,
                                                    free / 2**30)))
    if not fit:
        return
    El = E // R
    weights = [rank_weights(r, El, H, I, device, 7) for r in ranks]
    side.make_modules(E, H, I, k, max(fit), weights)
    ctx_bytes = ctx(max(fit))
    for T in fit:
        ins = [rank_inputs(r, E, H, k, T, device, 11) for r in ranks]
        row = dict(shape=name, E=E, R=R, T=T, ctx_bytes=ctx_bytes)
        row["t_fwd"], t_y, _ = side.time_baseline(ins, weights, False)
        row["h_fwd"], h_res = side.time_headroom(ins, False)
        rel_y = max(rel_l2(h_res[i][0], t_y[i]) for i in range(len(ins)))
        rel_g = None
        if opt.backward:
            row["t_step"], _, t_g = side.time_baseline(ins, weights, True)
        else:
            row["t_step"], t_g = [None] * len(ins), None
        if backward:
            row["h_step"], h_res = side.time_headroom(ins, True)
            rel_g = [max(rel_l2(h_res[i][1][j], t_g[i][j]) for i in range(len(ins)))
                     for j in range(3)]
        else:
            row["h_step"] = [None] * len(ins)
        row["rel_y"], row["rel_grads"] = rel_y, rel_g
        if R_here != R:                        # torchrun: every rank's numbers
            got = side.gather(row)
            for key in ("t_fwd", "h_fwd", "t_step", "h_step"):
                row[key] = [v for g in got for v in g[key]]
            row["rel_y"] = max(g["rel_y"] for g in got)
            if rel_g is not None:
                row["rel_grads"] = [max(g["rel_grads"][j] for g in got)
                                    for j in range(3)]
        rows.append(row)
        if R_here == R or side.rank == 0:
            print("%-14s R=%d T=%-5d baseline fwd %s step %s ms; headroom fwd %s "
                  "step %s ms" % (name, R, T, fmt_ms(slowest(row["t_fwd"])),
                                  fmt_ms(slowest(row["t_step"])),
                                  fmt_ms(slowest(row["h_fwd"])),
                                  fmt_ms(slowest(row["h_step"]))), flush=True)
        del ins
        torch.cuda.empty_cache()
    side.close()
    del weights
    torch.cuda.empty_cache()


def main(argv=None):
    opt = parse_args(argv)
    mode, R = mode_of(opt, os.environ)
    bench_common.check_gpu("bench_ep.py")
    if mode is None:
        sys.exit("bench_ep.py: " + R)
    opt.lib = os.path.abspath(opt.lib)
    if not os.path.exists(opt.lib):
        sys.exit("bench_ep.py: %s is not built (make kernels)" % opt.lib)
    os.environ.setdefault("HEADROOM_MOE_LIB", opt.lib)
    os.environ.setdefault("HEADROOM_ALLOW_FULL_GRID", "1")
    os.environ.setdefault("DG_MEGA_MOE_SM_HEADROOM", "0")
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import headroom
    import headroom.nn as hnn

    if mode == "torchrun":
        import torch.distributed as dist
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        side = Real(R, headroom, hnn, opt)
        R_here, device = 1, torch.device("cuda", local)
    else:
        torch.cuda.set_device(0)
        side = Virtual(R, headroom, hnn, opt)
        R_here, device = R, torch.device("cuda", 0)
    lib = headroom.load_moe_library()
    have_bwd = headroom._lib.has_symbol(lib, "hr_moe_ep_backward")
    backward = opt.backward and have_bwd
    why = ("--no-backward" if not opt.backward else
           "the library has no hr_moe_ep_backward yet (forward only; the "
           "baseline's step is still measured)")
    torch.manual_seed(0)
    prop = torch.cuda.get_device_properties(device)
    lease_grid = hnn.default_lease(device.index).grid
    grid = lease_grid // R if mode == "virtual" else lease_grid
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime(
                    "%Y-%m-%d %H:%M UTC"),
                gpu="%s x %d (%d SMs)" % (torch.cuda.get_device_name(device),
                                          torch.cuda.device_count(),
                                          prop.multi_processor_count),
                driver=driver(), torch=torch.__version__,
                command=" ".join((["torchrun --nproc-per-node %d" % R]
                                  if mode == "torchrun" else ["python3"]) + sys.argv),
                commit=bench_common.commit(opt.commit),
                mode=mode, R=R, grid=grid, reps=opt.reps,
                warmup=opt.warmup, backward=backward, backward_why=why)
    rank0 = mode == "virtual" or side.rank == 0
    if rank0:
        print("%s; driver %s; %s, %d ranks, grid %d a rank" % (
            meta["gpu"], meta["driver"], mode, R, grid), flush=True)
    rows, notes = [], []
    for name in opt.shape_list:
        bench_shape(side, headroom, name, opt, rows, notes, backward, R_here, device)
    if rank0:
        bench_common.emit(table(rows, notes, meta), opt.out)
    if mode == "torchrun":
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
