# headroom: one Makefile for the whole tree.
#
#   make            build everything buildable here (daemon, library, tools,
#                   and the CUDA kernels when nvcc is present)
#   make kernels    only the CUDA kernels (libheadroom_moe; needs nvcc)
#   make run        build only the daemon and its tools (in parallel,
#                   quietly) and start headroomd in the background on
#                   build/run/headroom.sock; make stop stops it
#   make run-fg     the same in the foreground, its log on the terminal
#   make install    [PREFIX=/usr/local] [SYSCONFDIR=] [DESTDIR=]; uninstall
#   make test       every CPU test: unit, integration (real daemon, real
#                   socket); GPU tests print a skip line without a GPU
#   make gpu-test   the GPU tests (on a machine with an H200; some need 2)
#   make gpu-test-one  those that need one GPU (a machine with one)
#   make bench-gpu  the mega-MoE benchmark against PyTorch (see bench/)
#   make clean
#
# Each directory adds its targets in its own .mk fragments (every *.mk in
# proto/, policy/, client/, daemon/, kernels/, tests/, tests/*/ and bench/ is
# included below); a fragment appends to these lists:
#   BINS         programs built into build/bin
#   UNIT_TESTS   test programs run by `make test` (cmocka)
#   INTEG_TESTS  integration test programs run by `make test`
#   GPU_TESTS    test programs run by `make gpu-test`
#   GPU_TESTS_2  those of them that need 2 GPUs (left out by gpu-test-one)

CC       ?= cc
NVCC     ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME ?= /usr/local/cuda
BUILD    ?= build
PREFIX   ?= /usr/local

CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
OPT      ?= -O2 -g
CFLAGS   += $(CSTD) $(WARN) $(OPT) -fPIC -pthread
CPPFLAGS += -Iproto -Ipolicy -Iclient -Idaemon -Ikernels
# DEPS_PREFIX: a folder where the Debian packages were unpacked (dpkg -x),
# for machines where they cannot be installed (see tests/gpu/device_env.sh).
ifneq ($(DEPS_PREFIX),)
CPPFLAGS += -I$(DEPS_PREFIX)/usr/include
LDFLAGS  += -L$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu \
            -Wl,-rpath,$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu
endif
LDLIBS_UV    := -luv
LDLIBS_CJSON := -lcjson
LDLIBS_CMOCKA := -lcmocka

# Debian packages the build and the tests need, by the header they provide.
# Building (and the GPU tests) needs the libraries; the CPU test suite
# also checks the status schema with Debian's python3-jsonschema.
DEB_DEPS_BUILD := libuv1-dev:uv.h libcjson-dev:cjson/cJSON.h \
                  libcmocka-dev:cmocka.h
DEB_DEPS_TEST  := $(DEB_DEPS_BUILD) python3-jsonschema: pkg-config:

BINDIR := $(BUILD)/bin
LIBDIR := $(BUILD)/lib
OBJDIR := $(BUILD)/obj
TESTBIN := $(BUILD)/tests
# The programs in TESTBIN that link the shared libraries look for them in
# ../lib from their own directory, not at this build's absolute path, so a
# build directory works moved or copied whole (bench/build_rev.sh's builds,
# run on another machine; tests/unit/test_testbin_rpath.sh). Recursive
# (=): make expands $$ once, in the recipe.
TESTBIN_RPATH = -Wl,-rpath,'$$ORIGIN/../lib'

BINS :=
UNIT_TESTS :=
INTEG_TESTS :=
GPU_TESTS :=

.PHONY: all run run-fg stop kernels test gpu-test gpu-test-one clean deps \
        deps-test install uninstall
all:

include $(sort $(wildcard proto/*.mk policy/*.mk client/*.mk daemon/*.mk \
                          kernels/*.mk tests/*.mk tests/*/*.mk bench/*.mk))

all: $(BINS)

# ---- dependencies -------------------------------------------------------
# Installs missing Debian build dependencies when run as root; otherwise
# names exactly what is missing and stops.
deps:
	@CPPFLAGS="$(CPPFLAGS)" sh tests/deps.sh $(DEB_DEPS_BUILD)
deps-test:
	@CPPFLAGS="$(CPPFLAGS)" sh tests/deps.sh $(DEB_DEPS_TEST)

# ---- running ------------------------------------------------------------
# What the daemon and the tour need, and nothing else: never the CUDA
# kernels, which take minutes on a small machine and which headroomd does
# not use (make or make kernels builds them).
NPROC    := $(shell nproc 2>/dev/null || echo 2)
# Every core for the builds that make run and make test start, unless the
# caller gave its own -j (then its job server is shared, not reset).
JOBS      = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC))
RUN_DIR  := $(CURDIR)/$(BUILD)/run
RUN_SOCKET := $(RUN_DIR)/headroom.sock
RUN_PID  := $(RUN_DIR)/headroomd.pid
RUN_LOG  := $(RUN_DIR)/headroomd.log
RUN_CONF := $(RUN_DIR)/headroomd.conf
RUN_BINS := $(BINDIR)/headroomd $(BINDIR)/headroomctl $(BINDIR)/headroom-run \
            $(LIBHEADROOM_SO) $(HEADROOM_H_INSTALL)
# A daemon for whoever starts it: its socket only they (and root) may open
# (0600), and their own group as operator_group, so that they may set its
# policy without root.
define RUN_PREPARE
	@echo "make run: building headroomd and its tools (make -j$(NPROC)); the CUDA kernels build with make kernels"
	@$(MAKE) --no-print-directory -s $(JOBS) $(RUN_BINS)
	@mkdir -p $(RUN_DIR)
	@printf '# written by make run: a daemon for %s only\nsocket_mode = 0600\noperator_group = %s\n' \
	  "$$(id -un)" "$$(id -gn)" > $(RUN_CONF)
endef
# The pid in RUN_PID, when it is a live headroomd.
RUN_LIVE = p=$$(cat $(RUN_PID) 2>/dev/null); \
  [ -n "$$p" ] && [ "$$(cat /proc/$$p/comm 2>/dev/null)" = headroomd ]
RUN_CMD = $(BINDIR)/headroomd --config $(RUN_CONF) --socket $(RUN_SOCKET) \
  --state-dir $(RUN_DIR) $(RUN_ARGS)

run: deps
	$(RUN_PREPARE)
	@if $(RUN_LIVE); then \
	  echo "headroomd: already running (pid $$p) on $(RUN_SOCKET); make stop stops it"; \
	  exit 0; fi; \
	$(RUN_CMD) > $(RUN_LOG) 2>&1 < /dev/null & p=$$!; echo $$p > $(RUN_PID); \
	i=0; until [ -S $(RUN_SOCKET) ] && $(BINDIR)/headroomctl -s $(RUN_SOCKET) \
	  --timeout 1000 status --summary > /dev/null 2>&1; do \
	  if ! kill -0 $$p 2>/dev/null || [ $$i -ge 300 ]; then \
	    echo "headroomd did not start; its log ($(RUN_LOG)):" >&2; \
	    cat $(RUN_LOG) >&2; rm -f $(RUN_PID); kill $$p 2>/dev/null; exit 1; fi; \
	  i=$$((i + 1)); sleep 0.1; done; \
	echo "headroomd: running (pid $$p), socket $(RUN_SOCKET), log $(RUN_LOG)"; \
	echo "  export HEADROOM_SOCKET=$(RUN_SOCKET); $(BINDIR)/headroomctl status"; \
	echo "  make stop    stops it"

run-fg: deps
	$(RUN_PREPARE)
	@echo "headroomd: socket $(RUN_SOCKET); Ctrl-C (or make stop) stops it"
	@echo $$$$ > $(RUN_PID); exec $(RUN_CMD)

stop:
	@if $(RUN_LIVE); then \
	  kill $$p; i=0; while kill -0 $$p 2>/dev/null && [ $$i -lt 100 ]; do \
	    i=$$((i + 1)); sleep 0.1; done; \
	  if kill -0 $$p 2>/dev/null; then \
	    echo "headroomd (pid $$p) did not stop in 10 s" >&2; exit 1; fi; \
	  rm -f $(RUN_PID); echo "headroomd: stopped (pid $$p)"; \
	else \
	  rm -f $(RUN_PID); echo "headroomd: not running (no make run daemon)"; fi

kernels: deps
	@if [ -x "$(NVCC)" ]; then \
	  $(MAKE) --no-print-directory $(MOE_LIB_SO) $(MOE_LIB_A); \
	else \
	  echo "make kernels: nvcc not found ($(NVCC)); install the CUDA toolkit or pass NVCC=/path/to/nvcc" >&2; \
	  exit 1; fi

# ---- tests --------------------------------------------------------------
test: deps-test
	@$(MAKE) --no-print-directory $(JOBS) all $(UNIT_TESTS) $(INTEG_TESTS) $(GPU_TESTS)
	@HR_OBJDIR=$(OBJDIR) HR_LIBDIR=$(LIBDIR) sh tests/run_tests.sh $(UNIT_TESTS) $(INTEG_TESTS) $(GPU_TESTS)

gpu-test: deps
	@$(MAKE) --no-print-directory all $(GPU_TESTS)
	@HEADROOM_REQUIRE_GPU=1 HR_TEST_TIMEOUT=$${HR_TEST_TIMEOUT:-300} \
	  sh tests/run_tests.sh $(GPU_TESTS)

# The GPU tests that need one GPU only, for a machine that has one; the
# 2-GPU ones (GPU_TESTS_2) are named as not run, never passed over quietly.
gpu-test-one: deps
	@$(MAKE) --no-print-directory all $(filter-out $(GPU_TESTS_2),$(GPU_TESTS))
	@echo "gpu-test-one: not run (they need 2 GPUs): $(GPU_TESTS_2)"
	@HEADROOM_REQUIRE_GPU=1 HR_TEST_TIMEOUT=$${HR_TEST_TIMEOUT:-300} \
	  sh tests/run_tests.sh $(filter-out $(GPU_TESTS_2),$(GPU_TESTS))

clean:
	rm -rf $(BUILD)

# ---- install ------------------------------------------------------------
# make install [PREFIX=/usr/local] [SYSCONFDIR=] [DESTDIR=], then (as root)
#   systemctl daemon-reload && systemctl enable --now headroomd.socket
# As GNU and Debian have it: PREFIX=/usr puts the config in /etc, any other
# prefix in PREFIX/etc, unless SYSCONFDIR says where. An existing config
# file is never overwritten (the new one is put beside it as
# headroomd.conf.new); make uninstall removes what install wrote, and the
# config only while it is the one installed.
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
I_BIN   := $(PREFIX)/bin
I_SBIN  := $(PREFIX)/sbin
I_LIB   := $(PREFIX)/lib
I_INC   := $(PREFIX)/include
I_DOC   := $(PREFIX)/share/doc/headroom
I_UNIT  := $(PREFIX)/lib/systemd/system
I_USERS := $(PREFIX)/lib/sysusers.d
I_CONF  := $(SYSCONFDIR)/headroom
VERSION := $(shell sed -n 's/^\#define HR_VERSION_STRING "\(.*\)"/\1/p' proto/hr_types.h)
SUBST   := sed -e 's|@BINDIR@|$(I_SBIN)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
             -e 's|@DOCDIR@|$(I_DOC)|g' -e 's|@PREFIX@|$(PREFIX)|g' \
             -e 's|@LIBDIR@|$(I_LIB)|g' -e 's|@INCLUDEDIR@|$(I_INC)|g' \
             -e 's|@VERSION@|$(VERSION)|g' \
             -e 's|@CUDA_LIBDIR@|$(CUDA_HOME)/lib64|g'
# systemd/NAME.in -> NAME, with the paths above.
UNITS   := headroomd.service headroomd.socket headroom-metrics.service \
           headroom-metrics.timer
DOCS    := README.md proto/PROTOCOL.md $(wildcard docs/*.md)

install: all
	install -d $(DESTDIR)$(I_BIN) $(DESTDIR)$(I_SBIN) $(DESTDIR)$(I_LIB)/pkgconfig \
	  $(DESTDIR)$(I_INC) $(DESTDIR)$(I_DOC) $(DESTDIR)$(I_UNIT) \
	  $(DESTDIR)$(I_USERS) $(DESTDIR)$(I_CONF)
	install -m 0755 $(BINDIR)/headroomd $(DESTDIR)$(I_SBIN)/headroomd
	install -m 0755 $(BINDIR)/headroomctl $(BINDIR)/headroom-run $(DESTDIR)$(I_BIN)/
	cp -P $(LIBDIR)/libheadroom.so* $(DESTDIR)$(I_LIB)/
	install -m 0644 $(LIBDIR)/libheadroom.a $(DESTDIR)$(I_LIB)/
	install -m 0644 $(BUILD)/include/headroom.h $(DESTDIR)$(I_INC)/
	if [ -x $(BINDIR)/headroom-calibrate ]; then \
	  install -m 0755 $(BINDIR)/headroom-calibrate $(DESTDIR)$(I_BIN)/; fi
	if [ -f $(LIBDIR)/libheadroom_moe.a ]; then \
	  cp -P $(LIBDIR)/libheadroom_moe.* $(DESTDIR)$(I_LIB)/ && \
	  install -m 0644 kernels/headroom_moe.h $(DESTDIR)$(I_INC)/ && \
	  $(SUBST) systemd/headroom_moe.pc.in > $(DESTDIR)$(I_LIB)/pkgconfig/headroom_moe.pc; fi
	$(SUBST) systemd/headroom.pc.in > $(DESTDIR)$(I_LIB)/pkgconfig/headroom.pc
	for u in $(UNITS); do \
	  $(SUBST) systemd/$$u.in > $(DESTDIR)$(I_UNIT)/$$u || exit 1; done
	install -m 0644 systemd/headroom.sysusers $(DESTDIR)$(I_USERS)/headroom.conf
	install -m 0644 $(DOCS) $(DESTDIR)$(I_DOC)/
	if [ -e $(DESTDIR)$(I_CONF)/headroomd.conf ]; then \
	  install -m 0644 systemd/headroomd.conf $(DESTDIR)$(I_CONF)/headroomd.conf.new; \
	else \
	  install -m 0644 systemd/headroomd.conf $(DESTDIR)$(I_CONF)/headroomd.conf; fi

uninstall:
	rm -f $(DESTDIR)$(I_SBIN)/headroomd $(DESTDIR)$(I_BIN)/headroomctl \
	  $(DESTDIR)$(I_BIN)/headroom-run $(DESTDIR)$(I_BIN)/headroom-calibrate \
	  $(DESTDIR)$(I_LIB)/libheadroom.so* $(DESTDIR)$(I_LIB)/libheadroom.a \
	  $(DESTDIR)$(I_LIB)/libheadroom_moe.* $(DESTDIR)$(I_INC)/headroom.h \
	  $(DESTDIR)$(I_INC)/headroom_moe.h \
	  $(DESTDIR)$(I_LIB)/pkgconfig/headroom.pc \
	  $(DESTDIR)$(I_LIB)/pkgconfig/headroom_moe.pc \
	  $(addprefix $(DESTDIR)$(I_UNIT)/,$(UNITS)) \
	  $(DESTDIR)$(I_USERS)/headroom.conf \
	  $(addprefix $(DESTDIR)$(I_DOC)/,$(notdir $(DOCS))) \
	  $(DESTDIR)$(I_CONF)/headroomd.conf.new
	-rmdir $(DESTDIR)$(I_DOC) 2>/dev/null
	if cmp -s systemd/headroomd.conf $(DESTDIR)$(I_CONF)/headroomd.conf; then \
	  rm -f $(DESTDIR)$(I_CONF)/headroomd.conf; \
	  rmdir $(DESTDIR)$(I_CONF) 2>/dev/null || true; \
	elif [ -e $(DESTDIR)$(I_CONF)/headroomd.conf ]; then \
	  echo "uninstall: $(DESTDIR)$(I_CONF)/headroomd.conf was changed; left in place"; fi

$(OBJDIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

-include $(shell find $(OBJDIR) -name '*.d' 2>/dev/null)
