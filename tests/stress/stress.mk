# tests/stress: `make stress` runs many clients against one headroomd for
# STRESS_SECONDS (60) with random SIGKILLs of client processes, then
# checks exactly what the daemon holds (see stress.c). Not part of
# `make test`; CI runs `make stress STRESS_SECONDS=15`.
STRESS_SECONDS ?= 60
STRESS_CLIENTS ?= 1000
STRESS_WORKERS ?= 8
STRESS_BIN := $(TESTBIN)/stress

.PHONY: stress
stress: all $(STRESS_BIN)
	HEADROOM_BUILD=$(BUILD) $(STRESS_BIN) $(STRESS_SECONDS) $(STRESS_CLIENTS) $(STRESS_WORKERS)

$(OBJDIR)/tests/stress/stress.o: CPPFLAGS += -Itests/integration

$(STRESS_BIN): $(OBJDIR)/tests/stress/stress.o \
               $(OBJDIR)/tests/integration/harness.o $(LIBHEADROOM_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM)
