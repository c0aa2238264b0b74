"""bench/multicast_bytes.py: the byte model docs/kernels.md quotes for
2-CTA multicast, on cases whose answer is known by hand."""
import importlib.util
import os
import unittest

import hrtest

spec = importlib.util.spec_from_file_location(
    "multicast_bytes", os.path.join(hrtest.ROOT, "bench", "multicast_bytes.py"))
M = importlib.util.module_from_spec(spec)
spec.loader.exec_module(M)


class Model(unittest.TestCase):
    def test_two_full_tiles(self):
        # 256 pairs: two units of 32 + 16 KB now; a pair of CTAs with
        # 16 + 16 each; the token boxes halved: 32 + 8
        now, wmc, tmc = M.stage_kb([256])
        self.assertEqual((now, wmc, tmc), (96.0, 64.0, 80.0))

    def test_a_lone_tile_costs_its_partner(self):
        now, wmc, tmc = M.stage_kb([128])
        self.assertEqual((now, wmc, tmc), (48.0, 64.0, 40.0))

    def test_tail_boxes_of_16(self):
        now, _, _ = M.stage_kb([129])        # a full tile and a tail of one row
        self.assertEqual(now, 48.0 + 32 + 2)
        self.assertEqual(M.stage_kb([0]), (0.0, 0.0, 0.0))

    def test_balanced_and_random(self):
        c = M.counts(8192, 256, 8, 1, balanced=True)
        self.assertEqual(set(c), {256})
        now, wmc, tmc = M.stage_kb(c)
        self.assertAlmostEqual(wmc / now, 2 / 3)
        self.assertAlmostEqual(tmc / now, 5 / 6)
        r = M.counts(4096, 256, 8, 1)
        self.assertEqual(sum(r), 4096 * 8)
        now, wmc, _ = M.stage_kb(r)
        self.assertGreater(wmc / now, 0.9)   # one tile an expert: nothing to pair


if __name__ == "__main__":
    unittest.main()
