"""tests/gpu/ep_trials_plan.py: the plan of the expert-parallel overlap
trials, on every machine (the trials themselves need 2 GPUs). Every trial
of a long run must give each rank a script NCCL can run (each collective
once a rank, a communicator's collectives in the same order on every
rank, mega once), the plan must depend on (seed, index) alone, the mix
must reach every order, op, size and input set, and the cross order must
be INC-1291's."""
import os
import sys
import unittest

import hrtest

sys.path.insert(0, os.path.join(hrtest.ROOT, "tests", "gpu"))
import ep_trials_plan as P  # noqa: E402

SEED = 1883274049336243


class Plan(unittest.TestCase):
    def test_every_trial_runs_for_nccl(self):
        for nranks in (2, 3, 4, 8):
            for i in range(3000):
                t = P.plan_trial(SEED, i, nranks)
                self.assertEqual(P.check(t, nranks), [], (nranks, t))
                self.assertEqual(len(t.mega_at), nranks)

    def test_check_finds_what_nccl_cannot_run(self):
        t = P.plan_trial(SEED, 0, 2)
        # two collectives on one communicator, mega between them on one
        # rank only: each rank still issues them in the same order
        bad = P.Trial(0, "concurrent", 0, False,
                      (P.Coll(0, "all-reduce", P.MIN_BYTES),
                       P.Coll(0, "all-gather", P.MIN_BYTES)),
                      (0, 2), 0)
        self.assertEqual(P.check(bad, 2), [])
        swapped = P.Trial(0, "back-to-back", 0, False, bad.colls, (0, 1), 0)
        self.assertEqual(P.check(swapped, 2), [])
        too_big = P.Trial(0, "coll-first", 0, False,
                          (P.Coll(0, "all-reduce", 2 * P.MAX_BYTES),), (0, 0), 5)
        self.assertTrue(P.check(too_big, 2))
        bad_comm = P.Trial(0, "coll-first", 0, False,
                           (P.Coll(5, "all-reduce", P.MIN_BYTES),), (0, 0), 5)
        self.assertTrue(P.check(bad_comm, 2))
        bad_op = P.Trial(0, "coll-first", 0, False,
                         (P.Coll(0, "broadcast", P.MIN_BYTES),), (0, 0), 5)
        self.assertTrue(P.check(bad_op, 2))
        self.assertEqual(P.check(t, 2), [])

    def test_check_sees_ranks_out_of_step(self):
        # a rank whose script leaves a collective out is caught
        t = P.Trial(0, "cross", 0, False,
                    tuple(P.Coll(i, "all-reduce", P.MIN_BYTES) for i in range(2)),
                    (0, 0), 0)
        self.assertEqual(P.check(t, 2), [])
        orig = P.script

        def dropping(trial, rank):
            steps = orig(trial, rank)
            if rank == 1:
                steps = [s for s in steps if not (s.kind == "coll" and s.arg == 0)]
            return steps
        P.script = dropping
        try:
            self.assertTrue(P.check(t, 2))
        finally:
            P.script = orig

    def test_same_seed_same_trial_whatever_came_before(self):
        a = [P.plan_trial(SEED, i, 2) for i in range(200)]
        b = [P.plan_trial(SEED, i, 2) for i in reversed(range(200))][::-1]
        self.assertEqual(a, b)
        self.assertNotEqual(a, [P.plan_trial(SEED + 1, i, 2) for i in range(200)])

    def test_the_mix_reaches_everything(self):
        m = P.mix_of(SEED, 1000, 2)
        self.assertEqual(set(m.orders), set(P.ORDERS))
        self.assertEqual(set(m.ops), set(P.OPS))
        self.assertEqual(set(m.input_sets), set(range(P.INPUT_SETS)))
        self.assertEqual((m.min_bytes, m.max_bytes), (P.MIN_BYTES, P.MAX_BYTES))
        self.assertTrue(200 < m.backward < 470, m.backward)
        for o in P.ORDERS:
            self.assertGreater(m.orders[o], 120, o)

    def test_cross_is_inc_1291(self):
        t = P.repro_trial(0, 2)
        self.assertEqual([c.op for c in t.colls], ["all-reduce"] * 3)
        self.assertEqual({c.nbytes for c in t.colls}, {64 << 20})
        odd = P.script(t, 1)
        even = P.script(t, 0)
        self.assertEqual(odd, [P.Step("coll", 0), P.Step("pause", 1000), P.Step("mega"),
                               P.Step("coll", 1), P.Step("coll", 2)])
        self.assertEqual(even, [P.Step("coll", 1), P.Step("coll", 2), P.Step("pause", 2000),
                                P.Step("mega"), P.Step("coll", 0)])
        self.assertEqual(P.script(P.repro_trial(0, 8), 6), even)
        self.assertEqual(P.check(P.repro_trial(0, 8), 8), [])
        self.assertTrue(P.check(t, 8))          # a trial of 2 ranks for 8

    def test_mega_position_is_each_ranks_own(self):
        seen = set()
        for i in range(500):
            t = P.plan_trial(SEED, i, 2)
            if t.order in ("back-to-back", "concurrent"):
                for r in range(2):
                    steps = P.script(t, r)
                    at = [s.kind for s in steps if s.kind != "pause"].index("mega")
                    self.assertEqual(at, t.mega_at[r])
                seen.add(t.mega_at[0] != t.mega_at[1])
        self.assertEqual(seen, {True, False})

    def test_input_sets(self):
        for nranks in (2, 8):
            for s in range(P.INPUT_SETS):
                ts = [P.tokens_of(s, r, nranks, 4096) for r in range(nranks)]
                self.assertTrue(all(0 <= t <= 4096 for t in ts), ts)
            self.assertEqual(P.tokens_of(0, 0, nranks, 4096), 4096)
            self.assertEqual(P.tokens_of(2, nranks - 1, nranks, 4096), 0)
        self.assertEqual(P.tokens_of(1, 0, 2, 512), 512)

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            P.plan_trial(SEED, 0, 1)
        with self.assertRaises(ValueError):
            P.repro_trial(0, 1)
        with self.assertRaises(ValueError):
            P.script(P.plan_trial(SEED, 0, 2), 2)
        with self.assertRaises(ValueError):
            P.tokens_of(P.INPUT_SETS, 0, 2, 16)
        with self.assertRaises(ValueError):
            P.tokens_of(0, 2, 2, 16)


if __name__ == "__main__":
    unittest.main()
