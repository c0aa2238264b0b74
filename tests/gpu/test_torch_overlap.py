"""test_torch_overlap.py: the mega-MoE kernel beside FSDP2-style
communication on two GPUs, from PyTorch, with and without a lease.

Run by tests/gpu/test_torch_overlap.sh (which starts headroomd on a
temporary socket and sets HEADROOM_SOCKET); by hand, with a daemon:

    PYTHONPATH=python torchrun --standalone --nproc-per-node 2 tests/gpu/test_torch_overlap.py

Each rank leases its GPU (cluster 2), registers the footprint of its two
communicators (8 CTAs per collective, 2 in flight), and creates them with
headroom.nccl_options(lease): an all-gather group and a reduce-scatter
group, each collective issued on its own stream. Every step, each rank has
one collective in flight when it launches the kernel and issues the other
right after it; the ranks do so in opposite orders (rank 0 all-gathers
first, rank 1 reduce-scatters first), as ranks do when one runs ahead of
the other. A collective can only finish when its peer runs, so:

  1. with the lease (grid = SMs - headroom, headroom covering the
     footprint): the kernel is wholly resident beside the comm kernels
     and nothing waits on anything that cannot run. 200 steps, zero
     barrier timeouts on either rank; one step's output against the torch
     reference, the last step's bitwise equal to the first.
  2. the lease disabled (the full grid, one CTA per SM, an ordinary
     launch): the kernel is partly resident around the comm kernel in
     flight; its resident CTAs spin at the first barrier, holding the SMs
     the peer-dependent collectives need, on both GPUs: the deadlock.
     With a 500 ms barrier timeout it surfaces in Python as
     headroom.BarrierTimeout on a rank (the other is often freed when the
     first one's kernel leaves), every collective still completes, and
     one more step under the lease is correct again.
  3. the residency-agnostic kernel at the full grid (headroom 0) in the
     same order: 200 steps, zero timeouts, output bitwise as under the
     lease (it waits only on work already claimed by running CTAs).
  4. everything is torn down and the process exits 0.

Every wait is bounded: GPU events are polled with a deadline, and a
faulthandler watchdog ends a rank that stops making progress, with its
stack, instead of hanging the job.
"""
import faulthandler
import os
import time

import torch
import torch.distributed as dist

import headroom
from torchrun_util import RANK, die, log, wait_event, watchdog

STEPS = 200                 # with the lease
AGNOSTIC_STEPS = 200        # the agnostic kernel at the full grid
DEADLOCK_TRIES = 3          # without it, until a rank sees the timeout
TIMEOUT_MS = 500            # barrier timeout of every launch
SETTLE_S = 0.002            # lets a launched kernel become resident
PHASE_LIMIT_S = 120         # a phase that takes longer is a hang
COMM_CTAS = 8               # CTAs per collective we register and allow
IN_FLIGHT = 2               # all-gather and reduce-scatter at once
CLUSTER = 2
E, H, I, K, T = 8, 256, 512, 2, 256
COMM_ELEMS = 1 << 22        # 8 MiB of bf16 per rank: NCCL's full-size CTAs
REL_L2_BOUND = 1e-2

def main():
    local = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if world != 2:
        die("run with --nproc-per-node 2 (world size %d)" % world)
    watchdog(PHASE_LIMIT_S)
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)

    # ---- the lease and the footprint, before any communicator ----------
    client = headroom.Client(name="torch-overlap-rank%d" % RANK)
    if not client.connected:
        die("no headroomd at %s" % client.socket)
    lease = client.lease(local, cluster=CLUSTER)
    epoch = lease.epoch
    comm = client.register(local, "fsdp", ctas=COMM_CTAS, cga=1,
                           concurrent=IN_FLIGHT)
    if lease.epoch == epoch:
        lease.wait_change(epoch, 3000)
    b = lease.budget()
    log("lease on GPU %d: %d SMs, headroom %d, grid %d, NCCL %d..%d CTAs, "
        "cga %d, epoch %d" % (b.gpu, b.sms, b.headroom, b.grid,
                              b.nccl_min_ctas, b.nccl_max_ctas,
                              b.nccl_cga_cluster_size, b.epoch))
    if b.degraded:
        die("the lease is degraded")
    if not 1 <= b.nccl_max_ctas <= COMM_CTAS:
        die("NCCL cap %d outside the registered footprint of %d CTAs"
            % (b.nccl_max_ctas, COMM_CTAS))
    if b.headroom < CLUSTER * COMM_CTAS * IN_FLIGHT:
        die("headroom %d does not cover %d CTAs x %d in flight x cluster %d "
            "(policy ceiling too low for this test)"
            % (b.headroom, COMM_CTAS, IN_FLIGHT, CLUSTER))
    env = headroom.apply_env(lease)     # before NCCL reads its environment
    log("environment: %s" % " ".join("%s=%s" % kv for kv in env.items()))
    if os.environ.get("NCCL_NVLS_ENABLE") != "0":
        die("NCCL_NVLS_ENABLE is not 0")

    # ---- process groups: gloo for the host side, NCCL for the data ------
    dist.init_process_group("gloo")
    ranks = list(range(world))
    opts_ag = headroom.nccl_options(lease)
    opts_rs = headroom.nccl_options(lease)
    for o in (opts_ag, opts_rs):
        if (o.config.max_ctas, o.config.cga_cluster_size) != \
                (b.nccl_max_ctas, 1):
            die("nccl_options: max_ctas %d cga %d"
                % (o.config.max_ctas, o.config.cga_cluster_size))
    pg_ag = dist.new_group(ranks, backend="nccl", pg_options=opts_ag)
    pg_rs = dist.new_group(ranks, backend="nccl", pg_options=opts_rs)

    ag_in = torch.full((COMM_ELEMS,), float(RANK + 1), device=dev,
                       dtype=torch.bfloat16)
    ag_out = torch.empty(world * COMM_ELEMS, device=dev, dtype=torch.bfloat16)
    rs_in = torch.full((world * COMM_ELEMS,), float(RANK + 1), device=dev,
                       dtype=torch.bfloat16)
    rs_out = torch.empty(COMM_ELEMS, device=dev, dtype=torch.bfloat16)
    ag_stream = torch.cuda.Stream(dev)
    rs_stream = torch.cuda.Stream(dev)
    compute = torch.cuda.Stream(dev)

    def all_gather():
        with torch.cuda.stream(ag_stream):
            work = dist.all_gather_into_tensor(ag_out, ag_in, group=pg_ag,
                                               async_op=True)
            work.wait()                 # ag_stream waits; the host does not
            ev = torch.cuda.Event()
            ev.record(ag_stream)
        return ev

    def reduce_scatter():
        with torch.cuda.stream(rs_stream):
            work = dist.reduce_scatter_tensor(rs_out, rs_in, group=pg_rs,
                                              async_op=True)
            work.wait()
            ev = torch.cuda.Event()
            ev.record(rs_stream)
        return ev

    # Communicators are created at their first collective: do that now,
    # with nothing else on the GPUs.
    wait_event(all_gather(), "first all-gather")
    wait_event(reduce_scatter(), "first reduce-scatter")

    def check_comms(what):
        want_ag = torch.cat([torch.full((COMM_ELEMS,), float(r + 1))
                             for r in ranks]).to(dev, torch.bfloat16)
        if not torch.equal(ag_out, want_ag):
            die("all-gather output wrong (%s)" % what)
        if not torch.equal(rs_out, torch.full_like(rs_out, 3.0)):
            die("reduce-scatter output wrong (%s)" % what)

    check_comms("warm-up")

    # ---- the MoE --------------------------------------------------------
    moe = headroom.Moe(E, H, I, K, T, device=local)
    sms = moe.sms
    g = torch.Generator(device=dev).manual_seed(1234 + RANK)
    x = (torch.rand(T, H, device=dev, generator=g) * 2 - 1).bfloat16()
    w1 = ((torch.rand(E, 2 * I, H, device=dev, generator=g) - 0.5)
          / 8).bfloat16()
    w2 = ((torch.rand(E, H, I, device=dev, generator=g) - 0.5) / 8).bfloat16()
    ids = torch.rand(T, E, device=dev, generator=g).argsort(dim=1)[:, :K]
    ids = ids.to(torch.int32).contiguous()
    wts = torch.rand(T, K, device=dev, generator=g) * 0.95 + 0.05
    y = torch.full((T, H), float("nan"), device=dev, dtype=torch.bfloat16)
    ref = headroom.moe_reference(x, ids, wts, w1, w2)
    torch.cuda.synchronize()
    log("MoE E=%d H=%d I=%d k=%d T=%d on %d SMs" % (E, H, I, K, T, sms))

    def with_lease():
        moe.forward(lease, x, ids, wts, w1, w2, y, timeout_ms=TIMEOUT_MS)

    def full_grid():
        # The launch before headroom: every SM, one CTA each, no clusters.
        moe.forward_grid(sms, x, ids, wts, w1, w2, y, cluster=1,
                         timeout_ms=TIMEOUT_MS)

    def step(launch, n):
        first, last = ((all_gather, reduce_scatter) if RANK == 0
                       else (reduce_scatter, all_gather))
        # y and the inputs were last touched on the default stream.
        compute.wait_stream(torch.cuda.current_stream(dev))
        ev_first = first()
        time.sleep(SETTLE_S)            # its kernel is resident, waiting
        with torch.cuda.stream(compute):
            launch()
        time.sleep(SETTLE_S)
        ev_last = last()
        err = None
        try:
            moe.sync()
        except headroom.BarrierTimeout as e:
            err = e
        wait_event(ev_first, "step %d: first collective" % n)
        wait_event(ev_last, "step %d: second collective" % n)
        return err

    def rel_err():
        yf, rf = y.float(), ref.float()
        if not torch.isfinite(yf).all().item():
            return float("inf")
        return ((yf - rf).norm() / rf.norm()).item()

    # ---- 1. with the lease ---------------------------------------------
    dist.barrier()
    watchdog(PHASE_LIMIT_S)
    epoch = lease.epoch
    timeouts = 0
    grids = set()
    y0 = None
    t0 = time.monotonic()
    for n in range(STEPS):
        grids.add(lease.grid)           # what the launch reads, every step
        err = step(with_lease, n)
        if err is not None:
            timeouts += 1
            log("step %d under the lease: %s" % (n, err))
        if n == 0:
            e = rel_err()
            log("step 0: relative L2 error against the torch reference "
                "%.2e" % e)
            if not e < REL_L2_BOUND:
                die("MoE output wrong under the lease (error %.3g)" % e)
            y0 = y.clone()
            y.fill_(float("nan"))
    torch.cuda.synchronize()
    dt = time.monotonic() - t0
    same = torch.equal(y, y0)
    check_comms("after the leased steps")
    total = torch.tensor([timeouts], dtype=torch.int64)
    dist.all_reduce(total)
    log("with the lease: %d steps in %.1f s, grid %s, %d barrier timeouts "
        "here, %d on all ranks" % (STEPS, dt, sorted(grids), timeouts,
                                   int(total)))
    if int(total) != 0:
        die("barrier timeouts under the lease")
    if grids != {b.grid}:
        die("the grid moved under the lease: %s" % sorted(grids))
    if not same:
        die("the last step's output differs from the first's")
    if lease.epoch != epoch:
        die("the budget changed during the leased steps")

    # ---- 2. the lease disabled: the full grid ---------------------------
    dist.barrier()
    watchdog(PHASE_LIMIT_S)
    seen = None
    tries = 0
    while tries < DEADLOCK_TRIES:
        tries += 1
        t1 = time.monotonic()
        err = step(full_grid, tries)
        dt = time.monotonic() - t1
        if err is not None:
            f = err.failure
            log("full grid %d, try %d: headroom.BarrierTimeout after %.0f ms: "
                "%s" % (sms, tries, dt * 1e3, err))
            if f is None or f.expected != sms or not f.arrived < f.expected:
                die("BarrierTimeout without the expected detail: %r" % (f,))
            if f.reported != 1:
                die("a launch without a lease reported an incident")
            seen = seen or err
        else:
            log("full grid %d, try %d: completed in %.0f ms"
                % (sms, tries, dt * 1e3))
        flag = torch.tensor([1 if err is not None else 0], dtype=torch.int64)
        dist.all_reduce(flag)
        if int(flag) > 0:
            break
    got = torch.tensor([1 if seen is not None else 0], dtype=torch.int64)
    dist.all_reduce(got)
    log("full grid: BarrierTimeout on %d of %d ranks after %d tries"
        % (int(got), world, tries))
    if int(got) == 0:
        die("the full grid never deadlocked in %d tries" % DEADLOCK_TRIES)
    check_comms("after the deadlock")

    # The context is healthy: one more step under the lease, correct again.
    y.fill_(float("nan"))
    err = step(with_lease, STEPS + tries)
    torch.cuda.synchronize()
    if err is not None:
        die("step under the lease after the deadlock: %s" % err)
    if not torch.equal(y, y0):
        die("output under the lease after the deadlock differs (error %.3g)"
            % rel_err())
    log("after the deadlock: a leased step is correct again")

    # ---- 3. the residency-agnostic kernel at the full grid ---------------
    # Same order, same collectives, headroom 0: its CTAs only ever wait on
    # work that CTAs already running have claimed, so a partly resident
    # grid still finishes. Every step must complete, bitwise as above.
    dist.barrier()
    watchdog(PHASE_LIMIT_S)

    def agnostic_full_grid():
        moe.forward_grid(sms, x, ids, wts, w1, w2, y,
                         mode=headroom.Mode.AGNOSTIC, cluster=1,
                         timeout_ms=TIMEOUT_MS)

    timeouts = 0
    differ = 0
    t2 = time.monotonic()
    for n in range(AGNOSTIC_STEPS):
        y.fill_(float("nan"))
        err = step(agnostic_full_grid, STEPS + tries + 1 + n)
        if err is not None:
            timeouts += 1
            log("agnostic step %d at the full grid: %s" % (n, err))
        elif not torch.equal(y, y0):
            differ += 1
    torch.cuda.synchronize()
    dt = time.monotonic() - t2
    check_comms("after the agnostic steps")
    total = torch.tensor([timeouts, differ], dtype=torch.int64)
    dist.all_reduce(total)
    log("agnostic kernel, full grid %d (headroom 0): %d steps in %.1f s, "
        "%d timeouts and %d wrong outputs on all ranks"
        % (sms, AGNOSTIC_STEPS, dt, int(total[0]), int(total[1])))
    if int(total[0]) or int(total[1]):
        die("the agnostic kernel failed at the full grid")

    # ---- 4. a clean exit -------------------------------------------------
    watchdog(60)
    dist.barrier()
    moe.close()
    dist.destroy_process_group()
    comm.unregister()
    lease.release()
    client.close()
    faulthandler.cancel_dump_traceback_later()
    log("PASS")


if __name__ == "__main__":
    main()
