# test_moe_tma_timeout: the TMA waits' timeouts, through the fault bit
# that only hr__moe_forward_variant reaches, so the program links the
# static library (as bench/moe_phases does). Run by `make gpu-test`, and
# by `make test`, where without a GPU it skips.
TMA_TEST := $(TESTBIN)/test_moe_tma_timeout
GPU_TESTS += $(TMA_TEST)

ifeq ($(HAVE_NVCC),1)

$(TMA_TEST): $(OBJDIR)/tests/gpu/test_moe_tma_timeout.o $(GPU_TEST_OBJS) $(MOE_LIB_A) \
             $(LIBDIR)/libheadroom.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(MOE_LIB_A) \
	  -L$(LIBDIR) -lheadroom -Wl,-rpath,$(abspath $(LIBDIR)) \
	  $(LDLIBS_CUDART) -lstdc++ -lm

$(OBJDIR)/tests/gpu/test_moe_tma_timeout.o: CPPFLAGS += -Ikernels

else

$(TMA_TEST): $(TESTBIN)/%: tests/gpu/skip_stub.c
	@mkdir -p $(dir $@)
	$(GPU_TEST_STUB)

endif
