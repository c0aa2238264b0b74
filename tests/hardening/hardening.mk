# tests/hardening: what hostile or careless clients cannot do.
#   test_hotpath  (unit) the lease reads make no system call (seccomp)
#   test_limits   (integration) socket and state file permissions, the
#                 per-client limits (footprints, leases, message rate),
#                 max_clients, and that a client can touch only its own
#   test_attacks  (integration) operators by the peer's own groups, names
#                 with control characters, degraded_ms, hostile state and
#                 calibration files (docs/hardening.md, "Attacks tried")
#   test_fairness (integration) the per-uid limits (connections, the
#                 reserve for other uids, footprints, CTAs), the hello
#                 deadline, and budget events that cannot drown anyone
UNIT_TESTS += $(TESTBIN)/test_hotpath
INTEG_TESTS += $(TESTBIN)/test_limits $(TESTBIN)/test_attacks \
               $(TESTBIN)/test_fairness

$(TESTBIN)/test_hotpath: $(OBJDIR)/tests/hardening/test_hotpath.o $(LIBHEADROOM_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM)

$(OBJDIR)/tests/hardening/test_limits.o: CPPFLAGS += -Itests/integration
$(OBJDIR)/tests/hardening/test_attacks.o: CPPFLAGS += -Itests/integration
$(OBJDIR)/tests/hardening/test_fairness.o: CPPFLAGS += -Itests/integration

# Linked as every integration test is (tests/integration/integration.mk,
# read after this fragment, hence the second expansion).
.SECONDEXPANSION:
$(TESTBIN)/test_limits: $(OBJDIR)/tests/hardening/test_limits.o \
                        $$(INTEG_LINK_OBJS) $(BINDIR)/headroomd
	@mkdir -p $(dir $@)
	$(INTEG_LINK)
$(TESTBIN)/test_limits: INTEG_LDLIBS := -pthread

$(TESTBIN)/test_attacks: $(OBJDIR)/tests/hardening/test_attacks.o \
                         $$(INTEG_LINK_OBJS) $(BINDIR)/headroomd
	@mkdir -p $(dir $@)
	$(INTEG_LINK)
$(TESTBIN)/test_attacks: INTEG_LDLIBS := -pthread

$(TESTBIN)/test_fairness: $(OBJDIR)/tests/hardening/test_fairness.o \
                          $$(INTEG_LINK_OBJS) $(BINDIR)/headroomd
	@mkdir -p $(dir $@)
	$(INTEG_LINK)
