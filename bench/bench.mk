# bench/: benchmarks. `make bench-gpu` (an H200 with PyTorch): the two
# mega-MoE kernels (barrier and residency-agnostic) against the PyTorch
# reference MoE, with the copy and GEMM ceilings measured in the same run;
# the table goes to stdout and to BENCH_OUT.
BENCH_OUT ?= $(BUILD)/bench-moe.md
comma := ,
empty :=
space := $(empty) $(empty)

.PHONY: bench-gpu
bench-gpu: $(LIBDIR)/libheadroom_moe.so
	python3 bench/bench_moe.py --lib $(LIBDIR)/libheadroom_moe.so --out $(BENCH_OUT) $(BENCH_ARGS)

# The same, with build-time variants of the tile shapes timed beside the
# default (see kernels/kernels.mk, MOE_VARIANTS; BENCH_ARGS may give
# --variant-tokens).
.PHONY: bench-variants
bench-variants: $(LIBDIR)/libheadroom_moe.so kernels-variants
	python3 bench/bench_moe.py --lib $(LIBDIR)/libheadroom_moe.so --out $(BENCH_OUT) \
	  --variants $(subst $(space),$(comma),$(foreach v,$(MOE_VARIANTS),$(v)=$(LIBDIR)/variants/libheadroom_moe-$(v).so)) \
	  $(BENCH_ARGS)
