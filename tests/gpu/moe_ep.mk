# GPU tests of the expert-parallel kernels with virtual ranks on one GPU
# (tests/gpu/test_moe_ep.c: the forward; test_moe_ep_backward.c: the
# backward): built and skipped as the others in gpu.mk, with the group of
# virtual ranks they share (ep_group.c) and the backward test's
# device-side checks (moe_backward.mk's gpu_bwd_kernels.cu).
EP_TEST_NAMES := test_moe_ep test_moe_ep_backward
GPU_TESTS += $(addprefix $(TESTBIN)/,$(EP_TEST_NAMES))

ifeq ($(HAVE_NVCC),1)

$(addprefix $(TESTBIN)/,$(EP_TEST_NAMES)): $(TESTBIN)/%: $(OBJDIR)/tests/gpu/%.o \
                                          $(OBJDIR)/tests/gpu/ep_group.o \
                                          $(BWD_TEST_CU_OBJ) $(GPU_TEST_OBJS) \
                                          $(GPU_TEST_LIBS)
	@mkdir -p $(dir $@)
	$(GPU_TEST_LINK)

else

$(addprefix $(TESTBIN)/,$(EP_TEST_NAMES)): $(TESTBIN)/%: tests/gpu/skip_stub.c
	@mkdir -p $(dir $@)
	$(GPU_TEST_STUB)

endif
