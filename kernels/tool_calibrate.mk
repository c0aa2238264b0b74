# (Named so that it sorts after kernels.mk, whose HAVE_NVCC it reads.)
# headroom-calibrate (kernels/calibrate.c, calib_probe.cu, calib_nccl.c):
# measures the node's safe headrooms against real NCCL and writes the
# calibration file headroomd reads (docs/calibration.md). Needs nvcc and
# NCCL's header ($NCCL_HOME/include, else CUDA's); NCCL itself is opened
# at run time.

ifeq ($(HAVE_NVCC),1)

CALIB_NCCL_INC := $(firstword $(foreach d,$(NCCL_HOME)/include $(CUDA_HOME)/include,\
                    $(if $(wildcard $(d)/nccl.h),$(d))))

ifneq ($(CALIB_NCCL_INC),)

CALIB_BIN := $(BINDIR)/headroom-calibrate
CALIB_OBJS := $(OBJDIR)/kernels/calib_probe.cu.o $(OBJDIR)/kernels/calib_nccl.o \
              $(OBJDIR)/kernels/calibrate.o
BINS += $(CALIB_BIN)

# CUDA's and NCCL's headers are not ours: -isystem keeps their warnings
# out of the zero-warning build.
$(OBJDIR)/kernels/calib_nccl.o $(OBJDIR)/kernels/calibrate.o: \
  CPPFLAGS += -isystem $(CUDA_HOME)/include -isystem $(CALIB_NCCL_INC)

$(CALIB_BIN): $(CALIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS_CJSON) $(LDLIBS_CUDART) -lstdc++

else
$(info kernels: no nccl.h in $$NCCL_HOME/include or $(CUDA_HOME)/include; headroom-calibrate skipped)
endif

endif

# The tool on 2 GPUs, then headroomd reading its file (skips without).
GPU_TESTS += tests/gpu/test_calibrate.sh
GPU_TESTS_2 += tests/gpu/test_calibrate.sh
