# Integration tests: the real headroomd on a temporary socket, driven by
# the real libheadroom and tools. They need the binaries built first.
INTEG_TESTS += $(TESTBIN)/test_broker

$(TESTBIN)/test_broker: $(OBJDIR)/tests/integration/test_broker.o \
                        $(OBJDIR)/tests/integration/harness.o \
                        $(LIBDIR)/libheadroom.a \
                        $(BINDIR)/headroomd $(BINDIR)/headroomctl \
                        $(BINDIR)/headroom-run
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -ldl
