"""bench/bench_train.py: its torch reference (ref_moe_train, autograd
through torch._grouped_mm, what the training table times against the
kernels) against a plain loop over tokens and slots, on the CPU: y and the
gradients of x, the routing weights, W1 and W2, in fp32 (tight) and bf16
(loose); an expert without pairs gets a zero gradient; every slot to one
expert. And the script without a GPU: one line saying it needs one, exit 0.
The reference tests skip where torch (or its _grouped_mm) is missing."""
import importlib.util
import os
import subprocess
import sys
import unittest

import hrtest

torch = hrtest.torch_or_none()
SCRIPT = os.path.join(hrtest.ROOT, "bench", "bench_train.py")


def load_bench_train():
    spec = importlib.util.spec_from_file_location("bench_train", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def naive_moe(x, ids, w, w1, w2):
    """y[t] = sum_j w[t,j] W2[e] (silu(W1g[e] x[t]) * W1u[e] x[t]), one
    token and one slot at a time, in x's dtype."""
    T, k = ids.shape
    I = w1.shape[1] // 2
    rows = []
    for t in range(T):
        acc = torch.zeros(x.shape[1], dtype=torch.float32)
        for j in range(k):
            e = int(ids[t, j])
            h = w1[e] @ x[t]
            a = torch.nn.functional.silu(h[:I]) * h[I:]
            acc = acc + w[t, j] * (w2[e] @ a).float()
        rows.append(acc)
    return torch.stack(rows)


def grads(fn, x, ids, w, w1, w2, dy):
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, w1, w2)]
    xl, wl, w1l, w2l = leaves
    y = fn(xl, ids, wl, w1l, w2l)
    y.backward(dy.to(y.dtype))
    return [y.detach()] + [t.grad for t in leaves]


def have_grouped_mm():
    return torch is not None and hasattr(torch, "_grouped_mm")


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


@unittest.skipUnless(have_grouped_mm(), "torch (with torch._grouped_mm) is not "
                     "importable here")
class TestRefMoeTrain(unittest.TestCase):
    # E, H, I: strides of the transposed weights multiples of 16 bytes
    E, H, I, k, T = 5, 32, 16, 2, 24

    def setUp(self):
        self.bt = load_bench_train()
        self.gen = torch.Generator().manual_seed(7)

    def problem(self, dtype, ids=None):
        g = self.gen
        E, H, I, k, T = self.E, self.H, self.I, self.k, self.T
        x = (torch.rand(T, H, generator=g) * 2 - 1).to(dtype)
        if ids is None:
            # k distinct experts per token among 0..E-2: expert E-1 gets none
            ids = torch.stack([torch.randperm(E - 1, generator=g)[:k] for _ in range(T)])
        ids = ids.to(torch.int32)
        w = torch.rand(T, k, generator=g) * 0.95 + 0.05
        w1 = ((torch.rand(E, 2 * I, H, generator=g) * 2 - 1) * H ** -0.5).to(dtype)
        w2 = ((torch.rand(E, H, I, generator=g) * 2 - 1) * I ** -0.5).to(dtype)
        dy = torch.rand(T, H, generator=g) * 2 - 1
        return x, ids, w, w1, w2, dy

    def compare(self, dtype, bound, ids=None):
        x, ids, w, w1, w2, dy = self.problem(dtype, ids)
        got = grads(self.bt.ref_moe_train, x, ids, w, w1, w2, dy)
        want = grads(naive_moe, x.float(), ids, w, w1.float(), w2.float(), dy)
        for name, a, b in zip(("y", "dx", "dw", "dW1", "dW2"), got, want):
            self.assertEqual(a.shape, b.shape, name)
            self.assertTrue(bool(torch.isfinite(a).all()), name)
            self.assertLess(rel(a, b), bound, "%s: rel L2 %.3g" % (name, rel(a, b)))
        return ids, got

    def test_fp32_matches_the_loop(self):
        ids, got = self.compare(torch.float32, 1e-5)
        # expert E-1 has no pairs: its dW exactly 0 (an empty group)
        self.assertFalse(bool((ids == self.E - 1).any()))
        self.assertTrue(bool((got[3][self.E - 1] == 0).all()))
        self.assertTrue(bool((got[4][self.E - 1] == 0).all()))

    def test_bf16_matches_the_loop(self):
        try:
            self.compare(torch.bfloat16, 3e-2)
        except RuntimeError as e:            # a torch without CPU bf16 grouped mm
            self.skipTest("torch._grouped_mm in bf16 on the CPU: %s" % e)

    def test_all_slots_to_one_expert(self):
        ids = torch.full((self.T, self.k), 2, dtype=torch.int32)
        _, got = self.compare(torch.float32, 1e-5, ids=ids)
        for e in (0, 1, 3, 4):
            self.assertTrue(bool((got[3][e] == 0).all()), e)

    def test_expert_order_is_stable(self):
        # Pairs are taken in pair order within each expert: a token routed
        # to the same expert in both slots sums both rows.
        ids = torch.tensor([[1, 1]] * self.T, dtype=torch.int32)
        self.compare(torch.float32, 1e-5, ids=ids)


class TestWithoutGPU(unittest.TestCase):
    def test_says_it_needs_a_gpu(self):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        p = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True,
                           env=env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("needs a GPU", p.stdout)
        self.assertIn("nothing measured", p.stdout)


if __name__ == "__main__":
    unittest.main()
