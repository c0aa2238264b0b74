#!/usr/bin/env python3
"""train_step.py: a trainer's setup and step loop under a headroom lease.

Dry run: no GPU, no torch; prints the lease, the environment it exports
and the NCCL config it would give, then reads lease.grid each "step".
From the repository root after `make`, with headroomd running (or not: the
lease is then degraded):

    PYTHONPATH=python python3 examples/train_step.py --dry [--socket PATH] [--gpu N] [--steps N]

On a node with 2+ H200s, torch with NCCL and headroomd running:

    PYTHONPATH=python torchrun --nproc-per-node 2 examples/train_step.py [--steps N]

Each rank leases its GPU, creates its process group inside the lease's
NCCL budget, registers the footprint, and per step overlaps an all-reduce
(its own stream) with the mega-MoE kernel launched with lease.grid.
"""
import argparse
import os
import sys
import time

import headroom

COMM_CTAS_WANTED = 8       # CTAs per collective we would like
COLLECTIVES_IN_FLIGHT = 2  # e.g. all-gather overlapping reduce-scatter
CLUSTER = 2                # the mega kernel's CTAs per cluster


def setup(args):
    client = headroom.Client(args.socket, name="train_step")
    lease = client.lease(args.gpu, cluster=CLUSTER)
    # Register what this process will run on the GPU, at most what the
    # budget allows per collective; the budget then covers it.
    ctas = min(COMM_CTAS_WANTED, lease.budget().nccl_max_ctas or
               COMM_CTAS_WANTED)
    epoch = lease.epoch
    client.register(args.gpu, "dp", ctas=ctas, cga=1,
                    concurrent=COLLECTIVES_IN_FLIGHT)
    if client.connected and lease.epoch == epoch:
        lease.wait_change(epoch, 200)  # the footprint's budget is pushed
    return client, lease


def dry(args):
    client, lease = setup(args)
    b = lease.budget()
    print("daemon: %s" % ("connected" if client.connected else
                          "none (degraded lease from the environment)"))
    print("lease: gpu %d, %d SMs, cluster %d, headroom %d, grid %d, epoch %d"
          % (b.gpu, b.sms, b.cluster, b.headroom, b.grid, b.epoch))
    print("nccl config (ProcessGroupNCCL.Options().config): %s"
          % (b.nccl_config() or "nothing decided"))
    for k, v in headroom.apply_env(lease).items():
        print("env %s=%s" % (k, v))
    for step in range(args.steps):
        print("step %d: grid %d (epoch %d)" % (step, lease.grid, lease.epoch))
        time.sleep(0.01)
    client.close()


def train(args):
    import torch
    import torch.distributed as dist

    args.gpu = int(os.environ.get("LOCAL_RANK", args.gpu))
    torch.cuda.set_device(args.gpu)
    client, lease = setup(args)
    headroom.apply_env(lease)          # before NCCL creates a communicator
    dist.init_process_group("nccl", pg_options=headroom.nccl_options(lease))
    rank = dist.get_rank()
    dev = torch.device("cuda", args.gpu)

    E, H, I, k, T = 8, 1024, 512, 2, 512
    moe = headroom.Moe(E, H, I, k, T, device=args.gpu)
    x = torch.randn(T, H, device=dev).bfloat16()
    w1 = (torch.randn(E, 2 * I, H, device=dev) / 32).bfloat16()
    w2 = (torch.randn(E, H, I, device=dev) / 32).bfloat16()
    ids = torch.rand(T, E, device=dev).argsort(dim=1)[:, :k].int().contiguous()
    wts = torch.rand(T, k, device=dev)
    y = torch.empty(T, H, device=dev, dtype=torch.bfloat16)
    grads = torch.randn(1 << 22, device=dev)
    comm_stream = torch.cuda.Stream()
    torch.cuda.synchronize()

    for step in range(args.steps):
        with torch.cuda.stream(comm_stream):       # gradient sync, overlapped
            work = dist.all_reduce(grads, async_op=True)
        grid = lease.grid                           # read at every launch
        moe.forward(lease, x, ids, wts, w1, w2, y, timeout_ms=1000)
        try:
            moe.sync()
        except headroom.BarrierTimeout as e:
            # Reported to headroomd already; the next launch uses the
            # raised headroom. A real trainer would redo the layer.
            print("rank %d step %d: %s" % (rank, step, e), file=sys.stderr)
        work.wait()
        if rank == 0 and step % 10 == 0:
            print("step %d: grid %d" % (step, grid))
    torch.cuda.synchronize()
    moe.close()
    dist.destroy_process_group()
    client.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dry", action="store_true",
                   help="no GPU: print the lease and the environment only")
    p.add_argument("--socket", help="headroomd's socket "
                   "(default: $HEADROOM_SOCKET, else %s)"
                   % headroom.DEFAULT_SOCKET)
    p.add_argument("--gpu", type=int, default=0,
                   help="GPU to lease (dry run; torchrun uses LOCAL_RANK)")
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    if args.dry:
        dry(args)
    else:
        train(args)


if __name__ == "__main__":
    main()
