# daemon/: headroomd.
DAEMON_SRCS := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
DAEMON_OBJS := $(patsubst %.c,$(OBJDIR)/%.o,$(DAEMON_SRCS))
# What it links from outside daemon/: the policy module (policy/), and the
# codec (proto/). Nothing from client/: the daemon builds against the
# protocol's own types (proto/hr_types.h).
DAEMON_EXTRA_OBJS := $(OBJDIR)/policy/policy.o
DAEMON_LDLIBS := $(LDLIBS_UV) $(LDLIBS_CJSON) -ldl

BINS += $(BINDIR)/headroomd

# proto/proto.mk is read after this file (fragments are included in sorted
# order), so PROTO_OBJS is expanded a second time, when the rules run.
.SECONDEXPANSION:

$(BINDIR)/headroomd: $(OBJDIR)/daemon/main.o $(DAEMON_OBJS) \
                     $(DAEMON_EXTRA_OBJS) $$(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(DAEMON_LDLIBS)
