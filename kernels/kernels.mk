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
# The expert-parallel forward's host logic that needs no GPU (checks,
# layout, the bootstrap's records): plain C, in the library with nvcc and
# in the unit tests on every machine.
MOE_EP_PLAN_OBJ := $(OBJDIR)/kernels/moe_ep_plan.o

HAVE_NVCC := $(shell test -x "$(NVCC)" && echo 1)

ifeq ($(HAVE_NVCC),1)

# One build of the kernels: the shared library and the static one hold
# the same objects. The static library is for the programs that use the
# benchmark hook (kernels/moe_bench.h: bench/moe_phases, the GPU tests
# that force a path or a fault), which the shared library does not
# export; so what they time and test is what the shared library ships.
MOE_CU_SRCS := kernels/moe_kernel.cu kernels/moe_agnostic.cu kernels/moe_backward.cu \
               kernels/moe_ep.cu kernels/moe_ep_agnostic.cu kernels/moe_ep_backward.cu \
               kernels/moe_ep_api.cu \
               kernels/moe_api.cu
MOE_CU_OBJS := $(patsubst %.cu,$(OBJDIR)/%.cu.o,$(MOE_CU_SRCS)) $(MOE_EP_PLAN_OBJ)
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
# cost).
NVCC_PTXAS_STRICT := -Xptxas -Werror

MOE_CU_DEPS := kernels/*.h kernels/*.cuh client/headroom.h kernels/nvcc_strict.sh
MOE_NVCC_STRICT = sh kernels/nvcc_strict.sh $@ $(NVCC) $(NVCCFLAGS) $(NVCC_PTXAS_STRICT)

$(OBJDIR)/kernels/%.cu.o: kernels/%.cu $(MOE_CU_DEPS)
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

$(MOE_LIB_A): $(MOE_CU_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

.PHONY: kernels-sass

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
