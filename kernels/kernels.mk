# GPU kernels, built ahead of time and embedded in libmori as a generated C array.
# Invoked by the top Makefile as: make -f kernels/kernels.mk B=build NVCC=/path/to/nvcc
#   with nvcc:    a fatbin for sm_80 and sm_90 plus compute_90 PTX (newer GPUs JIT the PTX);
#                 kernels/abi_check.c also checks gpu.h's restated driver ABI against cuda.h.
#   without nvcc, or with one that cannot compile (kernels/probe-gpucc.sh):
#                 an empty image; libmori then answers GPU transfers with MORI_ENOKERNEL.
#   with hipcc:   a code-object bundle for the HIP_ARCHS it can target (gfx942 gfx950), from the
#                 same source through kernels/mori_gpu.h; archs it cannot target are skipped,
#                 saying so (kernels/probe-gpucc.sh). Without: AMD GPUs get MORI_ENOKERNEL.
B      ?= build
NVCC   ?=
HIPCC  ?=
HIP_ARCHS ?= gfx942 gfx950
CC     ?= cc
OUT    := $(B)/kernels
GEN    := $(OUT)/mori_kernels.c
CUDA_PART := $(OUT)/kernels_cuda.part
HIP_PART  := $(OUT)/kernels_hip.part
# One translation unit (kernels/mori_kernels.cu) includes every kernel libmori launches: copy.cu
# (mori_copy_batch) and shmem.cu (mori_shmem_barrier_on_stream, mori_shmem_quiet_on_stream).
SRC    := kernels/mori_kernels.cu
SHMEM_DEPS := kernels/mori_shmem.cuh kernels/mori_shmem_kernels.h common/shmem_layout.h include/mori.h
DEPS   := $(SRC) kernels/copy.cu kernels/copy_service.cu kernels/shmem.cu kernels/mori_gpu.h kernels/mori_copy.h kernels/mori_viz.h \
          common/viz_layout.h $(SHMEM_DEPS) \
          kernels/kernels.mk kernels/embed.sh kernels/probe-gpucc.sh
DEPS   += kernels/ep.cu kernels/ep_kernels.h kernels/ep_fp8.h include/mori_ep.h # MORI-EP (issue 13)
DEPS   += kernels/ep_internode.cu kernels/ep_internode.h # MORI-EP across nodes (issue 14)
DEPS   += kernels/coll.cu kernels/coll_xnode.cu kernels/coll_kernels.h # MORI-CCL (issue 15)
# Kernels of GPU tests and benchmarks, not part of libmori: one image each, embedded alike as
# mori_kernels_<name>_image (empty without nvcc: the test or bench then says so and skips).
#   shmemtest:  tests/shmem_dev_kernels.cu (tests/test_gpu_shmem_dev.c)
#   shmembench: tools/bench_shmem_kernels.cu (mori-bench shmem)
XNAMES := shmemtest shmembench
XSRC_shmemtest := tests/shmem_dev_kernels.cu
XSRC_shmembench := tools/bench_shmem_kernels.cu
XNAMES += collbench # mori-bench coll's GEMM (tools/bench_coll_kernels.cu, issue 15)
XSRC_collbench := tools/bench_coll_kernels.cu
XNAMES += colltest # tests/test_gpu_coll's fused kernel: MORI-CCL's device API (kernels/coll.cuh)
XSRC_colltest := tests/coll_dev_kernels.cu
XGEN   := $(foreach n,$(XNAMES),$(OUT)/$(n)_image.c)
ARCHS  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
          -gencode arch=compute_90,code=compute_90
NVFLAGS ?= -O3 -std=c++17
NVCC_OK   := $(if $(NVCC),$(shell sh kernels/probe-gpucc.sh nvcc "$(NVCC)" "$(OUT)"),not found)
HAVE_NVCC := $(if $(filter yes,$(NVCC_OK)),yes,)
HIP_OK    := $(if $(HIPCC),$(shell sh kernels/probe-gpucc.sh hipcc "$(HIPCC)" "$(OUT)" $(HIP_ARCHS)),none: hipcc not found)
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
	@$(NVCC) $(NVFLAGS) --fatbin $(ARCHS) -Ikernels -o $@ $(SRC)

$(OUT)/abi_check.ok: kernels/abi_check.c common/gpu.h $(OUT)/.nvcc
ifneq ($(CUDA_H),)
	@$(CC) -std=gnu11 -Wall -Werror -fsyntax-only -Icommon -I$(dir $(CUDA_H)) kernels/abi_check.c && touch $@
else
	@echo "  ABI     skipped: no cuda.h beside $(NVCC); common/gpu.h is not checked against it"
	@touch $@
endif

$(CUDA_PART): $(OUT)/copy.fatbin $(OUT)/abi_check.ok
	@sh kernels/embed.sh cuda $< "sm_80 sm_90 compute_90" > $@.tmp && mv $@.tmp $@

define xkernel
$(OUT)/$(1).fatbin: $(XSRC_$(1)) kernels/mori_gpu.h $(SHMEM_DEPS) kernels/kernels.mk $(OUT)/.nvcc
	@echo "  NVCC    $(XSRC_$(1)) -> sm_80 sm_90 compute_90"
	@$(NVCC) $(NVFLAGS) --fatbin $(ARCHS) -Ikernels -o $$@ $(XSRC_$(1))
$(OUT)/$(1)_image.c: $(OUT)/$(1).fatbin kernels/embed.sh
	@sh kernels/embed.sh $(1) $$< "sm_80 sm_90 compute_90" > $$@.tmp && mv $$@.tmp $$@
endef
$(foreach n,$(XNAMES),$(eval $(call xkernel,$(n))))
$(OUT)/collbench.fatbin $(OUT)/colltest.fatbin: kernels/coll.cuh kernels/coll_kernels.h
else
$(XGEN): kernels/embed.sh $(OUT)/.nvcc
	@sh kernels/embed.sh $(patsubst $(OUT)/%_image.c,%,$@) "" "" > $@.tmp && mv $@.tmp $@
$(CUDA_PART): $(DEPS) $(OUT)/.nvcc
	@echo "  KERNELS no CUDA kernels: nvcc $(NVCC_OK); libmori answers GPU transfers on NVIDIA with MORI_ENOKERNEL"
	@sh kernels/embed.sh cuda "" "" > $@.tmp && mv $@.tmp $@
endif

HIPFLAGS ?= -O3 -std=c++17
HIP_SKIP := $(filter-out $(HIP_GOOD),$(HIP_ARCHS))
ifneq ($(HIP_GOOD),)
$(OUT)/copy.hipfb: $(DEPS) kernels/probe-gpucc.sh $(OUT)/.hipcc
	@echo "  HIPCC   $(SRC) -> $(HIP_GOOD)$(if $(HIP_SKIP), (skipped: $(HIP_SKIP), which $(HIPCC) cannot target),)"
	@$(HIPCC) $(HIPFLAGS) --genco $(addprefix --offload-arch=,$(HIP_GOOD)) -Ikernels -o $@ $(SRC)

$(HIP_PART): $(OUT)/copy.hipfb
	@sh kernels/embed.sh hip $< "$(HIP_GOOD)" > $@.tmp && mv $@.tmp $@
else
$(HIP_PART): $(DEPS) kernels/probe-gpucc.sh $(OUT)/.hipcc
	@echo "  KERNELS no HIP kernels for $(HIP_ARCHS): $(strip $(patsubst none:%,%,$(HIP_OK))); AMD GPUs get MORI_ENOKERNEL"
	@sh kernels/embed.sh hip "" "" > $@.tmp && mv $@.tmp $@
endif

.PHONY: all FORCE

# MORI-IR: the device API as bitcode, its function table, the static device library.
include kernels/ir.mk
