# headroom: one Makefile for the whole tree.
#
#   make            build everything buildable here (daemon, library, tools,
#                   and the CUDA kernels when nvcc is present)
#   make run        run headroomd in the foreground on the embedded default
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

.PHONY: all run test gpu-test gpu-test-one clean deps deps-test install
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
RUN_SOCKET := $(CURDIR)/$(BUILD)/run/headroom.sock
run: deps
	@$(MAKE) --no-print-directory all
	@mkdir -p $(dir $(RUN_SOCKET))
	@echo "headroomd: socket $(RUN_SOCKET)  (try: $(BINDIR)/headroomctl --socket $(RUN_SOCKET) status --pretty)"
	exec $(BINDIR)/headroomd --socket $(RUN_SOCKET) --state-dir $(CURDIR)/$(BUILD)/run $(RUN_ARGS)

# ---- tests --------------------------------------------------------------
test: deps-test
	@$(MAKE) --no-print-directory all $(UNIT_TESTS) $(INTEG_TESTS) $(GPU_TESTS)
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
# make install [PREFIX=/usr/local] [DESTDIR=] [SYSCONFDIR=/etc]
# An existing config file is never overwritten (the new one is put beside
# it as headroomd.conf.new).
SYSCONFDIR ?= /etc
I_BIN   := $(PREFIX)/bin
I_SBIN  := $(PREFIX)/sbin
I_LIB   := $(PREFIX)/lib
I_INC   := $(PREFIX)/include
I_DOC   := $(PREFIX)/share/doc/headroom
I_UNIT  := $(PREFIX)/lib/systemd/system
I_USERS := $(PREFIX)/lib/sysusers.d
VERSION := $(shell sed -n 's/^\#define HR_VERSION_STRING "\(.*\)"/\1/p' proto/hr_types.h)
SUBST   := sed -e 's|@BINDIR@|$(I_SBIN)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
             -e 's|@DOCDIR@|$(I_DOC)|g' -e 's|@PREFIX@|$(PREFIX)|g' \
             -e 's|@LIBDIR@|$(I_LIB)|g' -e 's|@INCLUDEDIR@|$(I_INC)|g' \
             -e 's|@VERSION@|$(VERSION)|g'

install: all
	install -d $(DESTDIR)$(I_BIN) $(DESTDIR)$(I_SBIN) $(DESTDIR)$(I_LIB)/pkgconfig \
	  $(DESTDIR)$(I_INC) $(DESTDIR)$(I_DOC) $(DESTDIR)$(I_UNIT) \
	  $(DESTDIR)$(I_USERS) $(DESTDIR)$(SYSCONFDIR)/headroom
	install -m 0755 $(BINDIR)/headroomd $(DESTDIR)$(I_SBIN)/headroomd
	install -m 0755 $(BINDIR)/headroomctl $(BINDIR)/headroom-run $(DESTDIR)$(I_BIN)/
	cp -P $(LIBDIR)/libheadroom.so* $(DESTDIR)$(I_LIB)/
	install -m 0644 $(LIBDIR)/libheadroom.a $(DESTDIR)$(I_LIB)/
	install -m 0644 $(BUILD)/include/headroom.h $(DESTDIR)$(I_INC)/
	if [ -x $(BINDIR)/headroom-calibrate ]; then \
	  install -m 0755 $(BINDIR)/headroom-calibrate $(DESTDIR)$(I_BIN)/; fi
	if [ -f $(LIBDIR)/libheadroom_moe.a ]; then \
	  cp -P $(LIBDIR)/libheadroom_moe.* $(DESTDIR)$(I_LIB)/ && \
	  install -m 0644 kernels/headroom_moe.h $(DESTDIR)$(I_INC)/; fi
	$(SUBST) systemd/headroom.pc.in > $(DESTDIR)$(I_LIB)/pkgconfig/headroom.pc
	$(SUBST) systemd/headroomd.service > $(DESTDIR)$(I_UNIT)/headroomd.service
	$(SUBST) systemd/headroomd.socket > $(DESTDIR)$(I_UNIT)/headroomd.socket
	$(SUBST) systemd/headroom-metrics.service > $(DESTDIR)$(I_UNIT)/headroom-metrics.service
	$(SUBST) systemd/headroom-metrics.timer > $(DESTDIR)$(I_UNIT)/headroom-metrics.timer
	install -m 0644 systemd/headroom.sysusers $(DESTDIR)$(I_USERS)/headroom.conf
	install -m 0644 README.md proto/PROTOCOL.md docs/*.md $(DESTDIR)$(I_DOC)/
	if [ -e $(DESTDIR)$(SYSCONFDIR)/headroom/headroomd.conf ]; then \
	  install -m 0644 systemd/headroomd.conf $(DESTDIR)$(SYSCONFDIR)/headroom/headroomd.conf.new; \
	else \
	  install -m 0644 systemd/headroomd.conf $(DESTDIR)$(SYSCONFDIR)/headroom/headroomd.conf; fi

$(OBJDIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

-include $(shell find $(OBJDIR) -name '*.d' 2>/dev/null)
