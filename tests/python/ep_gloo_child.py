"""One rank of test_nn_ep.py's gloo group: python3 ep_gloo_child.py RANK
WORLD STORE. Joins a gloo process group through a FileStore, runs
ep_cases.run_rank for every case, creates an MoeEP through the group (the
ProcessGroup bootstrap), and prints one JSON object on its last line."""
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch.distributed as dist  # noqa: E402

import ep_cases  # noqa: E402
import headroom  # noqa: E402


def main():
    rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", store=dist.FileStore(store, world),
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    group = dist.group.WORLD
    out = {"rank": rank}
    for case in ("random", "none_to_last", "empty_last"):
        out[case] = ep_cases.run_rank(case, rank, world, group, None)
    # The ProcessGroup bootstrap through the C library: without a GPU
    # every rank fails alike after both exchanges; with one, it works.
    try:
        ep = headroom.MoeEP(headroom.MoeShape(ep_cases.E, ep_cases.H,
                                              ep_cases.I, ep_cases.K, 16),
                            rank, world, group, device=0)
        ep.close()
        out["create"] = "ok"
    except (headroom.HeadroomError, OSError) as e:
        out["create"] = type(e).__name__
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps(out), flush=True)
    # End here, not through the interpreter's exit: with torch 2.15, once a
    # collective has run inside a torch.library custom op (the EP ops' CPU
    # path), the gloo group outlives destroy_process_group(), held outside
    # Python, and its teardown at exit aborts the process now and then
    # ("terminate called without an active exception", about 1 run in 30
    # here). The results are printed; nothing is left to clean up.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
