# Integration tests: the real headroomd on a temporary socket, driven by
# the real libheadroom and tools. They need the binaries built first.
INTEG_TESTS += $(TESTBIN)/test_broker

$(TESTBIN)/test_broker: $(OBJDIR)/tests/integration/test_broker.o \
                        $(OBJDIR)/tests/integration/harness.o \
                        $(OBJDIR)/tests/integration/harness_cmocka.o \
                        $(LIBDIR)/libheadroom.a \
                        $(BINDIR)/headroomd $(BINDIR)/headroomctl \
                        $(BINDIR)/headroom-run
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -ldl

# headroomctl metrics as Prometheus text, after real traffic; the
# agnostic lease mode end to end.
INTEG_TESTS += $(TESTBIN)/test_metrics

$(TESTBIN)/test_metrics: $(OBJDIR)/tests/integration/test_metrics.o \
                         $(OBJDIR)/tests/integration/harness.o \
                         $(OBJDIR)/tests/integration/harness_cmocka.o \
                         $(LIBDIR)/libheadroom.a \
                         $(BINDIR)/headroomd $(BINDIR)/headroomctl \
                         $(BINDIR)/headroom-run
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -ldl -lm

# headroomd started as systemd would: socket activation and sd_notify.
INTEG_TESTS += $(TESTBIN)/test_systemd

$(TESTBIN)/test_systemd: $(OBJDIR)/tests/integration/test_systemd.o \
                         $(OBJDIR)/tests/integration/harness.o \
                         $(OBJDIR)/tests/integration/harness_cmocka.o \
                         $(LIBDIR)/libheadroom.a $(BINDIR)/headroomd
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -ldl

# The systemd units: systemd-analyze verify and the exposure goal.
INTEG_TESTS += tests/integration/test_units.sh

# headroomd reading a calibration file: leases and status, a bad file,
# the default file read on SIGHUP.
INTEG_TESTS += $(TESTBIN)/test_calibration

$(TESTBIN)/test_calibration: $(OBJDIR)/tests/integration/test_calibration.o \
                             $(OBJDIR)/tests/integration/harness.o \
                             $(OBJDIR)/tests/integration/harness_cmocka.o \
                             $(LIBDIR)/libheadroom.a $(BINDIR)/headroomd
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -ldl

# make install into a DESTDIR, and what it installs works.
INTEG_TESTS += tests/integration/test_install.sh

# headroomd serving partition mode: partition budgets, pushes, status,
# metrics and headroomctl, partition_ignore_coscheduling, refusals.
INTEG_TESTS += $(TESTBIN)/test_partition_daemon

$(TESTBIN)/test_partition_daemon: \
    $(OBJDIR)/tests/integration/test_partition_daemon.o \
    $(OBJDIR)/tests/integration/harness.o \
    $(OBJDIR)/tests/integration/harness_cmocka.o $(LIBDIR)/libheadroom.a \
    $(BINDIR)/headroomd $(BINDIR)/headroomctl
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) \
	  $(LDLIBS_CJSON) $(LDLIBS_CMOCKA) -ldl
