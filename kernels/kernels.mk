# kernels/: the mega-MoE kernel (CUDA C, sm_90a) and its launch path, built
# into libheadroom_moe.so and .a; and its CPU reference (plain C, always
# built: the unit tests use it on every machine).
#
# Without nvcc nothing CUDA is built (one line says so); the daemon, the
# client and every CPU test still build. With nvcc the kernels build here
# even without a GPU, with zero warnings: a process without a GPU gets
# HR_ENOGPU from hr_moe_create (the CUDA runtime is linked statically and
# loads the driver only at the first call).

MOE_REF_OBJ := $(OBJDIR)/kernels/moe_ref.o

HAVE_NVCC := $(shell test -x "$(NVCC)" && echo 1)

ifeq ($(HAVE_NVCC),1)

# Two builds of the same sources. The shared library is production's: its
# kernels compiled with HR__MOE_NO_VARIANTS=1, so that none of the
# benchmark's variant code is in them (moe_kernel.h, HR__MOE_VARIANT: half
# the SASS, and 2-10% faster at Qwen3-30B-A3B T = 1-1024,
# bench/results/moe-novariants-h200-2026-12-01.md). The static library
# keeps every variant: the benchmark's entry point (kernels/moe_bench.h)
# and the tests that launch variants and faults link it.
MOE_CU_SRCS := kernels/moe_kernel.cu kernels/moe_agnostic.cu kernels/moe_api.cu
MOE_CU_OBJS := $(patsubst %.cu,$(OBJDIR)/%.cu.o,$(MOE_CU_SRCS))
MOE_BENCH_CU_OBJS := $(patsubst kernels/%.cu,$(OBJDIR)/kernels/bench/%.cu.o,$(MOE_CU_SRCS))
MOE_LIB_SO := $(LIBDIR)/libheadroom_moe.so
MOE_LIB_A := $(LIBDIR)/libheadroom_moe.a
CUDA_LIBDIR := $(CUDA_HOME)/lib64
# What a program that uses the CUDA runtime itself links (the GPU tests).
LDLIBS_CUDART := -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lpthread

NVCC_ARCH := -gencode=arch=compute_90a,code=sm_90a
# NVCC_EXTRA: more flags, e.g. `make NVCC_EXTRA=-lineinfo` so that Nsight
# Compute can put its stall samples on source lines (docs/kernels.md).
NVCC_EXTRA ?=
NVCCFLAGS := -std=c++17 -O3 $(NVCC_ARCH) -Xcompiler -fPIC \
             -Xcompiler -Wall,-Wextra -Xptxas -warn-spills \
             -Iclient -Ikernels -Iproto $(NVCC_EXTRA)

# libheadroom (client/client.mk) gives the lease and takes the incidents.
MOE_LIBHEADROOM := $(LIBDIR)/libheadroom.so
MOE_LINK_HEADROOM := -L$(LIBDIR) -lheadroom

BINS += $(MOE_LIB_SO) $(MOE_LIB_A)

# The library's kernels build with ptxas warnings as errors, and
# nvcc_strict.sh also refuses ptxas's "Potential Performance Loss" notes:
# a register spill, or wgmma instructions serialized across a function
# call (C7510) or a loop (C7518), is a performance regression the build
# should stop, not a line in its log (docs/kernels.md says what each
# cost). The benchmark's build-time variants below are exempt: a tuning
# point may spill.
NVCC_PTXAS_STRICT := -Xptxas -Werror

MOE_CU_DEPS := kernels/*.h kernels/*.cuh client/headroom.h kernels/nvcc_strict.sh
MOE_NVCC_STRICT = sh kernels/nvcc_strict.sh $@ $(NVCC) $(NVCCFLAGS) $(NVCC_PTXAS_STRICT)

$(OBJDIR)/kernels/%.cu.o: kernels/%.cu $(MOE_CU_DEPS)
	@mkdir -p $(dir $@)
	$(MOE_NVCC_STRICT) -DHR__MOE_NO_VARIANTS=1 -c -o $@ $<

$(OBJDIR)/kernels/bench/%.cu.o: kernels/%.cu $(MOE_CU_DEPS)
	@mkdir -p $(dir $@)
	$(MOE_NVCC_STRICT) -c -o $@ $<

# Only the hr_moe_* API leaves the library (kernels/libheadroom_moe.map):
# the static CUDA runtime inside stays private, so a program with its own
# runtime (or PyTorch) never binds to ours. -z defs: a missing symbol fails
# here, not in a user's program.
$(MOE_LIB_SO): $(MOE_CU_OBJS) $(MOE_LIBHEADROOM) kernels/libheadroom_moe.map
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(MOE_CU_OBJS) $(LDFLAGS) \
	  -Wl,-soname,libheadroom_moe.so -Wl,--version-script=kernels/libheadroom_moe.map \
	  -Wl,--exclude-libs,ALL -Wl,-z,defs -Wl,-rpath,'$$ORIGIN' \
	  $(MOE_LINK_HEADROOM) $(LDLIBS_CUDART) -lstdc++

$(MOE_LIB_A): $(MOE_BENCH_CU_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

# Build-time variants of the tiny tile, for tuning on a GPU
# (`make bench-variants`): tiny-BM-BK-STAGES, see moe_gemm.cuh. (The big
# tile has none: the public API, which bench_moe.py times, runs it on
# wgmma only.)
MOE_VARIANTS ?= tiny-64-128-9 tiny-64-256-5
MOE_VARIANT_LIBS := $(foreach v,$(MOE_VARIANTS),$(LIBDIR)/variants/libheadroom_moe-$(v).so)
moe_vw = $(word $(2),$(subst -, ,$(1)))
moe_variant_flags = -DHR_MOE_TINY_BM=$(call moe_vw,$(1),2) \
  -DHR_MOE_TINY_BK=$(call moe_vw,$(1),3) -DHR_MOE_TINY_STAGES=$(call moe_vw,$(1),4)

$(OBJDIR)/kernels/variants/moe_kernel-%.cu.o: kernels/moe_kernel.cu kernels/*.h kernels/*.cuh client/headroom.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DHR__MOE_NO_VARIANTS=1 $(call moe_variant_flags,$*) -c -o $@ $<

$(OBJDIR)/kernels/variants/moe_agnostic-%.cu.o: kernels/moe_agnostic.cu kernels/*.h kernels/*.cuh client/headroom.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DHR__MOE_NO_VARIANTS=1 $(call moe_variant_flags,$*) -c -o $@ $<

$(LIBDIR)/variants/libheadroom_moe-%.so: $(OBJDIR)/kernels/variants/moe_kernel-%.cu.o \
                                         $(OBJDIR)/kernels/variants/moe_agnostic-%.cu.o \
                                         $(OBJDIR)/kernels/moe_api.cu.o $(MOE_LIBHEADROOM)
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(filter %.o,$^) $(LDFLAGS) \
	  -Wl,--version-script=kernels/libheadroom_moe.map \
	  -Wl,--exclude-libs,ALL -Wl,-z,defs -Wl,-rpath,'$$ORIGIN/..' \
	  $(MOE_LINK_HEADROOM) $(LDLIBS_CUDART) -lstdc++

.PRECIOUS: $(OBJDIR)/kernels/variants/%.cu.o
.PHONY: kernels-variants kernels-sass
kernels-variants: $(MOE_VARIANT_LIBS)

# The kernels' registers, shared memory and spills, and their SASS, for
# review without a GPU: build/kernels.sass
kernels-sass: $(OBJDIR)/kernels/moe_kernel.cu.o $(OBJDIR)/kernels/moe_agnostic.cu.o
	cuobjdump --dump-resource-usage $^ | grep -i -E 'Function|REG|SHARED|STACK'
	cuobjdump --dump-sass $^ > $(BUILD)/kernels.sass
	@grep -c -E 'HMMA' $(BUILD)/kernels.sass | sed 's/^/HMMA instructions: /'

else

$(info kernels: nvcc not found ($(NVCC)); CUDA kernels skipped)
LDLIBS_CUDART :=

endif
