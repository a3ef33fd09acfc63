# GPU kernels, built ahead of time and embedded in libmori as a generated C array.
# Invoked by the top Makefile as: make -f mk/kernels.mk B=build NVCC=/path/to/nvcc HIPCC=/path/to/hipcc
#   with nvcc:    a fatbin for sm_80 and sm_90 plus compute_90 PTX (newer GPUs JIT the PTX);
#                 kernels/abi_check.c also checks gpu.h's restated driver ABI against cuda.h.
#   without nvcc, or with one that cannot compile (mk/probe-gpucc.sh):
#                 an empty image; libmori then answers GPU transfers with MORI_ENOKERNEL.
#   AMD:          a code object for each arch of HIP_ARCHS from the first compiler that targets
#                 it (mk/probe-gpucc.sh), from the same source through include/mori/device/gpu.h:
#                   hipcc      ROCm's; Debian 12's (ROCm 5.2, clang 15) targets gfx90a only;
#                   HIP_CLANG  a newer clang (Debian 12's clang-19: gfx942, not gfx950) with the
#                              HIP headers of hipcc's installation (HIP_ROOT) and ROCm's device
#                              libraries (mk/hip-devlibs.sh adds the one-constant ISA-version
#                              library where they lack the arch: Debian's lack gfx942);
#                 bundled as clang's offload bundle (mk/hip-bundle.sh), which hipModuleLoadData
#                 reads. Archs no compiler here targets are skipped, saying so; with none, AMD
#                 GPUs get MORI_ENOKERNEL.
B      ?= build
NVCC   ?=
HIPCC  ?=
HIP_ARCHS ?= gfx90a gfx942 gfx950
HIP_CLANG ?= $(firstword $(foreach v,21 20 19,$(shell command -v clang-$(v) 2>/dev/null)))
# The HIP headers' installation: hipcc's (/usr for Debian's, /opt/rocm for ROCm's).
HIP_ROOT  ?= $(if $(HIPCC),$(abspath $(dir $(realpath $(HIPCC)))..),$(if $(wildcard /usr/include/hip/hip_runtime.h),/usr))
HIP_DEVLIB_SRC ?= $(patsubst %/ocml.bc,%,$(firstword $(wildcard $(HIP_ROOT)/amdgcn/bitcode/ocml.bc \
                  $(HIP_ROOT)/lib/*/amdgcn/bitcode/ocml.bc $(HIP_ROOT)/lib/llvm/lib/clang/*/lib/amdgcn/bitcode/ocml.bc)))
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
XNAMES += ccotest # tests/test_gpu_cco's kernels: MORI-CCO's device API (mori/device/cco.cuh)
XSRC_ccotest := tests/cco_dev_kernels.cu
XGEN   := $(foreach n,$(XNAMES),$(OUT)/$(n)_image.c)
ARCHS  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
          -gencode arch=compute_90,code=compute_90
NVFLAGS ?= -O3 -std=c++17
NVCC_OK   := $(if $(NVCC),$(shell sh mk/probe-gpucc.sh nvcc "$(NVCC)" "$(OUT)"),not found)
HAVE_NVCC := $(if $(filter yes,$(NVCC_OK)),yes,)
HIP_OK    := $(if $(HIPCC),$(shell sh mk/probe-gpucc.sh hipcc "$(HIPCC)" "$(OUT)" $(HIP_ARCHS)),none: hipcc not found)
HIP_GOOD  := $(if $(filter none:,$(firstword $(HIP_OK))),,$(HIP_OK))
HIP_REST  := $(filter-out $(HIP_GOOD),$(HIP_ARCHS))
HIPC_OK   := $(if $(HIP_REST),$(if $(and $(HIP_CLANG),$(HIP_ROOT),$(HIP_DEVLIB_SRC)),$(shell sh mk/probe-gpucc.sh \
               hipclang "$(HIP_CLANG)" "$(OUT)" "$(HIP_ROOT)" $(HIP_REST)),none: $(if $(HIP_CLANG),$(if \
               $(HIP_ROOT),no ROCm device libraries under $(HIP_ROOT),no HIP headers),no clang-19 or newer)),)
HIPC_GOOD := $(if $(filter none:,$(firstword $(HIPC_OK))),,$(HIPC_OK))
HIP_BUILT := $(filter $(HIP_GOOD) $(HIPC_GOOD),$(HIP_ARCHS))

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
$(OUT)/ccotest.fatbin: tests/cco_dev.h
else
$(XGEN): mk/embed.sh $(OUT)/.nvcc
	@sh mk/embed.sh $(patsubst $(OUT)/%_image.c,%,$@) "" "" > $@.tmp && mv $@.tmp $@
$(CUDA_PART): $(DEPS) $(OUT)/.nvcc
	@echo "  KERNELS no CUDA kernels: nvcc $(NVCC_OK); libmori answers GPU transfers on NVIDIA with MORI_ENOKERNEL"
	@sh mk/embed.sh cuda "" "" > $@.tmp && mv $@.tmp $@
endif

HIPFLAGS ?= -O3 -std=c++17 -Wno-pass-failed
HIP_SKIP := $(filter-out $(HIP_BUILT),$(HIP_ARCHS))
HIP_DEVLIBS := $(OUT)/hip/devlibs
HIP_CLANG_FLAGS = -x hip --rocm-path=$(HIP_ROOT) --rocm-device-lib-path=$(HIP_DEVLIBS) $(HIPFLAGS)
$(OUT)/.hipclang: FORCE
	@mkdir -p $(OUT); echo '$(HIP_CLANG) $(HIP_ROOT) $(HIPC_GOOD) $(HIPFLAGS)' | cmp -s - $@ || \
		echo '$(HIP_CLANG) $(HIP_ROOT) $(HIPC_GOOD) $(HIPFLAGS)' > $@
ifneq ($(HIP_BUILT),)
$(HIP_DEVLIBS)/.ok: mk/hip-devlibs.sh $(OUT)/.hipclang
	@made=$$(sh mk/hip-devlibs.sh "$(HIP_CLANG)" "$(HIP_DEVLIB_SRC)" $(HIP_DEVLIBS) $(HIPC_GOOD)) && \
		{ [ -z "$$made" ] || echo "  HIPLIB  $(HIP_DEVLIB_SRC) has no $$made: made in $(HIP_DEVLIBS)"; } && touch $@

$(addprefix $(OUT)/hip/copy_,$(addsuffix .co,$(HIP_GOOD))): $(OUT)/hip/copy_%.co: $(DEPS) $(OUT)/.hipcc
	@mkdir -p $(dir $@); echo "  HIPCC   $(SRC) -> $*"
	@$(HIPCC) $(HIPFLAGS) --genco --no-gpu-bundle-output --offload-arch=$* -Ikernels -Iinclude -o $@ $(SRC)
$(addprefix $(OUT)/hip/copy_,$(addsuffix .co,$(HIPC_GOOD))): $(OUT)/hip/copy_%.co: $(DEPS) $(OUT)/.hipclang $(HIP_DEVLIBS)/.ok
	@mkdir -p $(dir $@); echo "  CLANG   $(SRC) -> $* ($(notdir $(HIP_CLANG)), HIP headers of $(HIP_ROOT))"
	@$(HIP_CLANG) $(HIP_CLANG_FLAGS) --cuda-device-only --no-gpu-bundle-output --offload-arch=$* -Ikernels -Iinclude \
		-o $@ $(SRC)

# The code objects built, each checked (an AMD GPU ELF for its arch, with kernels) and listed.
$(OUT)/copy.hipfb: $(foreach a,$(HIP_BUILT),$(OUT)/hip/copy_$(a).co) mk/hip-bundle.sh
	@echo "  HIPFB   $(notdir $@): $(HIP_BUILT)$(if $(HIP_SKIP), (skipped: $(HIP_SKIP): $(if $(HIPCC),$(HIPCC),no hipcc) \
		and $(if $(HIP_CLANG),$(HIP_CLANG),no clang-19) cannot target $(if $(filter 1,$(words $(HIP_SKIP))),it,them)),)"
	@sh mk/hip-bundle.sh $@ $(foreach a,$(HIP_BUILT),$(a)=$(OUT)/hip/copy_$(a).co@$(notdir \
		$(if $(filter $(a),$(HIP_GOOD)),$(HIPCC),$(HIP_CLANG)))) | sed 's/^/          /'

$(HIP_PART): $(OUT)/copy.hipfb
	@sh mk/embed.sh hip $< "$(HIP_BUILT)" > $@.tmp && mv $@.tmp $@
else
$(HIP_PART): $(DEPS) mk/probe-gpucc.sh $(OUT)/.hipcc $(OUT)/.hipclang
	@echo "  KERNELS no HIP kernels for $(HIP_ARCHS): $(strip $(patsubst none:%,%,$(HIP_OK)))$(if $(HIPC_OK),; \
		$(strip $(patsubst none:%,%,$(HIPC_OK)))); AMD GPUs get MORI_ENOKERNEL"
	@sh mk/embed.sh hip "" "" > $@.tmp && mv $@.tmp $@
endif

.PHONY: all FORCE

# Every .cu of kernels/ compiled alone (nvcc: PTX for compute_80, the front end and NVVM, not
# ptxas; AMD: a syntax check for each arch built, by its compiler), so none of them leans on what
# the aggregate unit included before it. tests/test_kernels_alone.sh runs it (make check);
# without a compiler it says so and skips that side.
KALONE := $(filter-out $(SRC),$(KSRC))
ALONE := $(patsubst kernels/%.cu,$(OUT)/alone/%.ok,$(KALONE))
ifeq ($(HAVE_NVCC),yes)
$(OUT)/alone/%.ok: kernels/%.cu $(DEPS) $(OUT)/.nvcc
	@mkdir -p $(dir $@); echo "  NVCC    $< alone"
	@$(NVCC) $(NVFLAGS) --ptx -arch=compute_80 -Ikernels -Iinclude -o $(@:.ok=.ptx) $< && touch $@
check-alone: $(ALONE)
else
check-alone: check-alone-nv-skip
check-alone-nv-skip:
	@echo "skipped (CUDA): no nvcc ($(NVCC_OK)): the kernels' sources were not compiled one by one for NVIDIA"
endif
define hip_alone
$(OUT)/alone/%.$(1).ok: kernels/%.cu $(DEPS) $(OUT)/.hipcc $(OUT)/.hipclang
	@mkdir -p $$(dir $$@); echo "  HIP     $$< alone ($(1))"
	@$(if $(filter $(1),$(HIP_GOOD)),$(HIPCC) $(HIPFLAGS) --genco,$(HIP_CLANG) $(HIP_CLANG_FLAGS) -nogpulib \
		--cuda-device-only) --offload-arch=$(1) -fsyntax-only -Ikernels -Iinclude $$< && touch $$@
check-alone: $(patsubst kernels/%.cu,$(OUT)/alone/%.$(1).ok,$(KALONE))
endef
$(foreach a,$(HIP_BUILT),$(eval $(call hip_alone,$(a))))
ifeq ($(HIP_BUILT),)
check-alone: check-alone-hip-skip
check-alone-hip-skip:
	@echo "skipped (AMD): no compiler here targets $(HIP_ARCHS): the kernels' sources were not compiled one by one for AMD"
endif
.PHONY: check-alone check-alone-nv-skip check-alone-hip-skip

# MORI-IR: the device API as bitcode, its function table, the static device library.
include mk/ir.mk
