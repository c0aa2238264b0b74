# bench/: benchmarks. `make bench-gpu` (an H200 with PyTorch): the two
# mega-MoE kernels (barrier and residency-agnostic) against the PyTorch
# reference MoE, with the copy and GEMM ceilings measured in the same run;
# the table goes to stdout and to BENCH_OUT. Then the training table
# (bench-train, below) into BENCH_TRAIN_OUT; BENCH_TRAIN=0 leaves it out.
BENCH_OUT ?= $(BUILD)/bench-moe.md
BENCH_TRAIN ?= 1
comma := ,
empty :=
space := $(empty) $(empty)

.PHONY: bench-gpu
bench-gpu: $(LIBDIR)/libheadroom_moe.so
	python3 bench/bench_moe.py --lib $(LIBDIR)/libheadroom_moe.so --out $(BENCH_OUT) $(BENCH_ARGS)
	@if [ "$(BENCH_TRAIN)" != 0 ]; then $(MAKE) --no-print-directory bench-train; fi

# `make bench-train` (an H200 with PyTorch): one MoE training step,
# forward + backward, on the kernels (Moe.forward_grid + backward_grid
# with dW bf16 and fp32, and headroom.nn.MegaMoE under autograd) against
# torch autograd through torch._grouped_mm, CUDA graphs on both sides
# (bench/bench_train.py); the table to stdout and BENCH_TRAIN_OUT. Without
# a GPU it says it needs one and succeeds, measuring nothing.
BENCH_TRAIN_OUT ?= $(BUILD)/bench-train.md

.PHONY: bench-train
bench-train: $(LIBDIR)/libheadroom_moe.so $(LIBDIR)/libheadroom.so
	python3 bench/bench_train.py --lib $(LIBDIR)/libheadroom_moe.so --out $(BENCH_TRAIN_OUT) $(BENCH_TRAIN_ARGS)

# `make bench-ep` (an H200 with PyTorch): the expert-parallel MoE layer,
# headroom.nn.MegaMoE(ep_group=...) on the EP kernel, against the plain-torch
# EP layer trainers run today (headroom.ep_reference: all_to_all_single and
# torch._grouped_mm), forward and forward + backward, ms per rank and the
# ratio (bench/bench_ep.py); the table to stdout and BENCH_EP_OUT.
# BENCH_EP_NPROC=N: N GPUs under torchrun, one process each (NCCL); 0, the
# default: BENCH_EP_VIRTUAL virtual ranks on GPU 0 (threads, a stream and
# SMs / R each; the baseline's exchange is then a local copy). Without a
# GPU it says it needs one and succeeds, measuring nothing.
BENCH_EP_OUT ?= $(BUILD)/bench-ep.md
BENCH_EP_NPROC ?= 0
BENCH_EP_VIRTUAL ?= 2
ifeq ($(BENCH_EP_NPROC),0)
BENCH_EP_RUN = python3 bench/bench_ep.py --virtual $(BENCH_EP_VIRTUAL)
else
BENCH_EP_RUN = torchrun --standalone --nproc-per-node $(BENCH_EP_NPROC) bench/bench_ep.py
endif

.PHONY: bench-ep
bench-ep: $(LIBDIR)/libheadroom_moe.so $(LIBDIR)/libheadroom.so
	$(BENCH_EP_RUN) --lib $(LIBDIR)/libheadroom_moe.so --out $(BENCH_EP_OUT) $(BENCH_EP_ARGS)

# `make bench-phases` (an H200; no PyTorch needed): where the time goes.
# Each kernel's normal launch against launches that leave one phase out or
# run it twice (bench/moe_phases.c), through the benchmark hook
# (kernels/moe_bench.h), which only the static library exports.
BENCH_PHASES_OUT ?= $(BUILD)/bench-phases.md
MOE_PHASES := $(TESTBIN)/moe_phases

.PHONY: bench-phases
bench-phases: $(MOE_PHASES)
	$(MOE_PHASES) --out $(BENCH_PHASES_OUT) $(BENCH_PHASES_ARGS)

# `make bench-routing` (an H200): the same normal launches under random
# and under balanced routing, side by side (bench/routing_ab.sh): what the
# experts' part-filled last tiles cost.
BENCH_ROUTING_OUT ?= $(BUILD)/bench-routing.md
BENCH_ROUTING_ARGS ?= --shapes deepseek-v3,qwen3-30b-a3b --tokens 2048,4096,8192,16384

.PHONY: bench-routing
bench-routing: $(MOE_PHASES)
	sh bench/routing_ab.sh $(MOE_PHASES) $(BENCH_ROUTING_OUT) $(BENCH_ROUTING_ARGS)

$(OBJDIR)/bench/moe_phases.o: CPPFLAGS += -I$(CUDA_HOME)/include -Itests/gpu

$(MOE_PHASES): $(OBJDIR)/bench/moe_phases.o $(OBJDIR)/tests/gpu/gpu_util.o \
               $(OBJDIR)/tests/gpu/gpu_kernels.cu.o $(OBJDIR)/kernels/moe_ref.o \
               $(LIBDIR)/libheadroom_moe.a $(LIBDIR)/libheadroom.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIBDIR)/libheadroom_moe.a \
	  -L$(LIBDIR) -lheadroom $(TESTBIN_RPATH) \
	  $(LDLIBS_CUDART) -lstdc++ -lm

# `make bench-bwd-phases` (an H200; no PyTorch needed): the backward stage
# by stage, each stage's time and TFLOP/s from the backward without it
# (bench/moe_bwd_phases.c, through the benchmark hook).
BENCH_BWD_PHASES_OUT ?= $(BUILD)/bench-bwd-phases.md
MOE_BWD_PHASES := $(TESTBIN)/moe_bwd_phases

.PHONY: bench-bwd-phases
bench-bwd-phases: $(MOE_BWD_PHASES)
	$(MOE_BWD_PHASES) --out $(BENCH_BWD_PHASES_OUT) $(BENCH_BWD_PHASES_ARGS)

$(OBJDIR)/bench/moe_bwd_phases.o: CPPFLAGS += -I$(CUDA_HOME)/include -Itests/gpu

$(MOE_BWD_PHASES): $(OBJDIR)/bench/moe_bwd_phases.o $(OBJDIR)/tests/gpu/gpu_util.o \
                   $(OBJDIR)/tests/gpu/gpu_kernels.cu.o $(OBJDIR)/kernels/moe_ref.o \
                   $(LIBDIR)/libheadroom_moe.a $(LIBDIR)/libheadroom.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIBDIR)/libheadroom_moe.a \
	  -L$(LIBDIR) -lheadroom $(TESTBIN_RPATH) \
	  $(LDLIBS_CUDART) -lstdc++ -lm

# `make bench-timeline` (an H200): the barrier kernel's timeline of one
# launch per shape and T (moe_phases --trace: each CTA's stage ends,
# barrier arrivals, unit ends, SM and SM clock; the agnostic kernel's
# too from a build with NVCC_EXTRA=-DHR__MOE_TRACE_AGN=1), the files and what
# bench/trace_summary.py makes of them (summary.txt) in BENCH_TIMELINE_DIR.
BENCH_TIMELINE_DIR ?= $(BUILD)/timeline
BENCH_TIMELINE_ARGS ?= --shapes qwen3-30b-a3b,deepseek-v3 --tokens 1024

.PHONY: bench-timeline
bench-timeline: $(MOE_PHASES)
	@mkdir -p $(BENCH_TIMELINE_DIR)
	$(MOE_PHASES) --reps 5 --no-phases --trace $(BENCH_TIMELINE_DIR)/tr \
	  --out $(BENCH_TIMELINE_DIR)/times.md $(BENCH_TIMELINE_ARGS)
	python3 bench/trace_summary.py $(BENCH_TIMELINE_DIR)/tr-*.txt \
	  > $(BENCH_TIMELINE_DIR)/summary.txt
	@cat $(BENCH_TIMELINE_DIR)/summary.txt

# `make bench-ab AB_BUILDS="build build-x"` (an H200): builds of the
# kernels side by side, the first the baseline (each made beforehand, e.g.
# `make BUILD=build-x NVCC_EXTRA=-DSOMETHING=1 build-x/tests/moe_phases`,
# or a git revision's with `sh bench/build_rev.sh REV build-x`):
# their moe_phases in turn, AB_RUNS times, with AB_ARGS (shapes, tokens),
# and the table of each build's median over the baseline's in
# AB_DIR/table.md (bench/ab_builds.sh, bench/ab_table.py). The floor is
# not measured in these runs unless AB_FLOOR=1.
AB_BUILDS ?= $(BUILD)
AB_DIR ?= $(BUILD)/ab

.PHONY: bench-ab
bench-ab:
	sh bench/ab_builds.sh $(AB_DIR) $(AB_BUILDS)

# `make gpu-report` (an H200 machine; two GPUs for the NCCL tests): the GPU
# tests, the table against PyTorch, the normal launches at the goal cells
# and the timeline in one command, every output and a summary in
# GPU_REPORT_DIR (bench/gpu_report.sh; GPU_REPORT_STEPS picks steps).
GPU_REPORT_DIR ?= $(BUILD)/gpu-report
.PHONY: gpu-report
gpu-report:
	sh bench/gpu_report.sh $(GPU_REPORT_DIR)
