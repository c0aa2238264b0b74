# headroomd's pure parts, tested without a socket: the config file and
# flags (test_config); per-GPU state transitions and the learned state
# file (test_state); each GPU's green-context step against a stand-in
# driver, and the driver struct against cuda.h where CUDA is installed
# (test_topology).
UNIT_TESTS += $(TESTBIN)/test_config $(TESTBIN)/test_state \
              $(TESTBIN)/test_topology

TEST_CONFIG_OBJS := $(OBJDIR)/daemon/config.o $(OBJDIR)/daemon/options.o \
                    $(OBJDIR)/daemon/log.o $(OBJDIR)/policy/policy.o
TEST_STATE_OBJS := $(OBJDIR)/daemon/state.o $(OBJDIR)/daemon/persist.o \
                   $(OBJDIR)/daemon/calibration.o \
                   $(OBJDIR)/daemon/fsutil.o $(OBJDIR)/daemon/log.o \
                   $(OBJDIR)/policy/policy.o
TEST_TOPOLOGY_OBJS := $(OBJDIR)/daemon/topology.o $(OBJDIR)/daemon/config.o \
                      $(OBJDIR)/daemon/log.o $(OBJDIR)/policy/policy.o
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

# -isystem: cuda.h's own warnings are not ours.
$(OBJDIR)/tests/unit/test_topology.o: CPPFLAGS += \
  $(if $(wildcard $(CUDA_HOME)/include/cuda.h),-isystem $(CUDA_HOME)/include)

$(TESTBIN)/test_topology: $(OBJDIR)/tests/unit/test_topology.o \
                          $(TEST_TOPOLOGY_OBJS) $$(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(DAEMON_TEST_LDLIBS)
