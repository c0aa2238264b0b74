# The wire codec: round trips, bad input, limits, and the examples in
# proto/PROTOCOL.md (read relative to the repository root, where `make test`
# runs; set HEADROOM_SRCDIR to run the binary from elsewhere).
UNIT_TESTS += $(TESTBIN)/test_proto

$(TESTBIN)/test_proto: $(OBJDIR)/tests/unit/test_proto.o $(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_CJSON) $(LDLIBS_CMOCKA)
