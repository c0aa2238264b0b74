# tests/hardening: what hostile or careless clients cannot do.
#   test_hotpath  (unit) the lease reads make no system call (seccomp)
#   test_limits   (integration) socket and state file permissions, the
#                 per-client limits (footprints, leases, message rate),
#                 max_clients, and that a client can touch only its own
UNIT_TESTS += $(TESTBIN)/test_hotpath
INTEG_TESTS += $(TESTBIN)/test_limits

$(TESTBIN)/test_hotpath: $(OBJDIR)/tests/hardening/test_hotpath.o $(LIBHEADROOM_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM)

$(OBJDIR)/tests/hardening/test_limits.o: CPPFLAGS += -Itests/integration

$(TESTBIN)/test_limits: $(OBJDIR)/tests/hardening/test_limits.o \
                        $(OBJDIR)/tests/integration/harness.o \
                        $(OBJDIR)/tests/integration/harness_cmocka.o \
                        $(LIBHEADROOM_A) $(BINDIR)/headroomd
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -ldl -pthread
