#!/usr/bin/env python3
"""bench_moe.py: the mega-MoE kernel against a PyTorch reference MoE.

In one run on one GPU:
  1. the two ceilings: device-to-device copy bandwidth (bytes read plus
     bytes written) and the bf16 GEMM rate at 8192^3;
  2. for each shape and T: the PyTorch reference (routing given: sort the
     (token, expert) pairs by expert, torch._grouped_mm for both GEMMs,
     SwiGLU, weighted index_add_; captured once and replayed as a CUDA
     graph) and libheadroom_moe's two kernels through ctypes, on the whole
     device: the barrier kernel (hr_moe_forward_grid, clusters of 2) and
     the residency-agnostic one (hr_moe_forward_agnostic_grid), whose y
     must be bitwise the barrier kernel's;
  3. a table: time (median of many reps, CUDA events around each rep),
     ratio, TFLOP/s, and the ratio of each time to the floor
     max(bytes of the experts touched / copy bandwidth, FLOPs / GEMM rate).

Inputs rotate between several sets so that a rep does not find the last
rep's routing (and, for weights that fit in L2, its weights) in the cache.
Each rep is timed alone; the host gets a head start (a sleep kernel) so
that launch overhead never shows in the events.

    python3 bench/bench_moe.py --lib build/lib/libheadroom_moe.so --out FILE

Without a GPU (or PyTorch, or torch._grouped_mm) it says it needs one
and exits 0, measuring nothing.
"""
import argparse
import ctypes
import datetime
import json
import os
import statistics
import subprocess
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:                    # main says it needs one (check_gpu)
    torch = F = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
from headroom._lib import MoeArgs_t, MoeShape_t  # noqa: E402
from bench_common import check_gpu, commit, emit, routing  # noqa: E402  (beside this script)

try:                                   # the tuned Triton baseline, beside this file
    import triton_moe
except ImportError:                    # no Triton: its columns read "-"
    triton_moe = None

SHAPES = {
    # name: (E, H, I, k)
    "small": (8, 256, 512, 2),
    "qwen3-30b-a3b": (128, 2048, 768, 8),
    "deepseek-v3": (256, 7168, 2048, 8),
}

# The reference as docs/measurements.md §5 measured it on an H200 (ms).
PUBLISHED_REF = {
    "small": [0.059, 0.061, 0.082, 0.103, 0.271],
    "qwen3-30b-a3b": [0.106, 0.371, 0.518, 0.744, 3.01],
    "deepseek-v3": [0.352, 2.91, 7.06, 7.77, 18.4],
}
PUBLISHED_T = [1, 16, 128, 1024, 8192]

HR_MODE_HEADROOM = 0


# The C structs as the Python package declares them (python/headroom/_lib.py,
# checked field for field against the headers by its tests), so that a
# field the API grows cannot shift the ones after it here.
Shape = MoeShape_t
Args = MoeArgs_t


def make_args(T, E, H, I, k, x, ids, w, w1, w2, y, timeout_ms=10000):
    """One forward's hr_moe_args for these tensors (no gate_up)."""
    return Args(tokens=T, experts=E, hidden=H, inter=I, topk=k,
                x=x.data_ptr(), topk_ids=ids.data_ptr(),
                topk_weights=w.data_ptr(), w1=w1.data_ptr(), w2=w2.data_ptr(),
                y=y.data_ptr(), timeout_ms=timeout_ms)


def load_lib(path):
    lib = ctypes.CDLL(path)
    lib.hr_moe_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                  ctypes.POINTER(Shape)]
    lib.hr_moe_destroy.argtypes = [ctypes.c_void_p]
    lib.hr_moe_sms.argtypes = [ctypes.c_void_p]
    lib.hr_moe_forward_grid.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                        ctypes.c_int, ctypes.POINTER(Args),
                                        ctypes.c_void_p]
    lib.hr_moe_sync.argtypes = [ctypes.c_void_p]
    lib.hr_strerror.restype = ctypes.c_char_p
    if hasattr(lib, "hr_moe_forward_agnostic_grid"):
        lib.hr_moe_forward_agnostic_grid.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(Args), ctypes.c_void_p]
    return lib


def median_ms(run, reps, sets, warmup=3):
    """Median over reps of one call of run(i) each, timed with events."""
    for i in range(warmup):
        run(i % sets)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda._sleep(50_000_000)            # head start for the host
    for i in range(reps):
        starts[i].record()
        run(i % sets)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def ceilings():
    n = 1 << 30                                   # 1 GiB each way
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda i: dst.copy_(src), 20, 1)
    copy_bw = 2 * n / (ms * 1e-3)
    del src, dst
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    ms = median_ms(lambda i: torch.mm(a, b), 10, 1)
    gemm = 2 * 8192 ** 3 / (ms * 1e-3)
    del a, b
    torch.cuda.empty_cache()
    return copy_bw, gemm


def ref_moe(x, ids, w, w1t, w2t, E, I):
    """The reference: sort pairs by expert, grouped GEMMs, SwiGLU, combine."""
    T, k = ids.shape
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    tok = order // k
    counts = torch.zeros(E, dtype=torch.int64, device=x.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    h = torch._grouped_mm(x[tok], w1t, offs=offs)
    a = F.silu(h[:, :I]) * h[:, I:]
    o = torch._grouped_mm(a, w2t, offs=offs)
    o = o * w.reshape(-1)[order].unsqueeze(1).to(o.dtype)
    y = torch.zeros_like(x)
    y.index_add_(0, tok, o)
    return y


def bench_shape(libs, name, tokens, reps, copy_bw, gemm, l2_bytes, rows,
                variants, variant_tokens, use_triton=True, balanced=False):
    E, H, I, k = SHAPES[name]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    wbytes = E * 3 * H * I * 2
    # Weights that fit in L2 rotate between copies too.
    nw = 1 if wbytes > 4 * l2_bytes else min(16, -(-4 * l2_bytes // wbytes))
    w1s, w2s = [], []
    for _ in range(nw):
        w1s.append((torch.rand(E, 2 * I, H, generator=gen, device="cuda") * 2 - 1)
                   .mul_(H ** -0.5).to(torch.bfloat16))
        w2s.append((torch.rand(E, H, I, generator=gen, device="cuda") * 2 - 1)
                   .mul_(I ** -0.5).to(torch.bfloat16))

    shape = Shape(E, H, I, k, max(tokens))
    ctxs = []
    for vname, vlib in libs:
        ctx = ctypes.c_void_p()
        rc = vlib.hr_moe_create(ctypes.byref(ctx), -1, ctypes.byref(shape))
        if rc:
            sys.exit(f"hr_moe_create ({vname}): {vlib.hr_strerror(rc).decode()}")
        ctxs.append(ctx)
    lib, ctx = libs[0][1], ctxs[0]
    sms = lib.hr_moe_sms(ctx)
    stream = torch.cuda.current_stream().cuda_stream

    for T in tokens:
        sets = 8 if T <= 128 else 2
        sets = max(sets, nw)
        data = []
        for s in range(sets):
            x = (torch.rand(T, H, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
            ids, w = routing(T, E, k, gen, balanced=balanced)
            data.append((x, ids, w, w1s[s % nw], w2s[s % nw],
                         torch.empty(T, H, dtype=torch.bfloat16, device="cuda")))
        touched = statistics.mean(len(torch.unique(d[1])) for d in data)
        flops = 2.0 * T * k * 3 * H * I
        floor_ms = max(touched * 3 * H * I * 2 / copy_bw, flops / gemm) * 1e3

        # The reference, one CUDA graph per input set.
        graphs, ref_out = [], []
        for (x, ids, w, w1, w2, _) in data:
            w1t, w2t = w1.transpose(1, 2), w2.transpose(1, 2)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    ref_moe(x, ids, w, w1t, w2t, E, I)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = ref_moe(x, ids, w, w1t, w2t, E, I)
            graphs.append(g)
            ref_out.append(out)
        ref_ms = median_ms(lambda i: graphs[i].replay(), reps, sets)

        # The tuned Triton fused MoE (bench/triton_moe.py), one graph a set.
        tri_ms = tri_cfg = None
        if triton_moe is not None and use_triton:
            tri_graphs, _, tri_cfg = triton_moe.build(data)
            tri_ms = median_ms(lambda i: tri_graphs[i].replay(), reps, sets)
            del tri_graphs

        # Ours.
        args = []
        for (x, ids, w, w1, w2, y) in data:
            args.append(make_args(T, E, H, I, k, x, ids, w, w1, w2, y))

        def timed(vlib, vctx, agnostic=False):
            def run(i):
                if agnostic:
                    rc = vlib.hr_moe_forward_agnostic_grid(vctx, sms, ctypes.byref(args[i]),
                                                           stream)
                else:
                    rc = vlib.hr_moe_forward_grid(vctx, sms, HR_MODE_HEADROOM, 2,
                                                  ctypes.byref(args[i]), stream)
                if rc:
                    sys.exit(f"hr_moe_forward: {vlib.hr_strerror(rc).decode()}")
            ms = median_ms(run, reps, sets)
            rc = vlib.hr_moe_sync(vctx)
            if rc:
                sys.exit(f"hr_moe_sync: {vlib.hr_strerror(rc).decode()}")
            return ms

        # Build-time variants of the kernel first (only where asked), so that
        # the library under test writes y last.
        if T in variant_tokens:
            for (vname, vlib), vctx in list(zip(libs, ctxs))[1:]:
                vms = timed(vlib, vctx)
                variants.append(dict(shape=name, T=T, variant=vname, ms=vms,
                                     ref=ref_ms, floor=floor_ms))
                print(f"  variant {vname:20s} {vms:8.3f} ms  ({vms / floor_ms:4.2f}x floor)",
                      flush=True)
        # The agnostic kernel, then the barrier kernel, which writes y last;
        # every set's y must be the same bytes from both.
        agn_ms, same = None, None
        if hasattr(lib, "hr_moe_forward_agnostic_grid"):
            agn_ms = timed(lib, ctx, agnostic=True)
            agn_y = [d[5].clone() for d in data]
        our_ms = timed(lib, ctx)
        if agn_ms is not None:
            torch.cuda.synchronize()
            same = all(torch.equal(a.view(torch.int16), d[5].view(torch.int16))
                       for a, d in zip(agn_y, data))
            del agn_y

        # Same answer as the reference? (bf16 both ways; the reference rounds
        # more often, so this is a sanity check, not the test.)
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
        err = max(((d[5].float() - r.float()).norm() / r.float().norm()).item()
                  for d, r in zip(data, ref_out))
        nan = any(torch.isnan(d[5]).any().item() for d in data)

        pub = PUBLISHED_REF[name][PUBLISHED_T.index(T)] if T in PUBLISHED_T else None
        rows.append(dict(shape=name, T=T, ref=ref_ms, ours=our_ms,
                         speedup=ref_ms / our_ms, tflops=flops / (our_ms * 1e-3) / 1e12,
                         ours_floor=our_ms / floor_ms, ref_floor=ref_ms / floor_ms,
                         floor=floor_ms, touched=touched, err=err, nan=nan, pub=pub,
                         agn=agn_ms, same=same, tri=tri_ms, tri_cfg=tri_cfg,
                         agn_tflops=flops / (agn_ms * 1e-3) / 1e12 if agn_ms else None))
        r = rows[-1]
        agn_txt = (f"  agnostic {agn_ms:8.3f} ms ({agn_ms / floor_ms:4.2f}x floor, "
                   f"{'bitwise same' if same else 'DIFFERENT y'})") if agn_ms else ""
        tri_txt = f"  triton {tri_ms:8.3f} ms (x{tri_ms / our_ms:4.2f} of ours)" if tri_ms else ""
        print(f"{name:14s} T={T:<5d} ref {ref_ms:8.3f} ms  ours {our_ms:8.3f} ms  "
              f"x{r['speedup']:5.2f}  {r['tflops']:6.1f} TFLOP/s  "
              f"floor {floor_ms:7.3f} ms (ours {r['ours_floor']:4.2f}x, ref "
              f"{r['ref_floor']:4.2f}x){agn_txt}{tri_txt}  rel err vs ref {err:.1e}"
              f"{'  NaN!' if nan else ''}", flush=True)
        del graphs, ref_out, data, args
        torch.cuda.empty_cache()
    for (vname, vlib), vctx in zip(libs, ctxs):
        vlib.hr_moe_destroy(vctx)
    del w1s, w2s
    torch.cuda.empty_cache()


def l2_set_aside_reset():
    """Takes a persisting-L2 set-aside the process started with back to 0
    (it slows every launch, and a device can carry one left by an earlier
    process: docs/kernels.md). Returns (found, now) in bytes, or None where
    no CUDA runtime library is loaded to ask."""
    limit = 0x06                        # cudaLimitPersistingL2CacheSize
    try:
        with open("/proc/self/maps") as maps:
            path = next((line.split()[-1] for line in maps
                         if "libcudart.so" in line), None)
        rt = ctypes.CDLL(path or "libcudart.so")
    except OSError:
        return None
    val = ctypes.c_size_t()
    if rt.cudaDeviceGetLimit(ctypes.byref(val), limit) != 0:
        return None
    found = val.value
    if found:
        rt.cudaDeviceSetLimit(limit, ctypes.c_size_t(0))
        rt.cudaDeviceGetLimit(ctypes.byref(val), limit)
    return found, val.value


def machine():
    try:
        # GPU 0, the one the benchmark runs on (one line on a machine of several)
        return subprocess.run(["nvidia-smi", "-i", "0",
                               "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return torch.cuda.get_device_name()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="build/lib/libheadroom_moe.so")
    ap.add_argument("--out", help="write the markdown table here too")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--tokens", default="1,16,128,1024,8192")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--variants", default="",
                    help="NAME=LIB,...: also time these builds of the kernel")
    ap.add_argument("--variant-tokens", default="1,16,128")
    ap.add_argument("--balanced", action="store_true",
                    help="every expert T k / E pairs (slot j of token t to expert "
                    "(t k + j) mod E) instead of random routing")
    ap.add_argument("--no-triton", action="store_true",
                    help="leave out the tuned Triton baseline (bench/triton_moe.py)")
    ap.add_argument("--json", help="also write the run's rows here, for --merge")
    ap.add_argument("--merge", help="A.json,B.json,...: no run; the table of these --json "
                    "files' rows together (runs one after the other, a shape each, say)")
    opt = ap.parse_args()
    if opt.merge:
        try:
            doc = merge([p for p in opt.merge.split(",") if p])
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"bench_moe.py --merge: {e}")
        emit(render(doc), opt.out)
        return
    check_gpu("bench_moe.py")

    libs = [("ours", load_lib(os.path.abspath(opt.lib)))]
    for item in filter(None, opt.variants.split(",")):
        vname, vpath = item.split("=", 1)
        libs.append((vname, load_lib(os.path.abspath(vpath))))
    variant_tokens = [int(t) for t in opt.variant_tokens.split(",")]
    variants = []
    torch.manual_seed(0)
    prop = torch.cuda.get_device_properties(0)
    l2 = getattr(prop, "L2_cache_size", 50 << 20)
    torch.cuda.synchronize()             # the context exists: its limit can be read
    set_aside = l2_set_aside_reset()
    set_aside_line = ("- persisting L2 set-aside: not readable" if set_aside is None else
                      f"- persisting L2 set-aside: {set_aside[1]} bytes (found {set_aside[0]})"
                      + ("; it slows every launch: these times are not comparable"
                         if set_aside[1] else ""))
    copy_bw, gemm = ceilings()
    print(f"{machine()}; {prop.multi_processor_count} SMs, L2 {l2 >> 20} MiB; "
          f"copy {copy_bw / 1e12:.2f} TB/s (read + write), bf16 GEMM 8192^3 "
          f"{gemm / 1e12:.0f} TFLOP/s", flush=True)
    tokens = [int(t) for t in opt.tokens.split(",")]
    rows = []
    for name in opt.shapes.split(","):
        bench_shape(libs, name, tokens, opt.reps, copy_bw, gemm, l2, rows,
                    variants, variant_tokens, not opt.no_triton, opt.balanced)

    run = dict(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=f"{machine()}, {prop.multi_processor_count} SMs; torch {torch.__version__}",
        set_aside=set_aside_line, command=" ".join(["python3"] + sys.argv),
        commit=commit(), copy_bw=copy_bw, gemm=gemm, balanced=opt.balanced)
    doc = dict(runs=[run], rows=rows, variants=variants)
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump(doc, f, indent=1)
    emit(render(doc), opt.out)


def merge(paths):
    """The documents that --json wrote, as one: their runs, rows and
    variants in the order given. ValueError naming the file where they do
    not belong in one table (another machine, the other routing, a cell
    twice)."""
    doc = dict(runs=[], rows=[], variants=[])
    seen = set()
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        if not isinstance(d, dict) or not all(isinstance(d.get(k), list)
                                              for k in ("runs", "rows", "variants")):
            raise ValueError(f"{path}: not a bench_moe.py --json document")
        for r in d["runs"]:
            first = doc["runs"][0] if doc["runs"] else r
            for key in ("machine", "balanced"):
                if r.get(key) != first.get(key):
                    raise ValueError(f"{path}: {key} {r.get(key)!r}, not {first.get(key)!r}"
                                     " as in the first file")
        for row in d["rows"]:
            cell = (row["shape"], row["T"])
            if cell in seen:
                raise ValueError(f"{path}: {cell[0]} T={cell[1]} is in an earlier file too")
            seen.add(cell)
        for k in ("runs", "rows", "variants"):
            doc[k] += d[k]
    return doc


def render(doc):
    """The markdown table of one run, or of several merged (merge())."""
    runs, rows, variants = doc["runs"], doc["rows"], doc["variants"]
    first = runs[0]
    dates = ", ".join(r["date"] for r in runs)
    lines = [f"# Mega-MoE kernel vs the PyTorch reference ({dates})", "",
             f"- machine: {first['machine']}", first["set_aside"]]
    if len(runs) == 1:
        lines += [f"- command: `{first['command']}` (`make bench-gpu` runs this script); "
                  f"commit {first['commit']}",
                  f"- ceilings measured in the same run: copy {first['copy_bw'] / 1e12:.2f} "
                  f"TB/s (read + write), bf16 GEMM 8192^3 {first['gemm'] / 1e12:.0f} TFLOP/s"]
    else:
        lines.append(f"- {len(runs)} runs, one after the other, merged by "
                     "`bench_moe.py --merge` (each row is its own run's, its floor from "
                     "that run's ceilings):")
        for r in runs:
            lines.append(f"  - {r['date']}: `{r['command']}`, commit {r['commit']}; ceilings "
                         f"copy {r['copy_bw'] / 1e12:.2f} TB/s, bf16 GEMM "
                         f"{r['gemm'] / 1e12:.0f} TFLOP/s")
    lines += [
        "- routing: " + ("balanced, slot j of token t to expert (t k + j) mod E"
                         if first["balanced"] else "k distinct experts a token, uniformly"),
        "- floor = max(bytes of the experts touched / copy rate, FLOPs / GEMM "
        "rate); times are medians of per-rep CUDA events, inputs rotating",
        "- barrier: hr_moe_forward_grid, grid = all SMs, clusters of 2; "
        "agnostic: hr_moe_forward_agnostic_grid, grid = all SMs; reference: "
        "sort + torch._grouped_mm x2 + SwiGLU + index_add_, CUDA graph",
        "- agn = barrier: every input set's y bitwise the same from both kernels",
        "- Triton: bench/triton_moe.py, pairs aligned into expert M blocks outside the "
        "graph, each GEMM the best of its config sweep on the cell's inputs; "
        "triton / barrier > 1 means the barrier kernel is faster",
        "",
        "| shape | T | reference ms | barrier ms | agnostic ms | ref / barrier "
        "| ref / agnostic | barrier TFLOP/s | agnostic TFLOP/s | floor ms "
        "| barrier / floor | agnostic / floor | ref / floor | ref in measurements §5 ms "
        "| rel err vs ref | agn = barrier | Triton ms | triton / barrier | triton / agnostic |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        agn = r["agn"]
        if agn:
            agn_cells = (f"{agn:.3f}", f"{r['ref'] / agn:.2f}x", f"{r['agn_tflops']:.1f}",
                         f"{agn / r['floor']:.2f}")
        else:
            agn_cells = ("-", "-", "-", "-")
        same = "-" if r["same"] is None else "yes" if r["same"] else "NO"
        lines.append(
            f"| {r['shape']} | {r['T']} | {r['ref']:.3f} | {r['ours']:.3f} | "
            f"{agn_cells[0]} | {r['speedup']:.2f}x | {agn_cells[1]} | "
            f"{r['tflops']:.1f} | {agn_cells[2]} | {r['floor']:.3f} | "
            f"{r['ours_floor']:.2f} | {agn_cells[3]} | {r['ref_floor']:.2f} | "
            f"{r['pub'] if r['pub'] is not None else '-'} | "
            f"{r['err']:.1e}{' NaN' if r['nan'] else ''} | {same} | "
            + (f"{r['tri']:.3f} | {r['tri'] / r['ours']:.2f}x | "
               + (f"{r['tri'] / agn:.2f}x |" if agn else "- |")
               if r["tri"] else "- | - | - |"))
    picked = [r for r in rows if r["tri_cfg"]]
    if picked:
        lines += ["", "The Triton configs each cell's sweep picked, (BLOCK_M tokens, "
                  "BLOCK_N, BLOCK_K, GROUP_M, warps, stages):", "",
                  "| shape | T | GEMM1 | GEMM2 |", "|---|---|---|---|"]
        for r in picked:
            lines.append(f"| {r['shape']} | {r['T']} | {tuple(r['tri_cfg'][0])} | "
                         f"{tuple(r['tri_cfg'][1])} |")
    if variants:
        lines += ["", "Build-time variants of the kernel (same run, same inputs):", "",
                  "| shape | T | variant | ms | / floor | ref / variant |",
                  "|---|---|---|---|---|---|"]
        for v in variants:
            lines.append(f"| {v['shape']} | {v['T']} | {v['variant']} | {v['ms']:.3f} | "
                         f"{v['ms'] / v['floor']:.2f} | {v['ref'] / v['ms']:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
