# Integration tests: the real headroomd on a temporary socket, driven by
# the real libheadroom and tools. They need the binaries built first.
#
# Every integration test program (here, in partition.mk and in
# tests/hardening) is its own object, the harness and libheadroom, linked
# the same way; INTEG_LDLIBS adds what one program needs beyond that. The
# daemon and tools a test runs are prerequisites, so that they are built
# first, but are not linked.
INTEG_LINK_OBJS := $(OBJDIR)/tests/integration/harness.o \
                   $(OBJDIR)/tests/integration/harness_cmocka.o \
                   $(LIBDIR)/libheadroom.a
INTEG_LINK = $(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
  $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -ldl $(INTEG_LDLIBS)

INTEG_PROGS := test_broker test_metrics test_systemd test_calibration \
               test_partition_daemon test_policy_guard test_cli

$(addprefix $(TESTBIN)/,$(INTEG_PROGS)): $(TESTBIN)/%: \
    $(OBJDIR)/tests/integration/%.o $(INTEG_LINK_OBJS) $(BINDIR)/headroomd
	@mkdir -p $(dir $@)
	$(INTEG_LINK)

INTEG_TESTS += $(TESTBIN)/test_broker
$(TESTBIN)/test_broker: $(BINDIR)/headroomctl $(BINDIR)/headroom-run

# No policy hands out the full grid (policy_set, --check-config, start,
# SIGHUP); incidents belong to their reporter; learned raises listed and
# cleared by operators.
INTEG_TESTS += $(TESTBIN)/test_policy_guard
$(TESTBIN)/test_policy_guard: $(BINDIR)/headroomctl

# headroomctl metrics as Prometheus text, after real traffic; the
# agnostic lease mode end to end.
INTEG_TESTS += $(TESTBIN)/test_metrics
$(TESTBIN)/test_metrics: $(BINDIR)/headroomctl $(BINDIR)/headroom-run
$(TESTBIN)/test_metrics: INTEG_LDLIBS := -lm

# The three tools as people and scripts see them: one exit status table,
# headroomctl's output for people and --json, escaped client text, hints.
INTEG_TESTS += $(TESTBIN)/test_cli
$(TESTBIN)/test_cli: $(BINDIR)/headroomctl $(BINDIR)/headroom-run

# headroomd started as systemd would: socket activation and sd_notify.
INTEG_TESTS += $(TESTBIN)/test_systemd

# The systemd units: systemd-analyze verify and the exposure goal.
INTEG_TESTS += tests/integration/test_units.sh

# headroomd reading a calibration file: leases and status, a bad file,
# the default file read on SIGHUP.
INTEG_TESTS += $(TESTBIN)/test_calibration

# make install into a DESTDIR, and what it installs works.
INTEG_TESTS += tests/integration/test_install.sh

# deploy/'s Kubernetes manifests against the Kubernetes schemas, offline
# (kubernetes-validate from PyPI; skips without it).
INTEG_TESTS += tests/integration/test_k8s.sh

# headroomd serving partition mode: partition budgets, pushes, status,
# metrics and headroomctl, partition_ignore_coscheduling, refusals.
INTEG_TESTS += $(TESTBIN)/test_partition_daemon
$(TESTBIN)/test_partition_daemon: $(BINDIR)/headroomctl
