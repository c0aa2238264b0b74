# Partition mode against the real headroomd: the budgets of partition
# leases, and hr_partition_create both with this machine's driver (none:
# HR_ENOGPU) and with the fake one of tests/unit (where cuda.h is found).
INTEG_TESTS += $(TESTBIN)/test_partition_integ

$(TESTBIN)/test_partition_integ: $(OBJDIR)/tests/integration/test_partition.o \
                                 $(OBJDIR)/tests/integration/harness.o \
                                 $(OBJDIR)/tests/integration/harness_cmocka.o \
                                 $(LIBDIR)/libheadroom.a $(BINDIR)/headroomd \
                                 $(if $(filter 1,$(HAVE_CUDA_H)),$(TESTBIN)/libfakecuda.so)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -pthread -ldl
