#!/usr/bin/env python3
"""multicast_bytes.py: what 2-CTA TMA multicast could save the big tile,
by L2 bytes alone (a model, no GPU; docs/kernels.md, What is left).

A unit of the big tile is one token tile (up to 128 of an expert's pairs)
by 256 weight rows; each K step of 64 it reads the weight box (32 KB) and
its token rows in boxes of 16 (2 KB a box). Summed over the units of one
stage (per feature tile; every stage has the same count of them), for
routing drawn as the benchmarks draw it (k distinct experts a token,
uniformly), against the same with

  weight   an expert's token tiles in pairs on a 2-CTA cluster, each CTA
           loading half the weight box for both: a CTA reads its tokens
           and 16 KB; the pair runs in lockstep, so both SMs spend the
           slower one's time, and a lone last tile's partner streams its
           half of the weights for no tokens;
  token    a token tile's feature tiles in pairs, each CTA loading half
           the token boxes for both: a CTA reads 32 KB and half its
           tokens (always pairable: every stage has an even number of
           feature tiles).

    python3 bench/multicast_bytes.py [--tokens 4096,8192,16384] [--seed 1]
"""
import argparse
import random

SHAPES = {"qwen3-30b-a3b": (128, 8), "deepseek-v3": (256, 8)}   # E, k
TILE, BOX = 128, 16


def counts(T, E, k, seed, balanced=False):
    if balanced:
        return [T * k // E + (1 if e < T * k % E else 0) for e in range(E)]
    rnd = random.Random(seed)
    cnt = [0] * E
    for _ in range(T):
        for e in rnd.sample(range(E), k):
            cnt[e] += 1
    return cnt


def tok_kb(n):
    return -(-n // BOX) * BOX * 128 / 1024


def stage_kb(cnt):
    """(now, weight multicast, token multicast): KB a K step, summed over
    the units of one feature tile, in SM-time (a pair counts both SMs)."""
    now = wmc = tmc = 0.0
    for c in cnt:
        tiles = [TILE] * (c // TILE) + ([c % TILE] if c % TILE else [])
        now += sum(32 + tok_kb(n) for n in tiles)
        tmc += sum(32 + tok_kb(n) / 2 for n in tiles)
        for i in range(0, len(tiles), 2):
            pair = tiles[i:i + 2] + [0]
            wmc += 2 * max(16 + tok_kb(pair[0]), 16 + tok_kb(pair[1]))
    return now, wmc, tmc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="4096,8192,16384")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--balanced", action="store_true")
    o = ap.parse_args()
    print("| shape | T | weight multicast / now | token multicast / now |")
    print("|---|---|---|---|")
    for name, (E, k) in SHAPES.items():
        for T in (int(t) for t in o.tokens.split(",")):
            now, wmc, tmc = stage_kb(counts(T, E, k, o.seed, o.balanced))
            print(f"| {name} | {T} | {wmc / now:.3f} | {tmc / now:.3f} |")


if __name__ == "__main__":
    main()
