# The GPU tests that launch the production kernels through the benchmark
# hook, hr__moe_forward_hook (kernels/moe_bench.h), which only the static
# library exports (the shared library's objects), so they link it (as
# bench/moe_phases does):
#   test_moe_tma_timeout  the TMA waits' timeouts, through the fault bits
#   test_moe_grids        every grid, also with the units claimed at any H
# Run by `make gpu-test`, and by `make test`, where without a GPU they skip.
HOOK_TEST_NAMES := test_moe_tma_timeout test_moe_grids
HOOK_TESTS := $(addprefix $(TESTBIN)/,$(HOOK_TEST_NAMES))
GPU_TESTS += $(HOOK_TESTS)

ifeq ($(HAVE_NVCC),1)

$(HOOK_TESTS): $(TESTBIN)/%: $(OBJDIR)/tests/gpu/%.o $(GPU_TEST_OBJS) $(MOE_LIB_A) \
                  $(LIBDIR)/libheadroom.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MOE_LIB_A) \
	  -L$(LIBDIR) -lheadroom $(TESTBIN_RPATH) \
	  $(LDLIBS_CUDART) -lstdc++ -lm

$(addprefix $(OBJDIR)/tests/gpu/,$(addsuffix .o,$(HOOK_TEST_NAMES))): CPPFLAGS += -Ikernels

else

$(HOOK_TESTS): $(TESTBIN)/%: tests/gpu/skip_stub.c
	@mkdir -p $(dir $@)
	$(GPU_TEST_STUB)

endif
