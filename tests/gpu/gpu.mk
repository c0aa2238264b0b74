# GPU tests of the mega-MoE kernel (run by `make gpu-test`, and by
# `make test`, where without a GPU each prints "SKIP: ...: WHAT", WHAT
# naming the driver, device or GPU model that is missing (gpu_probe.h),
# and exits 77). Without nvcc they are built as stubs that skip the same
# way and say so.
GPU_TEST_NAMES := test_moe_correct test_moe_timeout test_moe_launch test_moe_lease
GPU_TESTS += $(addprefix $(TESTBIN)/,$(GPU_TEST_NAMES))

# The recipes of every GPU test program, here and in the fragments that
# add more (moe_agnostic.mk, partition.mk): linked against both libraries
# and the static CUDA runtime, or, without nvcc, a stub that skips.
GPU_TEST_LINK = $(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) \
  -L$(LIBDIR) -lheadroom_moe -lheadroom $(TESTBIN_RPATH) \
  $(LDLIBS_CUDART) -lstdc++ -lm
GPU_TEST_STUB = $(CC) $(CFLAGS) -DGT_NAME='"$*"' -o $@ $<

ifeq ($(HAVE_NVCC),1)

GPU_TEST_OBJS := $(OBJDIR)/tests/gpu/gpu_util.o $(OBJDIR)/tests/gpu/gpu_kernels.cu.o \
                 $(MOE_REF_OBJ)
GPU_TEST_LIBS := $(MOE_LIB_SO) $(LIBDIR)/libheadroom.so

$(OBJDIR)/tests/gpu/%.o: CPPFLAGS += -I$(CUDA_HOME)/include

$(OBJDIR)/tests/gpu/gpu_kernels.cu.o: tests/gpu/gpu_kernels.cu tests/gpu/gpu_util.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Itests/gpu -c -o $@ $<

$(addprefix $(TESTBIN)/,$(GPU_TEST_NAMES)): $(TESTBIN)/%: $(OBJDIR)/tests/gpu/%.o \
                                           $(GPU_TEST_OBJS) $(GPU_TEST_LIBS)
	@mkdir -p $(dir $@)
	$(GPU_TEST_LINK)

# bench/moe_once: one forward per token count, for a profiler, through
# the API, as a user's program.
$(TESTBIN)/moe_once: $(OBJDIR)/bench/moe_once.o $(GPU_TEST_OBJS) $(GPU_TEST_LIBS)
	@mkdir -p $(dir $@)
	$(GPU_TEST_LINK)

$(OBJDIR)/bench/moe_once.o: CPPFLAGS += -I$(CUDA_HOME)/include -Itests/gpu

else

$(addprefix $(TESTBIN)/,$(GPU_TEST_NAMES)): $(TESTBIN)/%: tests/gpu/skip_stub.c
	@mkdir -p $(dir $@)
	$(GPU_TEST_STUB)

endif
