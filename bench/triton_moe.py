#!/usr/bin/env python3
"""triton_moe.py: a tuned Triton fused MoE, the baseline serving engines use.

The design (the one vLLM and SGLang ship for bf16 MoE on Hopper): the
(token, expert) pairs are sorted by expert and each expert's run is padded
to a multiple of BLOCK_M, so that every M block of a GEMM belongs to one
expert; GEMM1 gathers its A rows (the tokens' x rows) through that order
and writes h = x W1^T per pair; SwiGLU; GEMM2 reads the pairs' activations
in the same blocked order, scales each row by its routing weight and
writes one row per pair; the k rows of a token are summed last.

Every GEMM picks its own config, the best of a sweep timed on the cell's own
inputs. The alignment (sorting and padding the pairs) is done once per
input set, outside the timed region, as the issue that asked for this
baseline specifies: what is timed is the GEMMs, SwiGLU and the sum,
captured as one CUDA graph.

    python3 bench/triton_moe.py [--shapes qwen3-30b-a3b,deepseek-v3]
                                [--tokens 1,1024,8192] [--balanced]
                                [--config 128,256,64,8,8,3]

prints, per cell, the Triton time, the torch._grouped_mm reference's time
(bench_moe.ref_moe, as a CUDA graph) and the error against it. bench_moe.py
imports build() to put the same baseline in its table. --balanced gives
every expert T k / E pairs; --config runs one config for both GEMMs with
no sweep, so that a profiler sees only the launches of the run
(bench/profile_vs_triton.sh).
"""
import argparse
import statistics
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_gemm(a_ptr, b_ptr, c_ptr, w_ptr, sorted_ptr, expert_ptr,
              N, K, n_pairs, a_div,
              stride_am, stride_be, stride_bn, stride_cm,
              MUL_W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, N_BLOCKS_M):
    """C[pair, :] = A[pair // a_div, :] @ B[e]^T (x w[pair] if MUL_W) for
    the pairs of one M block, all of expert e. B[e] is [N, K] row-major, as
    the kernel's w1 [E, 2I, H] and w2 [E, H, I] are."""
    pid = tl.program_id(0)
    n_blocks_n = tl.cdiv(N, BLOCK_N)
    # Blocks of GROUP_M M-blocks run N-major, so that the B columns one group
    # reads stay in L2 while its M blocks pass.
    per_group = GROUP_M * n_blocks_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(N_BLOCKS_M - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + offs_m)
    valid = pair < n_pairs
    e = tl.load(expert_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = tl.where(valid, pair // a_div, 0).to(tl.int64)
    a_ptrs = a_ptr + rows[:, None] * stride_am + offs_k[None, :]
    b_ptrs = (b_ptr + e * stride_be + (offs_n % N)[None, :].to(tl.int64) * stride_bn
              + offs_k[:, None])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if MUL_W:
        acc = acc * tl.load(w_ptr + pair, mask=valid, other=0.0)[:, None]
    c_ptrs = c_ptr + pair.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=valid[:, None] & (offs_n[None, :] < N))


@triton.jit
def _swiglu(h_ptr, out_ptr, n_rows, I, BLOCK: tl.constexpr):
    """out[r, :] = silu(h[r, :I]) * h[r, I:], in fp32, rounded once."""
    r = tl.program_id(0)
    for c0 in range(0, I, BLOCK):
        offs = c0 + tl.arange(0, BLOCK)
        m = offs < I
        g = tl.load(h_ptr + r.to(tl.int64) * 2 * I + offs, mask=m, other=0.0).to(tl.float32)
        u = tl.load(h_ptr + r.to(tl.int64) * 2 * I + I + offs, mask=m, other=0.0).to(tl.float32)
        a = g / (1.0 + tl.exp(-g)) * u
        tl.store(out_ptr + r.to(tl.int64) * I + offs, a.to(tl.bfloat16), mask=m)


def align(ids, n_experts, block_m):
    """The pairs sorted by expert, each expert's run padded to block_m with
    the sentinel T*k: (sorted pair ids, the expert of each M block)."""
    flat = ids.reshape(-1).long()
    n = flat.numel()
    counts = torch.bincount(flat, minlength=n_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(counts, 0) - counts
    starts_pad = torch.cumsum(padded, 0) - padded
    order = torch.argsort(flat, stable=True)
    e_sorted = flat[order]
    dest = starts_pad[e_sorted] + torch.arange(n, device=ids.device) - starts[e_sorted]
    n_pad = int(padded.sum().item())
    sorted_ids = torch.full((n_pad,), n, dtype=torch.int32, device=ids.device)
    sorted_ids[dest] = order.to(torch.int32)
    experts = torch.repeat_interleave(torch.arange(n_experts, device=ids.device),
                                      padded // block_m).to(torch.int32)
    return sorted_ids, experts


# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages)
CONFIGS_SMALL = [
    (16, 64, 128, 1, 4, 4), (16, 128, 64, 1, 4, 4), (16, 128, 128, 1, 4, 3),
    (16, 256, 64, 1, 4, 4), (32, 64, 128, 1, 4, 4), (32, 128, 64, 8, 4, 4),
]
CONFIGS_LARGE = [
    (64, 128, 64, 8, 4, 4), (64, 256, 64, 8, 8, 4), (128, 128, 64, 8, 8, 4),
    (128, 256, 64, 8, 8, 3), (128, 128, 64, 16, 8, 5), (64, 128, 128, 16, 4, 3),
    (128, 256, 64, 32, 8, 3), (128, 64, 64, 8, 4, 4),
]


def configs_for(pairs_per_expert):
    if pairs_per_expert <= 16:
        return CONFIGS_SMALL
    if pairs_per_expert <= 96:
        return CONFIGS_SMALL + CONFIGS_LARGE[:3]
    return CONFIGS_LARGE


class Gemm:
    """One GEMM of the MoE with one config, its alignment made up front."""

    def __init__(self, cfg, ids, n_experts, a, b, c, w, a_div, mul_w):
        self.cfg = cfg
        bm, bn, bk, gm, nw, ns = cfg
        self.sorted, self.experts = align(ids, n_experts, bm)
        self.args = (a, b, c, w, self.sorted, self.experts)
        self.N, self.K = b.shape[1], b.shape[2]
        self.n_pairs = ids.numel()
        self.a_div, self.mul_w = a_div, mul_w
        self.n_blocks_m = self.experts.numel()
        self.grid = (self.n_blocks_m * triton.cdiv(self.N, bn),)

    def __call__(self):
        bm, bn, bk, gm, nw, ns = self.cfg
        a, b, c, w, s, ex = self.args
        if self.n_blocks_m == 0:
            return
        _moe_gemm[self.grid](a, b, c, w, s, ex, self.N, self.K, self.n_pairs,
                             self.a_div, a.stride(0), b.stride(0), b.stride(1),
                             c.stride(0), MUL_W=self.mul_w, BLOCK_M=bm, BLOCK_N=bn,
                             BLOCK_K=bk, GROUP_M=gm, N_BLOCKS_M=self.n_blocks_m,
                             num_warps=nw, num_stages=ns)


def best_gemm(ids, n_experts, a, b, c, w, a_div, mul_w, candidates):
    """The fastest config on these very inputs (median of do_bench)."""
    best = None
    for cfg in candidates:
        if b.shape[2] % cfg[2]:
            continue                    # the K loop has no tail
        g = Gemm(cfg, ids, n_experts, a, b, c, w, a_div, mul_w)
        try:
            ms = triton.testing.do_bench(g, warmup=5, rep=20, return_mode="median")
        except Exception as exc:        # a config the compiler refuses (shared memory)
            print(f"  config {cfg}: {type(exc).__name__}", file=sys.stderr)
            continue
        if best is None or ms < best[0]:
            best = (ms, g)
    return best[1]


class TritonMoE:
    """The whole forward for one input set, tuned; call() runs it."""

    def __init__(self, x, ids, w, w1, w2, tune_from=None, config=None):
        T, H = x.shape
        E, two_i, _ = w1.shape
        I = two_i // 2
        k = ids.shape[1]
        self.k, self.T, self.H = k, T, H
        self.h = torch.empty(T * k, 2 * I, dtype=torch.bfloat16, device=x.device)
        self.act = torch.empty(T * k, I, dtype=torch.bfloat16, device=x.device)
        self.o = torch.empty(T * k, H, dtype=torch.bfloat16, device=x.device)
        self.y = torch.empty(T, H, dtype=torch.bfloat16, device=x.device)
        wf = w.reshape(-1).float().contiguous()
        self.I = I
        if config is not None:          # one config, untimed (a profiler's run)
            self.g1 = Gemm(config, ids, E, x, w1, self.h, wf, k, False)
            self.g2 = Gemm(config, ids, E, self.act, w2, self.o, wf, 1, True)
        elif tune_from is None:
            cands = configs_for(T * k / E)
            self.g1 = best_gemm(ids, E, x, w1, self.h, wf, k, False, cands)
            self.g2 = best_gemm(ids, E, self.act, w2, self.o, wf, 1, True, cands)
        else:
            self.g1 = Gemm(tune_from.g1.cfg, ids, E, x, w1, self.h, wf, k, False)
            self.g2 = Gemm(tune_from.g2.cfg, ids, E, self.act, w2, self.o, wf, 1, True)

    def __call__(self):
        self.g1()
        _swiglu[(self.T * self.k,)](self.h, self.act, self.T * self.k, self.I, BLOCK=256)
        self.g2()
        torch.sum(self.o.view(self.T, self.k, self.H), dim=1, out=self.y)
        return self.y


def build(data, config=None):
    """One graph per input set (x, ids, w, w1, w2, ...), configs tuned on the
    first set (or `config` for both GEMMs, untimed): returns (graphs,
    outputs, (cfg1, cfg2)). Each graph holds its
    TritonMoE (g.moe): the graph replays raw pointers into its buffers, which
    must outlive it."""
    moes = []
    for i, d in enumerate(data):
        moes.append(TritonMoE(*d[:5], tune_from=moes[0] if moes else None,
                              config=config))
    graphs, outs = [], []
    for m in moes:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                m()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = m()
        g.moe = m
        graphs.append(g)
        outs.append(out)
    return graphs, outs, (moes[0].g1.cfg, moes[0].g2.cfg)


def main():
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import bench_moe as bm                   # the reference and the inputs

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="qwen3-30b-a3b,deepseek-v3")
    ap.add_argument("--tokens", default="1,16,128,1024,4096,8192")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--balanced", action="store_true",
                    help="every expert T k / E pairs instead of random routing")
    ap.add_argument("--config", help="BLOCK_M,BLOCK_N,BLOCK_K,GROUP_M,warps,stages "
                    "for both GEMMs instead of the sweep (for a profiler)")
    opt = ap.parse_args()
    config = tuple(int(v) for v in opt.config.split(",")) if opt.config else None
    if config is not None and len(config) != 6:
        sys.exit("triton_moe.py: --config takes 6 integers")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    for name in opt.shapes.split(","):
        E, H, I, k = bm.SHAPES[name]
        w1 = ((torch.rand(E, 2 * I, H, generator=gen, device="cuda") * 2 - 1)
              .mul_(H ** -0.5).to(torch.bfloat16))
        w2 = ((torch.rand(E, H, I, generator=gen, device="cuda") * 2 - 1)
              .mul_(I ** -0.5).to(torch.bfloat16))
        for T in (int(t) for t in opt.tokens.split(",")):
            sets = 4 if T <= 128 else 2
            data = []
            for _ in range(sets):
                x = (torch.rand(T, H, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
                ids, w = bm.routing(T, E, k, gen, balanced=opt.balanced)
                data.append((x, ids, w, w1, w2))
            graphs, outs, cfgs = build(data, config)
            tri_ms = bm.median_ms(lambda i: graphs[i].replay(), opt.reps, sets)
            ref_graphs, refs = [], []
            for (x, ids, w, _, _) in data:
                w1t, w2t = w1.transpose(1, 2), w2.transpose(1, 2)
                for _ in range(2):
                    bm.ref_moe(x, ids, w, w1t, w2t, E, I)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    refs.append(bm.ref_moe(x, ids, w, w1t, w2t, E, I))
                ref_graphs.append(g)
            ref_ms = bm.median_ms(lambda i: ref_graphs[i].replay(), opt.reps, sets)
            for g in graphs:
                g.replay()
            for g in ref_graphs:
                g.replay()
            torch.cuda.synchronize()
            err = max(((o.float() - r.float()).norm() / r.float().norm()).item()
                      for o, r in zip(outs, refs))
            flops = 2.0 * T * k * 3 * H * I
            print(f"{name:14s} T={T:<5d} triton {tri_ms:8.3f} ms "
                  f"({flops / tri_ms / 1e9:6.1f} TFLOP/s)  ref {ref_ms:8.3f} ms  "
                  f"ref/triton {ref_ms / tri_ms:5.2f}  err {err:.1e}  cfg {cfgs}",
                  flush=True)
            del graphs, outs, ref_graphs, refs, data
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
