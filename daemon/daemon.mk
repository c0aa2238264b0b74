# daemon/: headroomd.
DAEMON_SRCS := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
DAEMON_OBJS := $(patsubst %.c,$(OBJDIR)/%.o,$(DAEMON_SRCS))
# The policy is pure: its object is also linked into the unit tests alone.
POLICY_OBJS := $(OBJDIR)/daemon/policy.o $(PROTO_OBJS)
# hr_strerror() is a table with no dependencies: the daemon takes that one
# object from client/ rather than a copy of it.
DAEMON_EXTRA_OBJS := $(OBJDIR)/client/hr_error.o
DAEMON_LDLIBS := $(LDLIBS_UV) $(LDLIBS_CJSON) -ldl

BINS += $(BINDIR)/headroomd

# proto/proto.mk is read after this file (fragments are included in sorted
# order), so PROTO_OBJS is expanded a second time, when the rules run.
.SECONDEXPANSION:

$(BINDIR)/headroomd: $(OBJDIR)/daemon/main.o $(DAEMON_OBJS) \
                     $(DAEMON_EXTRA_OBJS) $$(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(DAEMON_LDLIBS)
