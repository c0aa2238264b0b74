# tests/fuzz: libFuzzer targets, built with clang in a tree of their own
# (FUZZ_BUILD) with -fsanitize=fuzzer,address,undefined.
#
#   make fuzz        each target for FUZZ_SECONDS (60) on a corpus kept in
#                    $(FUZZ_BUILD)/fuzz/corpus between runs
#   make fuzz-ci     each target for 20 s from a fixed seed, on the seeds
#                    alone (what .ci/run runs after `make test`)
#
# fuzz_daemon: headroomd's framing, message rate, decode, dispatch and
# state on connections without a socket. fuzz_reply: the library's line
# framing, reply decoder and reply/event handling. Seeds: every example
# line of proto/PROTOCOL.md (tests/fuzz/seeds.sh), plus the inputs in
# tests/fuzz/regress/ (each one a crash that was found and fixed).
FUZZ_BUILD ?= build-fuzz
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_ARGS ?=
FUZZ_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                 -fno-omit-frame-pointer
FUZZ_TARGETS := fuzz_daemon fuzz_reply

.PHONY: fuzz fuzz-ci fuzz-build fuzz-bins

fuzz: fuzz-build
	@sh tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) keep $(FUZZ_ARGS)

fuzz-ci: fuzz-build
	@sh tests/fuzz/run.sh $(FUZZ_BUILD) 20 fresh -seed=1 $(FUZZ_ARGS)

# The whole build again under clang and the fuzzer's instrumentation;
# HAVE_NVCC is cleared so no CUDA is built in that tree.
fuzz-build: deps
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "make fuzz: $(FUZZ_CC) not found (Debian: apt-get install clang libclang-rt-14-dev)"; exit 1; }
	@printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }\n' | \
	  $(FUZZ_CC) -fsanitize=fuzzer,address,undefined -x c - -o /dev/null 2>/dev/null || \
	  { echo "make fuzz: $(FUZZ_CC) cannot link libFuzzer and the sanitizers (Debian: apt-get install libclang-rt-14-dev)"; exit 1; }
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) HAVE_NVCC= \
	  OPT="-O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SANITIZE)" fuzz-bins

FUZZ_BINS := $(addprefix $(BUILD)/fuzz/,$(FUZZ_TARGETS))
fuzz-bins: $(FUZZ_BINS)

$(BUILD)/fuzz/fuzz_daemon: $(OBJDIR)/tests/fuzz/fuzz_daemon.o $(DAEMON_OBJS) \
                           $(DAEMON_EXTRA_OBJS) $(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer $(LDFLAGS) -o $@ $^ $(DAEMON_LDLIBS)

$(BUILD)/fuzz/fuzz_reply: $(OBJDIR)/tests/fuzz/fuzz_reply.o $(LIBHEADROOM_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer $(LDFLAGS) -o $@ $^ $(LDLIBS_HEADROOM)
