# tests/faults: headroomd killed (SIGKILL) and restarted under load, while
# saving, and started on damaged state files (see test_faults.c).
INTEG_TESTS += $(TESTBIN)/test_faults

$(OBJDIR)/tests/faults/test_faults.o: CPPFLAGS += -Itests/integration

$(TESTBIN)/test_faults: $(OBJDIR)/tests/faults/test_faults.o \
                        $(OBJDIR)/tests/integration/harness.o \
                        $(LIBHEADROOM_A) $(BINDIR)/headroomd
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  $(LDLIBS_HEADROOM) $(LDLIBS_CMOCKA)
