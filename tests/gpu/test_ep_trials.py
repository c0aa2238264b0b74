"""test_ep_trials.py: the expert-parallel mega-MoE across real GPUs beside
FSDP2-style collectives, one process per GPU, in every lease mode.

Run by tests/gpu/test_ep_trials.sh (which starts headroomd on a temporary
socket and sets HEADROOM_SOCKET); by hand, with a daemon:

    PYTHONPATH=python torchrun --standalone --nproc-per-node N \\
        tests/gpu/test_ep_trials.py [--trials 1000] [--seed S]

N ranks (2..8, a GPU each) hold the experts of one EP layer
(headroom.MoeEP: each rank E/N experts, its own tokens, GLOBAL ids; the
kernel's dispatch and return are its own cross-GPU traffic). Each rank
also has three NCCL communicators, a stream each, on which the trials
queue all-gathers, reduce-scatters and all-reduces of 1 to 64 MiB right
before, around or after each launch, in the orders of
tests/gpu/ep_trials_plan.py (INC-1291's cross order among them). Phases:

  headroom, cooperative, partition, agnostic
      a lease in that mode on each rank, the three communicators'
      footprints registered and the communicators made from the lease's
      NCCL config (partition: their streams in the comm partition, the
      kernel on the mega partition's stream). --trials seeded random
      trials; one in three runs the EP backward after the forward. Pass:
      no launch failed on any rank, every collective completed, and every
      output (y; dx, dW1, dW2, d(w)) bitwise the reference's.
  agnostic-full
      the same trials, no lease: the agnostic form at the full grid
      (headroom 0), NCCL at its defaults. Pass: as above.
  repro
      no lease: the barrier form at the full grid (every SM, an ordinary
      launch) in the cross order against three 64 MiB all-reduces at
      NCCL's defaults, up to --repro-tries times. Pass: in one try every
      rank's launch ended with headroom.BarrierTimeout naming the rank
      that failed (the error word, never a trap), every collective still
      completed, and a launch right after on the quiet GPUs is bitwise
      the reference again.

The references: each rank computes its tokens' y with the single-GPU
kernel (headroom.Moe) over the global weights, and the backward over
every rank's tokens in rank order (inputs are a function of the seed, so
every rank can make them all): the EP kernel is bitwise both
(docs/kernels.md, Expert parallel). One input set is also checked against
torch math (headroom.moe_reference).

Every wait is bounded: GPU events are polled with a deadline, and a
faulthandler watchdog ends a rank that stops making progress, with its
stack, instead of hanging the job. --plan-only prints the plan's mix and
checks every trial's scripts with no GPU and no torch.
"""
import argparse
import faulthandler
import os
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ep_trials_plan as P  # noqa: E402
from torchrun_util import RANK, die, log, wait_event, watchdog  # noqa: E402

SHAPES = {
    # name: (experts, hidden, inter, topk)
    "qwen3-30b-a3b": (128, 2048, 768, 8),
    "small": (16, 256, 512, 4),
}
PHASES = ("headroom", "cooperative", "partition", "agnostic", "agnostic-full", "repro")
LEASE_CLUSTER = {"headroom": 2, "cooperative": 1, "partition": 1, "agnostic": 1}
REL_L2_BOUND = 1e-2
def options(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=int(os.environ.get("HR_TRIALS", 1000)),
                    help="trials a phase (default 1000, $HR_TRIALS)")
    ap.add_argument("--seed", type=int, default=None,
                    help="the plan's and the data's seed ($HR_TEST_SEED, else the clock)")
    ap.add_argument("--phases", default=",".join(PHASES),
                    help="some of " + ",".join(PHASES) + " (repro runs last)")
    ap.add_argument("--shape", default="qwen3-30b-a3b", choices=sorted(SHAPES))
    ap.add_argument("--max-tokens", type=int, default=4096, help="a rank's tokens at most")
    ap.add_argument("--timeout-ms", type=int, default=2000,
                    help="each wait of a trial's launch")
    ap.add_argument("--repro-timeout-ms", type=int, default=1000)
    ap.add_argument("--repro-tries", type=int, default=3)
    ap.add_argument("--out", help="rank 0 writes the phases' table here (markdown)")
    ap.add_argument("--plan-only", action="store_true",
                    help="print the plan's mix and check every trial (no GPU, no torch)")
    ap.add_argument("--nranks", type=int, default=int(os.environ.get("WORLD_SIZE", 2)),
                    help="with --plan-only: the group's size")
    o = ap.parse_args(argv)
    if o.seed is None:
        env = os.environ.get("HR_TEST_SEED")
        o.seed = int(env) if env else int(time.time() * 1e6) & ((1 << 53) - 1)
    o.phases = [p for p in o.phases.split(",") if p]
    bad = [p for p in o.phases if p not in PHASES]
    if bad:
        ap.error("unknown phase %s (known: %s)" % (",".join(bad), ",".join(PHASES)))
    if "repro" in o.phases:                       # last: it leaves the GPUs busy
        o.phases = [p for p in o.phases if p != "repro"] + ["repro"]
    if o.trials < 1 or o.max_tokens < 16 or o.timeout_ms < 1 or o.repro_tries < 1:
        ap.error("--trials, --repro-tries and --timeout-ms must be >= 1, "
                 "--max-tokens >= 16")
    return o


def plan_only(o):
    """The plan's half of the run, for a machine without GPUs: the mix of
    the first --trials trials and every trial's scripts checked."""
    bad = 0
    for i in range(o.trials):
        t = P.plan_trial(o.seed, i, o.nranks)
        errs = P.check(t, o.nranks)
        if errs:
            bad += 1
            print("trial %d: %s" % (i, "; ".join(errs)))
    m = P.mix_of(o.seed, o.trials, o.nranks)
    print("seed %d, %d ranks, %d trials: orders %s; ops %s; input sets %s; "
          "%d with the backward; %d collectives of %d..%d MiB"
          % (o.seed, o.nranks, o.trials, m.orders, m.ops, m.input_sets, m.backward,
             m.colls, m.min_bytes >> 20, m.max_bytes >> 20))
    for s in range(P.INPUT_SETS):
        print("input set %d: tokens %s" % (s, [P.tokens_of(s, r, o.nranks, o.max_tokens)
                                              for r in range(o.nranks)]))
    print("%s: %d of %d trials wrong" % ("FAIL" if bad else "PASS", bad, o.trials))
    return 1 if bad else 0


# ---- the GPU run -------------------------------------------------------------

def pct(xs, q):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


class Run:
    """One rank: its inputs, references, EP context and daemon client."""

    def __init__(self, o, torch, dist, headroom):
        self.o, self.torch, self.dist, self.hr = o, torch, dist, headroom
        self.local = int(os.environ["LOCAL_RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.rank = RANK
        E, H, I, K = SHAPES[o.shape]
        self.E, self.H, self.I, self.K = E, H, I, K
        if E % self.world:
            die("E = %d is not a multiple of %d ranks" % (E, self.world))
        self.El = E // self.world
        self.e0 = self.rank * self.El
        torch.cuda.set_device(self.local)
        self.dev = torch.device("cuda", self.local)
        self.rows = []                 # the phases' results (rank 0 writes them)

    # -- data --------------------------------------------------------------

    def gen(self, *key):
        # not hash(): str hashes differ between processes (PYTHONHASHSEED)
        g = self.torch.Generator(device=self.dev)
        g.manual_seed((self.o.seed * 1000003 + zlib.crc32(repr(key).encode()))
                      & ((1 << 62) - 1))
        return g

    def inputs_of(self, s, r):
        """Input set s of rank r: (x, ids, weights, dy), made the same on
        every rank (a function of the seed, the set and the rank)."""
        torch = self.torch
        T = P.tokens_of(s, r, self.world, self.o.max_tokens)
        g = self.gen("inputs", s, r)
        x = (torch.rand(T, self.H, device=self.dev, generator=g) * 2 - 1).bfloat16()
        ids = torch.rand(T, self.E, device=self.dev, generator=g).argsort(dim=1)[:, :self.K]
        ids = ids.to(torch.int32).contiguous()
        if s == 1 and T:
            ids[::97, -1] = -1                       # ids outside [0, E): nothing
            ids[5::89, 0] = self.E + 3
        wts = torch.rand(T, self.K, device=self.dev, generator=g) * 0.95 + 0.05
        dy = ((torch.rand(T, self.H, device=self.dev, generator=g) - 0.5) / 4).bfloat16()
        return x, ids, wts.contiguous(), dy

    def setup(self):
        torch, hr = self.torch, self.hr
        o = self.o
        E, H, I, K = self.E, self.H, self.I, self.K
        g = self.gen("weights")
        self.w1 = ((torch.rand(E, 2 * I, H, device=self.dev, generator=g) - 0.5) / 8).bfloat16()
        self.w2 = ((torch.rand(E, H, I, device=self.dev, generator=g) - 0.5) / 8).bfloat16()
        self.w1l = self.w1[self.e0:self.e0 + self.El].contiguous()
        self.w2l = self.w2[self.e0:self.e0 + self.El].contiguous()
        self.sets = []
        one = hr.Moe(E, H, I, K, self.world * o.max_tokens, device=self.local)
        sms = one.sms
        self.sms = sms
        for s in range(P.INPUT_SETS):
            every = [self.inputs_of(s, r) for r in range(self.world)]
            x, ids, wts, dy = every[self.rank]
            T = x.shape[0]
            ref = {}
            y = torch.empty(T, H, device=self.dev, dtype=torch.bfloat16)
            if T:
                one.forward_grid(sms, x, ids, wts, self.w1, self.w2, y)
                one.sync()
            ref["y"] = y
            # the backward over every rank's tokens in rank order
            X = torch.cat([e[0] for e in every])
            IDS = torch.cat([e[1] for e in every])
            WTS = torch.cat([e[2] for e in every])
            DY = torch.cat([e[3] for e in every])
            TT = X.shape[0]
            dX = torch.empty(TT, H, device=self.dev, dtype=torch.bfloat16)
            dW1 = torch.empty(E, 2 * I, H, device=self.dev, dtype=torch.bfloat16)
            dW2 = torch.empty(E, H, I, device=self.dev, dtype=torch.bfloat16)
            dWT = torch.empty(TT, K, device=self.dev, dtype=torch.float32)
            one.backward_grid(sms, hr.Mode.HEADROOM, X, IDS, WTS, self.w1, self.w2, DY,
                              dX, dW1, dW2, dWT)
            one.sync()
            off = sum(e[0].shape[0] for e in every[:self.rank])
            ref["dx"] = dX[off:off + T].clone()
            ref["dwt"] = dWT[off:off + T].clone()
            ref["dw1"] = dW1[self.e0:self.e0 + self.El].clone()
            ref["dw2"] = dW2[self.e0:self.e0 + self.El].clone()
            del dX, dW1, dW2, dWT
            out = {
                "y": torch.empty_like(ref["y"]),
                "dx": torch.empty_like(ref["dx"]),
                "dwt": torch.empty_like(ref["dwt"]),
                "dw1": torch.empty_like(ref["dw1"]),
                "dw2": torch.empty_like(ref["dw2"]),
            }
            self.sets.append(dict(x=x, ids=ids, wts=wts, dy=dy, ref=ref, out=out, T=T))
            if s == 3 and T:
                m = hr.moe_reference(x, ids, wts, self.w1, self.w2)
                err = ((y.float() - m.float()).norm() / m.float().norm()).item()
                log("input set 3: the single-GPU kernel against torch math, rel L2 %.2e"
                    % err)
                if not err < REL_L2_BOUND:
                    die("the reference kernel is wrong (rel L2 %.3g)" % err)
        one.close()
        torch.cuda.synchronize()
        self.same_everywhere()
        self.ep = hr.MoeEP(hr.MoeShape(E, H, I, K, o.max_tokens), self.rank, self.world,
                           self.dist.group.WORLD, device=self.local, backward=True)
        log("EP %d ranks, %s (E %d H %d I %d k %d), experts %d..%d here, %d SMs, "
            "tokens a rank <= %d" % (self.world, o.shape, E, H, I, K, self.e0,
                                     self.e0 + self.El - 1, sms, o.max_tokens))

    def same_everywhere(self):
        """Every rank made the same global weights and the same inputs of
        every rank (torch's CUDA generator gives the same numbers for one
        seed on GPUs of one kind): else each rank's reference would be of
        another problem than the one the ranks solve together."""
        torch = self.torch

        def digest(t):
            # the bits, each weighed by its place, 16M elements at a time
            v = t.contiguous().view(-1).view(torch.int16)
            total, n = 0, 1 << 24
            for i in range(0, v.numel(), n):
                c = v[i:i + n].to(torch.int64)
                w = torch.arange(i + 1, i + 1 + c.numel(), device=c.device,
                                 dtype=torch.int64) % 65521
                total += int((c * w).sum().item())
            return total
        mine = [digest(self.w1), digest(self.w2)]
        for s in range(P.INPUT_SETS):
            for r in range(self.world):
                x = self.inputs_of(s, r)[0]
                mine.append(digest(x) if x.numel() else 0)
        every = [None] * self.world
        self.dist.all_gather_object(every, mine)
        if any(e != every[0] for e in every):
            die("the ranks made different weights or inputs from one seed (digests %s): "
                "are the GPUs of different kinds?" % every)

    # -- launches ----------------------------------------------------------

    def poison(self, st, backward):
        nan = float("nan")
        st["out"]["y"].fill_(nan)
        if backward:
            for k in ("dx", "dwt", "dw1", "dw2"):
                st["out"][k].fill_(nan)

    def same(self, st, backward):
        keys = ("y", "dx", "dwt", "dw1", "dw2") if backward else ("y",)
        return [k for k in keys if not self.torch.equal(st["out"][k], st["ref"][k])]

    def launch(self, how, st, backward, stream, timeout_ms):
        """how: ("lease", lease) or ("grid", grid, mode)."""
        ep, out = self.ep, st["out"]
        a = (st["x"], st["ids"], st["wts"], self.w1l, self.w2l)
        if how[0] == "lease":
            ep.forward(how[1], *a, out["y"], timeout_ms=timeout_ms, stream=stream)
            if backward:
                ep.backward(how[1], *a, st["dy"], out["dx"], out["dw1"], out["dw2"],
                            out["dwt"], timeout_ms=timeout_ms, stream=stream)
        else:
            ep.forward_grid(how[1], *a, out["y"], mode=how[2], timeout_ms=timeout_ms,
                            stream=stream)
            if backward:
                ep.backward_grid(how[1], how[2], *a, st["dy"], out["dx"], out["dw1"],
                                 out["dw2"], out["dwt"], timeout_ms=timeout_ms,
                                 stream=stream)

    def quiet_check(self, how, stream, what):
        """Every input set once with nothing else on the GPUs, forward and
        backward: bitwise the references."""
        torch = self.torch
        for s, st in enumerate(self.sets):
            self.poison(st, True)
            stream.wait_stream(torch.cuda.current_stream(self.dev))
            self.launch(how, st, True, stream, self.o.timeout_ms * 5)
            try:
                self.ep.sync()
            except (self.hr.BarrierTimeout, self.hr.Aborted) as e:
                die("%s, input set %d, quiet: %s" % (what, s, e))
            torch.cuda.current_stream(self.dev).wait_stream(stream)
            bad = self.same(st, True)
            if bad:
                die("%s, input set %d: %s differ from the single-GPU kernel's"
                    % (what, s, ", ".join(bad)))
        log("%s: every input set bitwise the single-GPU kernel's (forward and backward)"
            % what)

    # -- the comms ---------------------------------------------------------

    def comms_make(self, lease, streams):
        """Three NCCL groups (from the lease's config, or NCCL's defaults
        without one), buffers, and every op and size once on each, in the
        same order on every rank (each communicator is made at its first
        collective)."""
        torch, dist = self.torch, self.dist
        ranks = list(range(self.world))
        pgs = []
        for _ in range(P.NCOMMS):
            opts = self.hr.nccl_options(lease) if lease is not None else None
            pgs.append(dist.new_group(ranks, backend="nccl", pg_options=opts))
        n = P.MAX_BYTES // 4
        bufs = [(torch.ones(n, device=self.dev), torch.empty(n, device=self.dev))
                for _ in range(P.NCOMMS)]
        self.comms = dict(pgs=pgs, bufs=bufs, streams=streams)
        torch.cuda.synchronize()
        for c in range(P.NCOMMS):
            for op in P.OPS:
                nb = P.MIN_BYTES
                while nb <= P.MAX_BYTES:
                    ev = self.coll(P.Coll(c, op, nb))
                    self.wait_event(ev, "warm-up %s of %d MiB on comm %d" % (op, nb >> 20, c))
                    nb <<= 1

    def comms_drop(self):
        for pg in self.comms["pgs"]:
            self.dist.destroy_process_group(pg)
        self.comms = None

    def coll(self, c):
        """Queue collective c on its communicator's stream; its end event."""
        torch, dist = self.torch, self.dist
        pg = self.comms["pgs"][c.comm]
        src, dst = self.comms["bufs"][c.comm]
        s = self.comms["streams"][c.comm]
        n = c.nbytes // 4
        m = n // self.world                  # a rank's share of the larger buffer
        with torch.cuda.stream(s):
            # async_op=False: torch >= 2.7 runs the collective on the
            # current stream (this one, in the comm partition where there
            # is one), not on a stream of the group's own
            if c.op == "all-reduce":
                dist.all_reduce(dst[:n], group=pg)   # src stays the gathers' input
            elif c.op == "all-gather":
                dist.all_gather_into_tensor(dst[:m * self.world], src[:m], group=pg)
            else:
                dist.reduce_scatter_tensor(dst[:m], src[:m * self.world], group=pg)
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(s)
        return ev

    def wait_event(self, ev, what):
        wait_event(ev, what)

    # -- one trial ---------------------------------------------------------

    def trial(self, t, how, mega, timeout_ms):
        """Rank's script of trial t; (error or None, wrong outputs, mega ms,
        collectives ms)."""
        torch = self.torch
        st = self.sets[t.input_set]
        self.poison(st, t.backward)
        mega.wait_stream(torch.cuda.current_stream(self.dev))
        for s in self.comms["streams"]:
            s.wait_stream(torch.cuda.current_stream(self.dev))
        evs = []
        m0, m1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        c0 = torch.cuda.Event(enable_timing=True)
        first = True
        for step in P.script(t, self.rank):
            if step.kind == "pause":
                time.sleep(step.arg * 1e-6)
            elif step.kind == "coll":
                if first:
                    c0.record(self.comms["streams"][t.colls[step.arg].comm])
                    first = False
                evs.append(self.coll(t.colls[step.arg]))
            else:
                m0.record(mega)
                self.launch(how, st, t.backward, mega, timeout_ms)
                m1.record(mega)
        err = None
        try:
            self.ep.sync()
        except (self.hr.BarrierTimeout, self.hr.Aborted) as e:
            err = e
        for i, ev in enumerate(evs):
            self.wait_event(ev, "trial %d (%s): collective %d" % (t.index, t.order, i))
        torch.cuda.current_stream(self.dev).wait_stream(mega)
        self.wait_event(m1, "trial %d: the launch's end event" % t.index)
        wrong = [] if err is not None else self.same(st, t.backward)
        coll_ms = max(c0.elapsed_time(ev) for ev in evs) if evs and not first else 0.0
        return err, wrong, m0.elapsed_time(m1), coll_ms

    def all_sum(self, *vals):
        v = self.torch.tensor(list(vals), dtype=self.torch.int64)
        self.dist.all_reduce(v)
        return [int(a) for a in v]

    # -- phases ------------------------------------------------------------

    def lease_take(self, mode):
        """A lease in `mode`, the three footprints registered with the NCCL
        cap it gives, again until the cap holds (it depends on how many
        collectives are in flight, not on their CTAs)."""
        client = self.client
        lease = client.lease(self.local, cluster=LEASE_CLUSTER[mode], mode=mode)
        self.settle(lease)
        cap = lease.budget().nccl_max_ctas
        for _ in range(4):
            regs = [client.register(self.local, "ep-trials-%s-%d" % (mode, c), ctas=cap,
                                    cga=1, concurrent=1) for c in range(P.NCOMMS)]
            self.settle(lease)
            b = lease.budget()
            if b.nccl_max_ctas == cap:
                return lease, regs, b
            for r in regs:
                r.unregister()
            cap = b.nccl_max_ctas
            if cap < 1:
                die("the budget gives NCCL %d CTAs" % cap)
        die("the NCCL cap did not settle (last %d)" % cap)

    def settle(self, lease):
        """Wait until the lease's budget stops changing (300 ms quiet)."""
        for _ in range(50):
            if not lease.wait_change(lease.epoch, 300):
                return
        die("the lease's budget kept changing")

    def phase(self, name, trials):
        torch, hr = self.torch, self.hr
        part = lease = regs = None
        watchdog(180 + trials * 0.2)
        self.dist.barrier()
        if name in LEASE_CLUSTER:
            lease, regs, b = self.lease_take(name)
            if b.degraded:
                die("%s: the lease is degraded" % name)
            what = ("%s lease: grid %d, headroom %d, NCCL %d..%d CTAs, cga %d, epoch %d"
                    % (name, b.grid, b.headroom, b.nccl_min_ctas, b.nccl_max_ctas,
                       b.nccl_cga_cluster_size, b.epoch))
            how = ("lease", lease)
            if name == "partition":
                part = lease.partition()
                streams = [torch.cuda.ExternalStream(part.comm_stream, device=self.dev)]
                streams += [torch.cuda.ExternalStream(part.stream("comm"), device=self.dev)
                            for _ in range(P.NCOMMS - 1)]
                mega = torch.cuda.ExternalStream(part.mega_stream, device=self.dev)
                what += "; partition: comm %d SMs, mega %d" % (part.comm_sms, part.mega_sms)
            else:
                streams = [torch.cuda.Stream(self.dev) for _ in range(P.NCOMMS)]
                mega = torch.cuda.Stream(self.dev)
            grid, headroom = b.grid, b.headroom
        else:
            mode = hr.Mode.AGNOSTIC if name == "agnostic-full" else hr.Mode.HEADROOM
            how = ("grid", self.sms, mode)
            what = "%s: no lease, grid %d (every SM), NCCL at its defaults" % (name, self.sms)
            streams = [torch.cuda.Stream(self.dev) for _ in range(P.NCOMMS)]
            mega = torch.cuda.Stream(self.dev)
            grid, headroom = self.sms, 0
        log(what)
        self.comms_make(lease, streams)
        if name == "repro":
            row = self.repro(how, mega)
        else:
            if name == "headroom":
                self.quiet_check(how, mega, "%s lease" % name)
            row = self.trials(name, how, mega, trials)
        row.update(phase=name, grid=grid, headroom=headroom)
        self.rows.append(row)
        self.comms_drop()
        if part is not None:
            part.close()
        if lease is not None:
            if lease.epoch != b.epoch:
                # a reported timeout raises the headroom: the trials ran on
                # two budgets, and failed already
                log("FAIL %s: the budget changed during the phase (%s)"
                    % (name, lease.budget()))
                row["ok"] = False
            for r in regs:
                r.unregister()
            lease.release()

    def trials(self, name, how, mega, trials):
        o = self.o
        fails = wrong = 0
        mega_ms, coll_ms, orders = [], [], {}
        t0 = time.monotonic()
        for i in range(trials):
            t = P.plan_trial(o.seed, i, self.world)
            orders[t.order] = orders.get(t.order, 0) + 1
            err, bad, mms, cms = self.trial(t, how, mega, o.timeout_ms)
            if err is not None:
                fails += 1
                log("%s trial %d (%s, set %d%s): %s" % (name, i, t.order, t.input_set,
                                                        ", backward" if t.backward else "",
                                                        err))
            elif bad:
                wrong += 1
                log("%s trial %d (%s, set %d): %s not the reference's"
                    % (name, i, t.order, t.input_set, ", ".join(bad)))
            else:
                mega_ms.append(mms)
                if cms:
                    coll_ms.append(cms)
            if (i + 1) % 250 == 0:
                f, w = self.all_sum(fails, wrong)
                log("%s: %d trials, %d failed launches and %d wrong outputs on all ranks"
                    % (name, i + 1, f, w))
        dt = time.monotonic() - t0
        f, w = self.all_sum(fails, wrong)
        every = [None] * self.world
        self.dist.all_gather_object(every, (mega_ms, coll_ms))
        mall = [x for m, _ in every for x in m]
        call = [x for _, c in every for x in c]
        ok = f == 0 and w == 0
        log("%s %s: %d trials in %.1f s, seed %d: %d failed launches, %d wrong outputs on "
            "all ranks; launch ms p50 %.3f p99 %.3f; collectives ms p50 %.3f p99 %.3f"
            % ("PASS" if ok else "FAIL", name, trials, dt, o.seed, f, w, pct(mall, .5),
               pct(mall, .99), pct(call, .5), pct(call, .99)))
        return dict(ok=ok, trials=trials, failed=f, wrong=w, seconds=dt, orders=orders,
                    mega50=pct(mall, .5), mega99=pct(mall, .99), coll50=pct(call, .5),
                    coll99=pct(call, .99))

    def repro(self, how, mega):
        """The full grid in INC-1291's order: every rank must end with the
        error word (BarrierTimeout), never a trap, in one of the tries."""
        torch, hr = self.torch, self.hr
        o = self.o
        seen = 0
        tries = 0
        detail = ""
        while tries < o.repro_tries:
            t = P.repro_trial(tries, self.world)
            tries += 1
            err, bad, mms, _ = self.trial(t, how, mega, o.repro_timeout_ms)
            mine = 0
            if err is not None:
                f = err.failure
                if not isinstance(err, hr.BarrierTimeout) or f is None:
                    die("repro try %d: %r without the EP failure's detail" % (tries, err))
                detail = ("%s: rank %d failed at %s, waited for %d; noticed at %s"
                          % (type(err).__name__, f.failed_rank, f.wait_name, f.waited_for,
                             f.noticed_name))
                log("repro try %d: %s (launch %.0f ms)" % (tries, detail, mms))
                mine = 1
            else:
                log("repro try %d: completed (%.0f ms)%s" % (tries, mms,
                                                              ", WRONG" if bad else ""))
            got, = self.all_sum(mine)
            if got == self.world:
                seen = 1
                break
            if got:
                log("repro try %d: %d of %d ranks failed" % (tries, got, self.world))
        try:
            torch.cuda.synchronize()            # the context has no error: no trap
        except RuntimeError as e:
            die("the CUDA context after the full grid: %s" % e)
        # the quiet GPUs: a launch at a grid every rank can hold is right again
        st = self.sets[0]
        self.poison(st, False)
        mega.wait_stream(torch.cuda.current_stream(self.dev))
        self.launch(("grid", self.sms // 2, hr.Mode.HEADROOM), st, False, mega,
                    o.timeout_ms * 5)
        try:
            self.ep.sync()
        except (hr.BarrierTimeout, hr.Aborted) as e:
            die("the launch after the repro: %s" % e)
        torch.cuda.current_stream(self.dev).wait_stream(mega)
        after = not self.same(st, False)
        a, = self.all_sum(0 if after else 1)
        ok = bool(seen) and a == 0
        log("%s repro: the full grid %s on every rank in try %d of %d (%s); the next "
            "launch %s" % ("PASS" if ok else "FAIL", "failed" if seen else "did NOT fail",
                           tries, o.repro_tries, detail or "-",
                           "bitwise right on every rank" if a == 0 else
                           "WRONG on %d ranks" % a))
        return dict(ok=ok, trials=tries, failed=self.world if seen else 0, wrong=a,
                    seconds=0.0, orders={"cross": tries}, mega50=float("nan"),
                    mega99=float("nan"), coll50=float("nan"), coll99=float("nan"),
                    detail=detail)

    def table(self, machine):
        """The phases' rows as markdown; machine: what ran them."""
        lines = [
            "# The expert-parallel kernel beside NCCL: the trials (%s)"
            % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "",
            "- machine: %s" % machine,
            "- command: `%s` (tests/gpu/test_ep_trials.sh, under torchrun, one process a GPU)"
            % " ".join(["test_ep_trials.py"] + sys.argv[1:]),
            "- shape %s (E %d H %d I %d k %d), %d experts a rank, tokens a rank <= %d; seed %d"
            % (self.o.shape, self.E, self.H, self.I, self.K, self.El, self.o.max_tokens,
               self.o.seed),
            "- pass: no failed launch on any rank, every collective done, every output "
            "bitwise the single-GPU kernel's (repro: every rank fails with the error word, "
            "then a launch is right again)",
            "",
            "| phase | grid | headroom | trials | failed launches | wrong outputs | "
            "launch ms p50 / p99 | collectives ms p50 / p99 | result |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            lines.append("| %s | %d | %d | %d | %d | %d | %.3f / %.3f | %.3f / %.3f | %s |"
                         % (r["phase"], r["grid"], r["headroom"], r["trials"], r["failed"],
                            r["wrong"], r["mega50"], r["mega99"], r["coll50"], r["coll99"],
                            ("pass" if r["ok"] else "FAIL")
                            + (" (%s)" % r["detail"] if r.get("detail") else "")))
        return "\n".join(lines) + "\n"

    def main(self):
        torch, hr = self.torch, self.hr
        o = self.o
        for var in ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_CGA_CLUSTER_SIZE"):
            if os.environ.get(var):
                die("%s is set: it would override every communicator's config" % var)
        if os.environ.get("NCCL_NVLS_ENABLE") != "0":
            die("NCCL_NVLS_ENABLE is not 0")
        ver = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
        if ver < (2, 7):
            die("torch %s runs a synchronous collective on a stream of its own, not on "
                "the current one (2.7 and later do): the partition phase needs it"
                % torch.__version__)
        watchdog(600)
        self.client = hr.Client(name="ep-trials-rank%d" % self.rank)
        if not self.client.connected:
            die("no headroomd at %s" % self.client.socket)
        self.dist.init_process_group("gloo")
        log("seed %d (HR_TEST_SEED=%d repeats this run), phases %s, %d trials a phase"
            % (o.seed, o.seed, ",".join(o.phases), o.trials))
        self.setup()
        for name in o.phases:
            self.phase(name, o.trials)
        watchdog(120)
        self.dist.barrier()
        self.ep.close()
        self.dist.destroy_process_group()
        self.client.close()
        faulthandler.cancel_dump_traceback_later()
        ok = all(r["ok"] for r in self.rows)
        if self.rank == 0 and o.out:
            with open(o.out, "w") as f:
                f.write(self.table("%d x %s; torch %s" % (
                    self.world, torch.cuda.get_device_name(self.dev), torch.__version__)))
        log("PASS" if ok else "FAIL: " + ", ".join(r["phase"] for r in self.rows
                                                    if not r["ok"]))
        return 0 if ok else 1


def main(argv=None):
    o = options(argv)
    if o.plan_only:
        return plan_only(o)
    import torch
    import torch.distributed as dist
    import headroom
    world = int(os.environ.get("WORLD_SIZE", "0"))
    if not 2 <= world <= 8:
        die("run under torchrun with --nproc-per-node 2..8 (world size %d)" % world)
    return Run(o, torch, dist, headroom).main()


if __name__ == "__main__":
    sys.exit(main())
