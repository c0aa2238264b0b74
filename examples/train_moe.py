#!/usr/bin/env python3
"""train_moe.py: a small MoE model trained on headroom.nn.MegaMoE, beside
the same model on a plain-torch MoE.

The model: random input features -> nn.Linear -> a router (nn.Linear,
softmax, top-k, renormalised) -> MegaMoE -> nn.Linear head; the loss is
the mean squared error against a fixed teacher of the same architecture
(other weights), on fresh synthetic features every step. The experts'
weights are fp32 master weights (MegaMoE(dtype=torch.float32)), cast to
bf16 for the kernel at every forward, as mixed-precision training does;
the rest of the model is fp32. Two copies start
from the same weights and see the same data: one runs the mega-MoE kernel
(its grid leased from headroomd at every launch, or the client library's
fail-safe budget when no daemon answers), the other headroom.nn's
reference_moe in plain torch. Every --every steps it prints both losses;
at the end, the largest relative difference of the two curves (bf16 noise:
a few percent, growing as the loss nears bf16's noise floor on y) and the
largest difference relative to the first loss.

From the repository root after `make` (the kernels need nvcc), on an H200
with torch, with or without headroomd running:

    PYTHONPATH=python python3 examples/train_moe.py [--steps N] [--every N] [--socket PATH] [--gpu N]

Without a GPU the same loop runs on the ops' CPU path (plain torch, slow;
for checking the script):

    PYTHONPATH=python python3 examples/train_moe.py --device cpu --steps 20 --tokens 64
"""
import argparse
import copy
import sys


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=25,
                   help="print the losses every N steps")
    p.add_argument("--device", default="cuda",
                   help="cuda (GPU --gpu) or cpu (the ops' CPU path)")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--socket", default=None,
                   help="headroomd's socket (default: $HEADROOM_SOCKET, "
                        "else /run/headroom/headroom.sock)")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--inter", type=int, default=256)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def build(args, torch, hnn, device, lease, reference, seed):
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(args.features, args.hidden)
            self.router = torch.nn.Linear(args.hidden, args.experts)
            self.moe = hnn.MegaMoE(args.experts, args.hidden, args.inter,
                                   args.topk, args.tokens, lease=lease,
                                   dtype=torch.float32, reference=reference)
            self.head = torch.nn.Linear(args.hidden, 1)

        def forward(self, feats):
            h = self.inp(feats)
            probs = torch.softmax(self.router(h), dim=-1)
            w, ids = probs.topk(args.topk, dim=-1)
            w = w / w.sum(dim=-1, keepdim=True)
            y = self.moe(h, ids, w)
            return self.head(y.float() + h).squeeze(-1)

    torch.manual_seed(seed)
    return Model().to(device)


def main(argv=None):
    args = parse(argv)
    import torch
    import headroom
    import headroom.nn as hnn

    lease = None
    if args.device == "cuda":
        device = torch.device("cuda", args.gpu)
        torch.cuda.set_device(device)
        client = headroom.Client(args.socket, name="train_moe", quiet=True)
        lease = client.lease(args.gpu, cluster=2)
        b = lease.budget()
        print("daemon: %s; lease: gpu %d, %d SMs, headroom %d, grid %d"
              % ("connected" if client.connected else
                 "none (the fail-safe budget)", b.gpu, b.sms, b.headroom,
                 b.grid))
    elif args.device == "cpu":
        device = torch.device("cpu")
        print("device: cpu (the ops' CPU path, no kernel)")
    else:
        sys.exit("--device must be cuda or cpu")

    teacher = build(args, torch, hnn, device, lease, True, args.seed + 1000)
    model = build(args, torch, hnn, device, lease, False, args.seed)
    ref = copy.deepcopy(model)
    ref.moe.reference = True
    models = (("headroom", model), ("reference", ref))
    opts = [torch.optim.Adam(m.parameters(), lr=args.lr) for _, m in models]
    data = torch.Generator(device=device).manual_seed(args.seed + 1)

    curves = ([], [])
    print("%6s %12s %12s %8s" % ("step", "headroom", "reference", "grid"))
    for step in range(1, args.steps + 1):
        feats = torch.randn(args.tokens, args.features, device=device,
                            generator=data)
        with torch.no_grad():
            target = teacher(feats)
        losses = []
        for (_, m), opt in zip(models, opts):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(m(feats), target)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        if step % args.every == 0 or step == 1 or step == args.steps:
            hnn.check()                 # raises BarrierTimeout, if any
            a, b = (float(v) for v in losses)
            curves[0].append(a)
            curves[1].append(b)
            grid = model.moe.last_grid
            print("%6d %12.6f %12.6f %8s" % (step, a, b,
                                             "-" if grid is None else grid))
            sys.stdout.flush()
    diff = max(abs(a - b) / max(abs(b), 1e-12)
               for a, b in zip(*curves))
    # Near convergence the loss is itself of the order of bf16's noise on
    # y, so the pointwise ratio grows; against the first loss it does not.
    scaled = max(abs(a - b) for a, b in zip(*curves)) / curves[1][0]
    print("first loss %.6f, last loss %.6f (reference %.6f)"
          % (curves[0][0], curves[0][-1], curves[1][-1]))
    print("max relative difference of the curves: %.4f" % diff)
    print("max difference / first loss: %.5f" % scaled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
