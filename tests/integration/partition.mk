# Partition mode against the real headroomd: the budgets of partition
# leases, and hr_partition_create both with this machine's driver (none:
# HR_ENOGPU) and with the fake one of tests/unit (where cuda.h is found).
INTEG_TESTS += $(TESTBIN)/test_partition_integ

$(TESTBIN)/test_partition_integ: $(OBJDIR)/tests/integration/test_partition.o \
                                 $(INTEG_LINK_OBJS) $(BINDIR)/headroomd \
                                 $(if $(filter 1,$(HAVE_CUDA_H)),$(TESTBIN)/libfakecuda.so)
	@mkdir -p $(dir $@)
	$(INTEG_LINK)
$(TESTBIN)/test_partition_integ: INTEG_LDLIBS := -pthread
