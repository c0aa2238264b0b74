# client/: libheadroom (shared, with soname, and static), headroomctl and
# headroom-run. The tools link the static library, so they run from the
# build tree with no LD_LIBRARY_PATH.
# headroomctl is client/ctl_*.c, one file per job (client/ctl.h).
CTL_SRCS := $(wildcard client/ctl_*.c)
CTL_OBJS := $(patsubst %.c,$(OBJDIR)/%.o,$(CTL_SRCS))
CLIENT_TOOLS := $(CTL_SRCS) client/headroom_run.c
CLIENT_SRCS := $(filter-out $(CLIENT_TOOLS),$(wildcard client/*.c))
CLIENT_OBJS := $(patsubst %.c,$(OBJDIR)/%.o,$(CLIENT_SRCS))

LIBHEADROOM_VERSION := 0.1.0
LIBHEADROOM_SONAME := libheadroom.so.0
LIBHEADROOM_REAL := $(LIBDIR)/libheadroom.so.$(LIBHEADROOM_VERSION)
LIBHEADROOM_A := $(LIBDIR)/libheadroom.a
LIBHEADROOM_SO := $(LIBDIR)/libheadroom.so
# What a program linking libheadroom.a needs besides it (-ldl: libcuda is
# opened at run time, for SM counts when no daemon answers).
LDLIBS_HEADROOM := $(LDLIBS_CJSON) -pthread -ldl

# cuda.h, for the types of the green-context calls (client/hr_partition.c)
# and the SM alignment in degraded budgets; only the header: the driver
# itself is opened at run time. Without it partitions are HR_EUNSUPPORTED.
HAVE_CUDA_H := $(if $(wildcard $(CUDA_HOME)/include/cuda.h),1)
ifeq ($(HAVE_CUDA_H),1)
$(OBJDIR)/client/hr_partition.o $(OBJDIR)/client/hr_cuda.o: CPPFLAGS += \
  -DHR_HAVE_CUDA_H -isystem $(CUDA_HOME)/include
endif

# The installed header: client/headroom.h with proto/hr_types.h written in
# place of its #include, so that users need one file.
HEADROOM_H_INSTALL := $(BUILD)/include/headroom.h
$(HEADROOM_H_INSTALL): client/headroom.h proto/hr_types.h
	@mkdir -p $(dir $@)
	awk '/^#include "hr_types.h"$$/ { while((getline l < "proto/hr_types.h") > 0) print l; next } { print }' \
	  client/headroom.h > $@.tmp && mv $@.tmp $@

BINS += $(HEADROOM_H_INSTALL) $(LIBHEADROOM_SO) $(LIBDIR)/$(LIBHEADROOM_SONAME) $(LIBHEADROOM_A) \
        $(BINDIR)/headroomctl $(BINDIR)/headroom-run

# proto/proto.mk and policy/policy.mk are read after this file, so
# PROTO_OBJS and POLICY_OBJS are expanded a second time, when the rules run.
.SECONDEXPANSION:

# Only the functions of headroom.h leave the shared object
# (client/libheadroom.map, held to the header by tests/unit/test_exports.sh);
# -z defs: a missing symbol fails the link here, not in a user's program.
$(LIBHEADROOM_REAL): $(CLIENT_OBJS) $$(POLICY_OBJS) $$(PROTO_OBJS) \
                     client/libheadroom.map
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,-soname,$(LIBHEADROOM_SONAME) \
	  -Wl,--version-script=client/libheadroom.map -Wl,-z,defs \
	  -o $@ $(filter %.o,$^) $(LDLIBS_HEADROOM)

$(LIBDIR)/$(LIBHEADROOM_SONAME): $(LIBHEADROOM_REAL)
	ln -sf $(notdir $<) $@

$(LIBHEADROOM_SO): $(LIBDIR)/$(LIBHEADROOM_SONAME)
	ln -sf $(notdir $<) $@

$(LIBHEADROOM_A): $(CLIENT_OBJS) $$(POLICY_OBJS) $$(PROTO_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

$(BINDIR)/headroomctl: $(CTL_OBJS) $(LIBHEADROOM_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM)

$(BINDIR)/headroom-run: $(OBJDIR)/client/headroom_run.o $(LIBHEADROOM_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM)
