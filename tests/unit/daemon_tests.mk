# headroomd's pure parts, tested without a socket: the config file and
# flags (test_config); per-GPU state transitions and the learned state
# file (test_state).
UNIT_TESTS += $(TESTBIN)/test_config $(TESTBIN)/test_state

TEST_CONFIG_OBJS := $(OBJDIR)/daemon/config.o $(OBJDIR)/daemon/options.o \
                    $(OBJDIR)/daemon/log.o $(OBJDIR)/daemon/policy.o
TEST_STATE_OBJS := $(OBJDIR)/daemon/state.o $(OBJDIR)/daemon/persist.o \
                   $(OBJDIR)/daemon/calibration.o \
                   $(OBJDIR)/daemon/fsutil.o $(OBJDIR)/daemon/log.o \
                   $(OBJDIR)/daemon/policy.o $(OBJDIR)/client/hr_error.o
DAEMON_TEST_LDLIBS := $(LDLIBS_UV) $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -ldl

.SECONDEXPANSION:

$(TESTBIN)/test_config: $(OBJDIR)/tests/unit/test_config.o \
                        $(TEST_CONFIG_OBJS) $$(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(DAEMON_TEST_LDLIBS)

$(TESTBIN)/test_state: $(OBJDIR)/tests/unit/test_state.o \
                       $(TEST_STATE_OBJS) $$(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(DAEMON_TEST_LDLIBS)
