# libheadroom and headroom-run with no daemon answering (absent, killed,
# restarted, refusing the hello): the budget the process computes with the
# daemon's policy, never the full grid, and the daemon's once it answers.
INTEG_TESTS += $(TESTBIN)/test_fallback

$(TESTBIN)/test_fallback: $(OBJDIR)/tests/integration/test_fallback.o \
                          $(INTEG_LINK_OBJS) $(BINDIR)/headroomd \
                          $(BINDIR)/headroom-run
	@mkdir -p $(dir $@)
	$(INTEG_LINK)
