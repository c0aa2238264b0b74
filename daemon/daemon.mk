# daemon/: headroomd.
DAEMON_SRCS := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
DAEMON_OBJS := $(patsubst %.c,$(OBJDIR)/%.o,$(DAEMON_SRCS))
# The policy is pure: its object is also linked into the unit tests alone.
POLICY_OBJS := $(OBJDIR)/daemon/policy.o $(PROTO_OBJS)

BINS += $(BINDIR)/headroomd

$(BINDIR)/headroomd: $(OBJDIR)/daemon/main.o $(DAEMON_OBJS) $(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_UV) $(LDLIBS_CJSON) -ldl
