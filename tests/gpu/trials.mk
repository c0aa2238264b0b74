# test_overlap_trials (tests/gpu/test_overlap_trials.c and trials_*): the
# mega-MoE kernel beside real NCCL collectives on 2 GPUs, one process per
# GPU, against a real headroomd (the four tests of docs/gpu-tests.md).
# `make gpu-test` runs it with the others; `make gpu-trials TRIALS=200`
# runs it alone (TRIALS_ARGS passes more options, e.g.
# TRIALS_ARGS='--tests headroom,partition --seed 7'; a skip fails there).
# Built (included after gpu.mk, whose objects and libraries it shares)
# where nvcc and NCCL's header ($NCCL_HOME/include, else CUDA's) are found;
# NCCL itself is opened at run time. Elsewhere a stub says why and skips.
TRIALS_BIN := $(TESTBIN)/test_overlap_trials
GPU_TESTS += $(TRIALS_BIN)
GPU_TESTS_2 += $(TRIALS_BIN)
# Its CPU half (the plan, the ranks' scripts, the hub) on every machine.
UNIT_TESTS += $(TESTBIN)/test_overlap_plan
TRIALS ?= 200
TRIALS_ARGS ?=

TRIALS_NCCL_INC := $(firstword $(foreach d,$(NCCL_HOME)/include $(CUDA_HOME)/include,\
                     $(if $(wildcard $(d)/nccl.h),$(d))))

ifeq ($(HAVE_NVCC)$(if $(TRIALS_NCCL_INC),1),11)

TRIALS_SRCS := test_overlap_trials trials_rank trials_run trials_report \
               trials_repro trials_modes trials_incident trials_plan \
               trials_sync trials_nccl trials_daemon
TRIALS_OBJS := $(patsubst %,$(OBJDIR)/tests/gpu/%.o,$(TRIALS_SRCS)) \
               $(OBJDIR)/tests/gpu/trials_hog.cu.o

# NCCL's and CUDA's headers are not ours: -isystem keeps their warnings
# out of the zero-warning build.
$(patsubst %,$(OBJDIR)/tests/gpu/%.o,$(TRIALS_SRCS)): \
  CPPFLAGS += -isystem $(TRIALS_NCCL_INC) -isystem $(CUDA_HOME)/include

$(OBJDIR)/tests/gpu/trials_hog.cu.o: tests/gpu/trials_hog.cu tests/gpu/trials_hog.h tests/gpu/gpu_util.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Itests/gpu -c -o $@ $<

$(TRIALS_BIN): $(TRIALS_OBJS) $(GPU_TEST_OBJS) $(GPU_TEST_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) \
	  -L$(LIBDIR) -lheadroom_moe -lheadroom $(TESTBIN_RPATH) \
	  $(LDLIBS_CJSON) $(LDLIBS_CUDART) -ldl -lstdc++ -lm

else

TRIALS_WHY := $(if $(filter 1,$(HAVE_NVCC)),built without nccl.h (set NCCL_HOME),built without nvcc: no kernels)
$(TRIALS_BIN): tests/gpu/trials_stub.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DTR_WHY='"$(TRIALS_WHY)"' -o $@ $<

endif

$(TESTBIN)/test_overlap_plan: $(OBJDIR)/tests/gpu/test_overlap_plan.o \
                              $(OBJDIR)/tests/gpu/trials_plan.o \
                              $(OBJDIR)/tests/gpu/trials_sync.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_CMOCKA)

.PHONY: gpu-trials
gpu-trials: deps
	@$(MAKE) --no-print-directory all $(TRIALS_BIN)
	$(TRIALS_BIN) --trials $(TRIALS) $(TRIALS_ARGS)
