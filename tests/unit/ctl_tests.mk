# tests/unit: headroomctl's printing (client/ctl_print.c) on its own: the
# escaping of client text for a terminal and the --json line, byte for
# byte, whatever a daemon lets through.
UNIT_TESTS += $(TESTBIN)/test_ctl_print

$(TESTBIN)/test_ctl_print: $(OBJDIR)/tests/unit/test_ctl_print.o \
                           $(OBJDIR)/client/ctl_print.o $(LIBDIR)/libheadroom.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM) $(LDLIBS_CMOCKA)
