"""ep_trials_plan.py: the seeded plan of the expert-parallel overlap
trials (tests/gpu/test_ep_trials.py), and the script each rank follows in
one trial. Plain Python, no torch: tests/python/test_ep_trials_plan.py
checks it on every machine.

A trial is an input set, a launch order, a mix of collectives and
whether the backward runs after the forward. It is a pure function of
(seed, index), so every rank (a process of its own under torchrun)
derives the same plan from the seed alone, and a failing trial can be
repeated from the seed the run prints.

The launch orders, per rank ("mega" = the EP kernel's epoch: the forward,
and the backward right after it on the same stream where the trial has
one):

  cross         the INC-1291 order: the odd ranks launch their mega
                kernel first, then every rank enqueues the collectives,
                then, 2 ms later, the even ranks launch theirs. One
                collective (communicator 0) is already in flight on the
                odd ranks when their kernel starts, and the even ranks
                enqueue its partner after their kernel.
  coll-first    every collective first, a pause (0-2 ms), then mega.
  mega-first    mega first, a pause (0-2 ms), then every collective.
  back-to-back  two to four collectives queued on communicator 0's one
                stream; each rank launches mega after its own (random)
                number of them.
  concurrent    one collective on each of the three communicators, each
                on its stream; each rank launches mega after its own
                (random) number of them.

The EP kernel's dispatch and return are cross-GPU traffic of their own,
so every order can close a cycle through the collectives when a kernel is
only partly resident: what a lease prevents.

Collectives are FSDP2's: all-gather (parameters), reduce-scatter
(gradients), all-reduce (replicas), of 1, 2, 4, ... 64 MiB (the larger of
the send and receive buffers, fp32). Each communicator's collectives come
in the same order on every rank (NCCL needs it), and at most three are in
flight on a GPU at once (one a communicator): the footprint the trials
register with the daemon.
"""
from dataclasses import dataclass, field
from typing import List, Tuple

NCOMMS = 3                     # communicators, a stream each
MAX_COLL = 4                   # collectives in one trial
MAX_BYTES = 64 << 20
MIN_BYTES = 1 << 20
OPS = ("all-reduce", "all-gather", "reduce-scatter")
ORDERS = ("cross", "coll-first", "mega-first", "back-to-back", "concurrent")
CROSS_ODD_PAUSE_US = 1000      # comm 0 resident and waiting on the odd ranks
CROSS_EVEN_PAUSE_US = 2000     # INC-1291's 2 ms between the two launches
BACKWARD_ONE_IN = 3            # one trial in three runs the backward too

# The input sets: per set, each rank's token count as a function of its
# rank and the group's size (0 <= T <= max_tokens). Set 0 is the large
# one, set 2 leaves one rank without tokens and the others uneven.
INPUT_SETS = 4


def tokens_of(input_set: int, rank: int, nranks: int, max_tokens: int) -> int:
    """Rank `rank`'s token count in input set `input_set`."""
    if not 0 <= input_set < INPUT_SETS:
        raise ValueError("input set %r outside 0..%d" % (input_set, INPUT_SETS - 1))
    if not 0 <= rank < nranks:
        raise ValueError("rank %r outside 0..%d" % (rank, nranks - 1))
    if input_set == 0:
        return max_tokens
    if input_set == 1:
        return min(1024, max_tokens)
    if input_set == 2:
        if rank == nranks - 1:
            return 0
        return min((16, 128, 1024)[rank % 3], max_tokens)
    return min(16, max_tokens)


_MASK = (1 << 64) - 1


class _Rng:
    """splitmix64, as the C trials' plan (trials_plan.c): a trial's numbers
    depend on (seed, index) only, never on the trials drawn before it."""

    def __init__(self, seed: int, index: int):
        self.s = (seed ^ ((index + 1) * 0xd1b54a32d192ed03)) & _MASK
        self.next()

    def next(self) -> int:
        self.s = (self.s + 0x9e3779b97f4a7c15) & _MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & _MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.next() % n


@dataclass(frozen=True)
class Coll:
    comm: int          # 0..NCOMMS-1
    op: str            # one of OPS
    nbytes: int        # the larger buffer, per rank


@dataclass(frozen=True)
class Trial:
    index: int
    order: str
    input_set: int
    backward: bool
    colls: Tuple[Coll, ...]
    mega_at: Tuple[int, ...]   # back-to-back, concurrent: per rank
    gap_us: int


@dataclass(frozen=True)
class Step:
    kind: str          # "coll", "pause", "mega"
    arg: int = 0       # coll: index into Trial.colls; pause: microseconds


def _coll(r: _Rng, comm: int) -> Coll:
    op = OPS[r.below(len(OPS))]
    return Coll(comm, op, MIN_BYTES << r.below(7))


def plan_trial(seed: int, index: int, nranks: int) -> Trial:
    """Trial `index` of the run seeded `seed`, for a group of nranks."""
    if nranks < 2:
        raise ValueError("the trials need 2 ranks or more, not %r" % (nranks,))
    r = _Rng(seed, index)
    input_set = r.below(INPUT_SETS)
    order = ORDERS[r.below(len(ORDERS))]
    if order in ("cross", "concurrent"):
        ncoll = NCOMMS
    elif order in ("coll-first", "mega-first"):
        ncoll = 1 + r.below(NCOMMS)
    else:
        ncoll = 2 + r.below(MAX_COLL - 1)
    colls = tuple(_coll(r, 0 if order == "back-to-back" else i)
                  for i in range(ncoll))
    mega_at = tuple(r.below(ncoll + 1) for _ in range(nranks))
    # Long enough, at the top, for a collective to be resident and
    # waiting for its peer before the next launch.
    gap_us = (r.below(2001) if order in ("coll-first", "mega-first")
              else r.below(1001))
    backward = r.below(BACKWARD_ONE_IN) == 0
    return Trial(index, order, input_set, backward, colls, mega_at, gap_us)


def repro_trial(index: int, nranks: int) -> Trial:
    """The full-grid reproduction: INC-1291's order and collectives (three
    concurrent 64 MiB all-reduces), the large input set, forward only."""
    if nranks < 2:
        raise ValueError("the trials need 2 ranks or more, not %r" % (nranks,))
    colls = tuple(Coll(i, "all-reduce", MAX_BYTES) for i in range(NCOMMS))
    return Trial(index, "cross", 0, False, colls, (0,) * nranks, 0)


def script(t: Trial, rank: int) -> List[Step]:
    """What rank `rank` does in trial t, in order."""
    if not 0 <= rank < len(t.mega_at):
        raise ValueError("rank %r outside the trial's %d ranks" % (rank, len(t.mega_at)))
    out: List[Step] = []

    def add(kind, arg=0):
        if kind == "pause" and arg <= 0:
            return
        out.append(Step(kind, arg))

    n = len(t.colls)
    if t.order == "cross":
        if rank % 2 == 1:
            add("coll", 0)
            add("pause", CROSS_ODD_PAUSE_US)
            add("mega")
            for i in range(1, n):
                add("coll", i)
        else:
            for i in range(1, n):
                add("coll", i)
            add("pause", CROSS_EVEN_PAUSE_US)
            add("mega")
            add("coll", 0)
    elif t.order == "coll-first":
        for i in range(n):
            add("coll", i)
        add("pause", t.gap_us)
        add("mega")
    elif t.order == "mega-first":
        add("mega")
        add("pause", t.gap_us)
        for i in range(n):
            add("coll", i)
    else:
        for i in range(n + 1):
            if i == t.mega_at[rank]:
                add("mega")
                if i < n:
                    add("pause", t.gap_us)
            if i < n:
                add("coll", i)
                if i + 1 < n:
                    add("pause", t.gap_us)
    return out


def check(t: Trial, nranks: int) -> List[str]:
    """What is wrong with trial t for NCCL and for the footprint, as
    messages (none when it is right): every rank runs mega exactly once
    and every collective once; each communicator's collectives come in the
    same order on every rank; no more than NCOMMS in flight a GPU."""
    if nranks != len(t.mega_at):
        return ["the trial is for %d ranks, not %d" % (len(t.mega_at), nranks)]
    errs = []
    per_comm_order = None
    for rank in range(nranks):
        steps = script(t, rank)
        megas = sum(1 for s in steps if s.kind == "mega")
        if megas != 1:
            errs.append("rank %d runs mega %d times" % (rank, megas))
        seen = [s.arg for s in steps if s.kind == "coll"]
        if sorted(seen) != list(range(len(t.colls))):
            errs.append("rank %d runs collectives %s of %d" % (rank, seen, len(t.colls)))
        order = {}
        for i in seen:
            order.setdefault(t.colls[i].comm, []).append(i)
        if per_comm_order is None:
            per_comm_order = order
        elif order != per_comm_order:
            errs.append("rank %d issues a communicator's collectives in another "
                        "order (%s against %s)" % (rank, order, per_comm_order))
    comms = {c.comm for c in t.colls}
    if len(comms) > NCOMMS or any(not 0 <= c < NCOMMS for c in comms):
        errs.append("communicators %s outside 0..%d" % (sorted(comms), NCOMMS - 1))
    for c in t.colls:
        if c.op not in OPS or not MIN_BYTES <= c.nbytes <= MAX_BYTES:
            errs.append("collective %s" % (c,))
    return errs


@dataclass
class Mix:
    orders: dict = field(default_factory=dict)
    ops: dict = field(default_factory=dict)
    input_sets: dict = field(default_factory=dict)
    backward: int = 0
    colls: int = 0
    min_bytes: int = 0
    max_bytes: int = 0


def mix_of(seed: int, trials: int, nranks: int) -> Mix:
    """How often each order, op, input set and the backward come up in the
    first `trials` trials of a run (printed at the start of a run)."""
    m = Mix()
    for i in range(trials):
        t = plan_trial(seed, i, nranks)
        m.orders[t.order] = m.orders.get(t.order, 0) + 1
        m.input_sets[t.input_set] = m.input_sets.get(t.input_set, 0) + 1
        m.backward += t.backward
        for c in t.colls:
            m.ops[c.op] = m.ops.get(c.op, 0) + 1
            m.min_bytes = c.nbytes if not m.colls else min(m.min_bytes, c.nbytes)
            m.max_bytes = max(m.max_bytes, c.nbytes)
            m.colls += 1
    return m
