# The CPU reference of the mega-MoE forward (kernels/moe_ref.c): plain C,
# tested on every machine, GPU or not.
UNIT_TESTS += $(TESTBIN)/test_moe_ref

$(TESTBIN)/test_moe_ref: $(OBJDIR)/tests/unit/test_moe_ref.o $(OBJDIR)/kernels/moe_ref.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_CMOCKA) -lm

# kernels/nvcc_strict.sh, through which the library's kernels are built:
# it refuses ptxas's performance-loss notes, and the strict flags refuse
# spills (a real nvcc where there is one).
UNIT_TESTS += tests/unit/test_nvcc_strict.sh

# The one build of the kernels (kernels/kernels.mk): the static library
# holds the shared library's objects. Only where this build compiles the
# kernels (not in the sanitizer builds, which set HAVE_NVCC empty).
# And the programs that link the shared libraries find them relative to
# themselves, so a build directory can be copied whole (Makefile
# TESTBIN_RPATH). Real programs only where nvcc built them.
ifeq ($(HAVE_NVCC),1)
UNIT_TESTS += tests/unit/test_moe_builds.sh
UNIT_TESTS += tests/unit/test_testbin_rpath.sh
endif

# The expert-parallel forward's host logic that needs no GPU
# (kernels/moe_ep_plan.c): argument checks, the layout and its sizes,
# the bootstrap's exchange through an in-process allgather of threads.
UNIT_TESTS += $(TESTBIN)/test_moe_ep_plan

$(TESTBIN)/test_moe_ep_plan: $(OBJDIR)/tests/unit/test_moe_ep_plan.o $(MOE_EP_PLAN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_CMOCKA)

# hr_moe_ep_* through the library itself (where nvcc built it): arguments
# checked before the bootstrap is called, NULL refused, and a create on a
# machine without a GPU failing alike on every rank.
ifeq ($(HAVE_NVCC),1)
UNIT_TESTS += $(TESTBIN)/test_moe_ep_api

$(TESTBIN)/test_moe_ep_api: $(OBJDIR)/tests/unit/test_moe_ep_api.o $(MOE_LIB_SO) \
                            $(LIBDIR)/libheadroom.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(LIBDIR) -lheadroom_moe -lheadroom \
	  $(TESTBIN_RPATH) $(LDLIBS_CMOCKA)
endif
