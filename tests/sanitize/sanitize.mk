# tests/sanitize: the CPU test suite under the sanitizers and valgrind.
#
#   make test-asan       every unit and integration test, and the daemon
#                        and tools they start, built with
#                        -fsanitize=address,undefined in $(ASAN_BUILD)
#   make test-valgrind   the unit and integration test programs, and every
#                        headroomd, headroomctl and headroom-run they start,
#                        under valgrind memcheck (the regular build; the
#                        GPU tests are not run)
#
# Both fail on the first report of any kind: a memory error, undefined
# behaviour, a definite leak (tests/sanitize/run.sh says where).
ASAN_BUILD ?= build-asan
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
              -fno-omit-frame-pointer

.PHONY: test-asan test-valgrind sanitize-asan-suite sanitize-valgrind-suite

test-asan: deps-test
	@$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) HAVE_NVCC= \
	  OPT="-O1 -g $(ASAN_FLAGS)" sanitize-asan-suite

.SECONDEXPANSION:
sanitize-asan-suite: all $$(UNIT_TESTS) $$(INTEG_TESTS) $$(GPU_TESTS)
	@sh tests/sanitize/run.sh asan $(BUILD) $(UNIT_TESTS) $(INTEG_TESTS) $(GPU_TESTS)

test-valgrind: deps-test
	@command -v valgrind >/dev/null 2>&1 || { echo "make test-valgrind: valgrind not found (Debian: apt-get install valgrind)"; exit 1; }
	@$(MAKE) --no-print-directory HAVE_NVCC= sanitize-valgrind-suite

# The GPU tests are left out: memcheck does not see device memory.
sanitize-valgrind-suite: all $$(UNIT_TESTS) $$(INTEG_TESTS)
	@sh tests/sanitize/run.sh valgrind $(BUILD) $(UNIT_TESTS) $(INTEG_TESTS)
