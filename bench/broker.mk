# bench/broker: `make bench-broker` measures headroomd beside redis-server
# in one run (lease round trips and throughput at 1, 16 and 256 clients,
# RSS with 1,000 clients, the hot-path read's instructions and system
# calls) and writes a Markdown report to BENCH_BROKER_OUT (see
# bench/broker/run.sh; needs redis-server, redis-tools, valgrind, strace).
BENCH_BROKER_OUT ?= $(BUILD)/bench-broker.md

.PHONY: bench-broker
.SECONDEXPANSION:
bench-broker: all $(TESTBIN)/bench_broker $(TESTBIN)/bench_hotpath
	sh bench/broker/run.sh $(BUILD) $(BENCH_BROKER_OUT)

$(TESTBIN)/bench_broker: $(OBJDIR)/bench/broker/bench_broker.o $$(LIBHEADROOM_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM)

$(TESTBIN)/bench_hotpath: $(OBJDIR)/bench/broker/hotpath.o $$(LIBHEADROOM_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM)
