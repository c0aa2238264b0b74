# GPU tests of the residency-agnostic mega-MoE kernel: built and skipped
# as the others in gpu.mk (included before this file, whose objects and
# libraries they share).
AGN_TEST_NAMES := test_moe_agnostic test_moe_agnostic_hog
GPU_TESTS += $(addprefix $(TESTBIN)/,$(AGN_TEST_NAMES))

ifeq ($(HAVE_NVCC),1)

$(addprefix $(TESTBIN)/,$(AGN_TEST_NAMES)): $(TESTBIN)/%: $(OBJDIR)/tests/gpu/%.o \
                                           $(GPU_TEST_OBJS) $(GPU_TEST_LIBS)
	@mkdir -p $(dir $@)
	$(GPU_TEST_LINK)

else

$(addprefix $(TESTBIN)/,$(AGN_TEST_NAMES)): $(TESTBIN)/%: tests/gpu/skip_stub.c
	@mkdir -p $(dir $@)
	$(GPU_TEST_STUB)

endif
