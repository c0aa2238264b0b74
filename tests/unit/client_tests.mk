# tests/unit: libheadroom with no daemon (degraded mode, argument checks,
# exported environment, ncclConfig_t). Built against the static library,
# with unit_util.c: the temporary folder and degraded client that the
# partition tests (partition_tests.mk) share.
UNIT_TESTS += $(TESTBIN)/test_client

# NCCL's header, when CUDA ships it, so hr_lease_fill_nccl_config is tested
# against the real ncclConfig_t (-isystem: its warnings are not ours).
$(OBJDIR)/tests/unit/test_client.o: CPPFLAGS += \
  $(if $(wildcard $(CUDA_HOME)/include/nccl.h),-isystem $(CUDA_HOME)/include)

$(TESTBIN)/test_client: $(OBJDIR)/tests/unit/test_client.o \
                        $(OBJDIR)/tests/unit/unit_util.o $(LIBDIR)/libheadroom.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM) $(LDLIBS_CMOCKA)

# libheadroom.so exports exactly headroom.h's functions; the daemon side
# builds without client/ (tests/unit/test_exports.sh).
UNIT_TESTS += tests/unit/test_exports.sh
tests/unit/test_exports.sh: $(LIBHEADROOM_SO) $(HEADROOM_H_INSTALL) \
                            $(BINDIR)/headroomd
