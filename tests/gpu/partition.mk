# The partition-mode GPU test (green contexts from a lease): built and
# skipped as the others in gpu.mk (included before this file, whose objects
# and libraries it shares), with a kernel of its own.
GPU_TESTS += $(TESTBIN)/test_partition

ifeq ($(HAVE_NVCC),1)

$(OBJDIR)/tests/gpu/partition_kernels.cu.o: tests/gpu/partition_kernels.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

$(TESTBIN)/test_partition: $(OBJDIR)/tests/gpu/test_partition.o \
                           $(OBJDIR)/tests/gpu/partition_kernels.cu.o \
                           $(GPU_TEST_OBJS) $(GPU_TEST_LIBS)
	@mkdir -p $(dir $@)
	$(GPU_TEST_LINK)

else

$(TESTBIN)/test_partition: $(TESTBIN)/%: tests/gpu/skip_stub.c
	@mkdir -p $(dir $@)
	$(GPU_TEST_STUB)

endif
