# tests/unit: partition mode in libheadroom with no daemon.
# test_client_partition uses whatever driver the machine has (none:
# HR_ENOGPU); where cuda.h is found, test_client_partition_fake walks the
# driver paths against a fake libcuda built beside it
# (tests/unit/fake_libcuda.c).
UNIT_TESTS += $(TESTBIN)/test_client_partition

$(TESTBIN)/test_client_partition: $(OBJDIR)/tests/unit/test_client_partition.o \
                                  $(OBJDIR)/tests/unit/unit_util.o \
                                  $(LIBDIR)/libheadroom.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM) $(LDLIBS_CMOCKA)

ifeq ($(HAVE_CUDA_H),1)
UNIT_TESTS += $(TESTBIN)/test_client_partition_fake

$(OBJDIR)/tests/unit/test_client_partition_fake.o \
$(OBJDIR)/tests/unit/fake_libcuda.o: CPPFLAGS += -isystem $(CUDA_HOME)/include

$(TESTBIN)/libfakecuda.so: $(OBJDIR)/tests/unit/fake_libcuda.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -o $@ $^

$(TESTBIN)/test_client_partition_fake: \
  $(OBJDIR)/tests/unit/test_client_partition_fake.o \
  $(OBJDIR)/tests/unit/unit_util.o $(LIBDIR)/libheadroom.a \
  $(TESTBIN)/libfakecuda.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) $(LDLIBS_HEADROOM) \
	  $(LDLIBS_CMOCKA)
endif
