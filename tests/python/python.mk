# tests/python: the Python binding (python/headroom) against the real
# headroomd and libheadroom, with the standard library's unittest; no torch
# needed (its tests say they skip). tests/python/run.sh runs them, and
# builds and runs examples/lease.c on the way so the example cannot rot;
# test_trace_summary.py, test_ncu_lines.py and test_ab_table.py check
# bench/trace_summary.py, bench/ncu_lines.py and bench/ab_table.py (with
# bench/ab_builds.sh) on a made-up timeline, profile and timings;
# test_bench_train.py bench/bench_train.py's torch reference against a
# plain loop on the CPU (skipped without torch) and its no-GPU message;
# test_bench_moe.py the hr_moe_args bench/bench_moe.py passes, the
# balanced routing and its no-GPU message;
# test_moe_ep.py MoeEP and its bootstraps (VirtualGroup's threads, the
# library's collective create through the Python callback), test_nn_ep.py
# MegaMoE(ep_group=...) and headroom.ep_reference on threads and on a
# two-process gloo group (ep_gloo_child.py, ep_cases.py), and
# test_bench_ep.py bench/bench_ep.py's arguments, table and virtual-rank
# flow on the CPU (each with GPU tests that skip without one);
# test_build_rev.py bench/build_rev.sh and test_kernels_digest.py
# bench/kernels_digest.sh in throwaway repositories; test_doc_links.py
# that every relative link in the tree's Markdown files resolves.
INTEG_TESTS += tests/python/run.sh

tests/python/run.sh: $(BINDIR)/headroomd $(LIBDIR)/libheadroom.so

# The same tests alone (gpu_report.sh's python step: on a GPU machine
# with torch, headroom.nn's GPU tests run too).
.PHONY: python-test
python-test: all
	sh tests/python/run.sh

# The torchrun overlap test on two GPUs (tests/gpu/test_torch_overlap.py):
# its wrapper prints a SKIP line and exits 77 with fewer than 2 GPUs, no
# torch, or no libheadroom_moe.
GPU_TESTS += tests/gpu/test_torch_overlap.sh
GPU_TESTS_2 += tests/gpu/test_torch_overlap.sh

tests/gpu/test_torch_overlap.sh: $(BINDIR)/headroomd $(LIBDIR)/libheadroom.so \
                                 $(MOE_LIB_SO)

# The expert-parallel trials on 2..8 GPUs beside NCCL
# (tests/gpu/test_ep_trials.py): the same kind of wrapper; its plan's half
# (tests/gpu/ep_trials_plan.py) runs everywhere, also as
# tests/python/test_ep_trials_plan.py.
GPU_TESTS += tests/gpu/test_ep_trials.sh
GPU_TESTS_2 += tests/gpu/test_ep_trials.sh

tests/gpu/test_ep_trials.sh: $(BINDIR)/headroomd $(LIBDIR)/libheadroom.so \
                             $(MOE_LIB_SO)
