# bench/: benchmarks. `make bench-gpu` (an H200 with PyTorch): the mega-MoE
# kernel against the PyTorch reference MoE, with the copy and GEMM ceilings
# measured in the same run; the table goes to stdout and to BENCH_OUT.
BENCH_OUT ?= $(BUILD)/bench-moe.md

.PHONY: bench-gpu
bench-gpu: $(LIBDIR)/libheadroom_moe.so
	python3 bench/bench_moe.py --lib $(LIBDIR)/libheadroom_moe.so --out $(BENCH_OUT) $(BENCH_ARGS)
