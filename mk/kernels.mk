# GPU kernels, built ahead of time and embedded in libmori as a generated C array.
# Invoked by the top Makefile as: make -f mk/kernels.mk B=build NVCC=/path/to/nvcc
#   with nvcc:    a fatbin for sm_80 and sm_90 plus compute_90 PTX (newer GPUs JIT the PTX);
#                 kernels/abi_check.c also checks gpu.h's restated driver ABI against cuda.h.
#   without nvcc, or with one that cannot compile (mk/probe-gpucc.sh):
#                 an empty image; libmori then answers GPU transfers with MORI_ENOKERNEL.
#   with hipcc:   a code-object bundle for the HIP_ARCHS it can target (gfx942 gfx950), from the
#                 same source through include/mori/device/gpu.h; archs it cannot target are
#                 skipped, saying so (mk/probe-gpucc.sh). Without: AMD GPUs get MORI_ENOKERNEL.
B      ?= build
NVCC   ?=
HIPCC  ?=
HIP_ARCHS ?= gfx942 gfx950
CC     ?= cc
OUT    := $(B)/kernels
GEN    := $(OUT)/mori_kernels.c
CUDA_PART := $(OUT)/kernels_cuda.part
HIP_PART  := $(OUT)/kernels_hip.part
# One translation unit (kernels/mori_kernels.cu) includes every kernel libmori launches.
SRC    := kernels/mori_kernels.cu
KSRC   := $(sort $(wildcard kernels/*.cu))
DEVICE_H := $(wildcard include/mori/device/*.cuh include/mori/device/*.h include/mori/device_host/*.h) include/mori.h
SHMEM_DEPS := $(DEVICE_H) kernels/mori_shmem_kernels.h common/shmem_layout.h
DEPS   := $(KSRC) $(wildcard kernels/*.h kernels/*.cuh) $(DEVICE_H) common/viz_layout.h include/mori_ep.h \
          mk/kernels.mk mk/embed.sh mk/probe-gpucc.sh
# Kernels of GPU tests and benchmarks, not part of libmori: one image each, embedded alike as
# mori_kernels_<name>_image (empty without nvcc: the test or bench then says so and skips).
#   shmemtest:  tests/shmem_dev_kernels.cu (tests/test_gpu_shmem_dev.c)
#   shmembench: tools/bench_shmem_kernels.cu (mori-bench shmem)
XNAMES := shmemtest shmembench
XSRC_shmemtest := tests/shmem_dev_kernels.cu
XSRC_shmembench := tools/bench_shmem_kernels.cu
XNAMES += collbench # mori-bench coll's GEMM (tools/bench_coll_kernels.cu)
XSRC_collbench := tools/bench_coll_kernels.cu
XNAMES += colltest # tests/test_gpu_coll's fused kernel: MORI-CCL's device API (mori/device/coll.cuh)
XSRC_colltest := tests/coll_dev_kernels.cu
XGEN   := $(foreach n,$(XNAMES),$(OUT)/$(n)_image.c)
ARCHS  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
          -gencode arch=compute_90,code=compute_90
NVFLAGS ?= -O3 -std=c++17
NVCC_OK   := $(if $(NVCC),$(shell sh mk/probe-gpucc.sh nvcc "$(NVCC)" "$(OUT)"),not found)
HAVE_NVCC := $(if $(filter yes,$(NVCC_OK)),yes,)
HIP_OK    := $(if $(HIPCC),$(shell sh mk/probe-gpucc.sh hipcc "$(HIPCC)" "$(OUT)" $(HIP_ARCHS)),none: hipcc not found)
HIP_GOOD  := $(if $(filter none:,$(firstword $(HIP_OK))),,$(HIP_OK))

all: $(GEN) $(XGEN)

$(GEN): $(CUDA_PART) $(HIP_PART)
	@cat $(CUDA_PART) $(HIP_PART) > $@.tmp && mv $@.tmp $@

# Rebuild when the compiler choice changes (nvcc or hipcc installed or removed).
$(OUT)/.nvcc: FORCE
	@mkdir -p $(OUT); echo '$(NVCC) $(HAVE_NVCC) $(NVFLAGS)' | cmp -s - $@ || echo '$(NVCC) $(HAVE_NVCC) $(NVFLAGS)' > $@
$(OUT)/.hipcc: FORCE
	@mkdir -p $(OUT); echo '$(HIPCC) $(HIP_GOOD) $(HIPFLAGS)' | cmp -s - $@ || echo '$(HIPCC) $(HIP_GOOD) $(HIPFLAGS)' > $@

ifeq ($(HAVE_NVCC),yes)
# cuda.h for the ABI check: beside nvcc, or in the toolkit's target directory (some installs
# have only the latter); without it the check is skipped, saying so.
NVCC_TOP := $(dir $(realpath $(NVCC)))..
CUDA_H   := $(firstword $(wildcard $(dir $(NVCC))../include/cuda.h $(NVCC_TOP)/include/cuda.h \
              $(NVCC_TOP)/targets/*/include/cuda.h $(CUDA_HOME)/include/cuda.h))

$(OUT)/copy.fatbin: $(DEPS) $(OUT)/.nvcc
	@echo "  NVCC    $(SRC) -> sm_80 sm_90 compute_90"
	@$(NVCC) $(NVFLAGS) --fatbin $(ARCHS) -Ikernels -Iinclude -o $@ $(SRC)

$(OUT)/abi_check.ok: kernels/abi_check.c common/gpu.h $(OUT)/.nvcc
ifneq ($(CUDA_H),)
	@$(CC) -std=gnu11 -Wall -Werror -fsyntax-only -Icommon -I$(dir $(CUDA_H)) kernels/abi_check.c && touch $@
else
	@echo "  ABI     skipped: no cuda.h beside $(NVCC); common/gpu.h is not checked against it"
	@touch $@
endif

$(CUDA_PART): $(OUT)/copy.fatbin $(OUT)/abi_check.ok
	@sh mk/embed.sh cuda $< "sm_80 sm_90 compute_90" > $@.tmp && mv $@.tmp $@

define xkernel
$(OUT)/$(1).fatbin: $(XSRC_$(1)) $(SHMEM_DEPS) mk/kernels.mk $(OUT)/.nvcc
	@echo "  NVCC    $(XSRC_$(1)) -> sm_80 sm_90 compute_90"
	@$(NVCC) $(NVFLAGS) --fatbin $(ARCHS) -Ikernels -Iinclude -o $$@ $(XSRC_$(1))
$(OUT)/$(1)_image.c: $(OUT)/$(1).fatbin mk/embed.sh
	@sh mk/embed.sh $(1) $$< "sm_80 sm_90 compute_90" > $$@.tmp && mv $$@.tmp $$@
endef
$(foreach n,$(XNAMES),$(eval $(call xkernel,$(n))))
$(OUT)/collbench.fatbin $(OUT)/colltest.fatbin: kernels/coll_kernels.h
else
$(XGEN): mk/embed.sh $(OUT)/.nvcc
	@sh mk/embed.sh $(patsubst $(OUT)/%_image.c,%,$@) "" "" > $@.tmp && mv $@.tmp $@
$(CUDA_PART): $(DEPS) $(OUT)/.nvcc
	@echo "  KERNELS no CUDA kernels: nvcc $(NVCC_OK); libmori answers GPU transfers on NVIDIA with MORI_ENOKERNEL"
	@sh mk/embed.sh cuda "" "" > $@.tmp && mv $@.tmp $@
endif

HIPFLAGS ?= -O3 -std=c++17
HIP_SKIP := $(filter-out $(HIP_GOOD),$(HIP_ARCHS))
ifneq ($(HIP_GOOD),)
$(OUT)/copy.hipfb: $(DEPS) mk/probe-gpucc.sh $(OUT)/.hipcc
	@echo "  HIPCC   $(SRC) -> $(HIP_GOOD)$(if $(HIP_SKIP), (skipped: $(HIP_SKIP), which $(HIPCC) cannot target),)"
	@$(HIPCC) $(HIPFLAGS) --genco $(addprefix --offload-arch=,$(HIP_GOOD)) -Ikernels -Iinclude -o $@ $(SRC)

$(HIP_PART): $(OUT)/copy.hipfb
	@sh mk/embed.sh hip $< "$(HIP_GOOD)" > $@.tmp && mv $@.tmp $@
else
$(HIP_PART): $(DEPS) mk/probe-gpucc.sh $(OUT)/.hipcc
	@echo "  KERNELS no HIP kernels for $(HIP_ARCHS): $(strip $(patsubst none:%,%,$(HIP_OK))); AMD GPUs get MORI_ENOKERNEL"
	@sh mk/embed.sh hip "" "" > $@.tmp && mv $@.tmp $@
endif

.PHONY: all FORCE

# Every .cu of kernels/ compiled alone (PTX for compute_80: the front end and NVVM, not ptxas), so
# none of them leans on what the aggregate unit included before it. tests/test_kernels_alone.sh
# runs it (make check); without nvcc it says so and skips.
ALONE := $(patsubst kernels/%.cu,$(OUT)/alone/%.ok,$(filter-out $(SRC),$(KSRC)))
ifeq ($(HAVE_NVCC),yes)
$(OUT)/alone/%.ok: kernels/%.cu $(DEPS) $(OUT)/.nvcc
	@mkdir -p $(dir $@); echo "  NVCC    $< alone"
	@$(NVCC) $(NVFLAGS) --ptx -arch=compute_80 -Ikernels -Iinclude -o $(@:.ok=.ptx) $< && touch $@
check-alone: $(ALONE)
else
check-alone:
	@echo "skipped: no nvcc ($(NVCC_OK)): the kernels' sources were not compiled one by one"
endif
.PHONY: check-alone

# MORI-IR: the device API as bitcode, its function table, the static device library.
include mk/ir.mk
