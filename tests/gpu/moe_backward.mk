# GPU test of the mega-MoE backward (tests/gpu/test_moe_backward.c),
# against the CPU reference hr_moe_ref_backward: built and skipped as the
# others in gpu.mk (included before this file, whose objects, libraries
# and recipes it shares), with its own device-side checks
# (gpu_bwd_kernels.cu: non-finite, non-zero and differing elements of
# outputs too large to copy to the host for every launch).
BWD_TEST_NAMES := test_moe_backward
GPU_TESTS += $(addprefix $(TESTBIN)/,$(BWD_TEST_NAMES))

ifeq ($(HAVE_NVCC),1)

BWD_TEST_CU_OBJ := $(OBJDIR)/tests/gpu/gpu_bwd_kernels.cu.o

$(BWD_TEST_CU_OBJ): tests/gpu/gpu_bwd_kernels.cu tests/gpu/gpu_bwd.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Itests/gpu -c -o $@ $<

$(addprefix $(TESTBIN)/,$(BWD_TEST_NAMES)): $(TESTBIN)/%: $(OBJDIR)/tests/gpu/%.o \
                                           $(BWD_TEST_CU_OBJ) $(GPU_TEST_OBJS) \
                                           $(GPU_TEST_LIBS)
	@mkdir -p $(dir $@)
	$(GPU_TEST_LINK)

else

$(addprefix $(TESTBIN)/,$(BWD_TEST_NAMES)): $(TESTBIN)/%: tests/gpu/skip_stub.c
	@mkdir -p $(dir $@)
	$(GPU_TEST_STUB)

endif
