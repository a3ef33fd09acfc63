# MORI-IR: the shmem device API (kernels/shmem.cu's extern "C" wrappers of MORI_SHMEM_API) built
# ahead of time for other compilers to link. Included by mk/kernels.mk;
# everything lands in $(B)/kernels/ir/:
#   libmori_shmem_device.bc    NVIDIA LLVM bitcode (nvptx64-nvidia-cuda), by clang-16 without
#                              CUDA's headers (-nocudainc: clang 16 cannot parse CUDA 13's;
#                              include/mori/device/gpu.h supplies the little they gave). One generic
#                              file, as NVIDIA's libdevice is: the source never branches on
#                              the architecture, its sm_80 and sm_90 builds are the same IR but
#                              for the target attributes (tests/test_ir_bitcode.sh checks),
#                              and a linker (Triton's link_extern_libs) codegens it for the
#                              kernel's own target; so it is built for sm_80 (the oldest part
#                              mori supports: acquire/release PTX needs sm_70) and its
#                              target-cpu/target-features attributes and clang's
#                              nvvm-reflect-ftz module flag are removed (mk/ir-generic.sh:
#                              Triton sets that flag otherwise and refused to link). clang-16
#                              because bitcode is read by the same or newer LLVM only: Triton
#                              3.x's LLVM reads it, an older one would not read a newer clang's.
#   libmori_shmem_device.json  the function table (mk/ir-table.sh, from MORI_SHMEM_API)
#   mori_shmem_device.h        extern "C" __device__ declarations of the same functions
#   libmori_shmem_device.a     the static device library for nvcc -rdc users (sm_80, sm_90,
#                              compute_90 PTX), from the same source; needs nvcc
#   libmori_shmem_device_<gfx>.bc  AMD bitcode (amdgcn-amd-amdhsa) per arch built (HIP_BUILT: gfx90a
#                              by hipcc, gfx942 by clang-19), as ROCm/mori ships its
#                              libmori_shmem_device.bc; the device libraries' functions it uses
#                              linked in (clang's -mlink-builtin-bitcode: internal), as hipcc does
# Without clang-16 the bitcode is skipped, saying so (tools/install-deps installs clang-16 and
# llvm-16); the table and header need only $(CC).
IR        := $(OUT)/ir
IR_CLANG  ?= $(shell command -v clang-16 2>/dev/null)
IR_LLVMAS ?= $(shell command -v llvm-as-16 2>/dev/null)
IR_SRC    := kernels/shmem.cu
IR_DEPS   := $(IR_SRC) $(SHMEM_DEPS) mk/ir.mk mk/ir-table.sh mk/ir-generic.sh # with MORI-CCL's device API
IR_FLAGS  := -x cuda --cuda-device-only -nocudainc -nocudalib -Wno-unknown-cuda-version -O2 -std=c++17 \
             -DMORI_SHMEM_NO_KERNELS -Ikernels -Iinclude
IR_OUT    := $(IR)/libmori_shmem_device.json $(IR)/mori_shmem_device.h

$(IR)/libmori_shmem_device.json: $(IR_DEPS)
	@mkdir -p $(IR)
	@echo "  IR      MORI_SHMEM_API -> $(notdir $@) mori_shmem_device.h"
	@sh mk/ir-table.sh "$(CC)" $@ $(IR)/mori_shmem_device.h
$(IR)/mori_shmem_device.h: $(IR)/libmori_shmem_device.json ; @:

ifneq ($(and $(IR_CLANG),$(IR_LLVMAS)),)
IR_OUT += $(IR)/libmori_shmem_device.bc
$(IR)/libmori_shmem_device.bc: $(IR_DEPS)
	@mkdir -p $(IR)
	@echo "  CLANG   $(IR_SRC) -> $(notdir $@) (nvptx64, generic: built for sm_80)"
	@$(IR_CLANG) $(IR_FLAGS) --cuda-gpu-arch=sm_80 -S -emit-llvm -o $@.ll $(IR_SRC)
	@sh mk/ir-generic.sh $@.ll $@.generic.ll
	@$(IR_LLVMAS) $@.generic.ll -o $@.tmp && mv $@.tmp $@ && rm -f $@.ll $@.generic.ll
else
IR_OUT += $(IR)/.no-bitcode
$(IR)/.no-bitcode: mk/ir.mk
	@mkdir -p $(IR)
	@echo "  IR      no NVIDIA bitcode: clang-16/llvm-as-16 not found (tools/install-deps installs clang-16 llvm-16)"
	@touch $@
endif

ifeq ($(HAVE_NVCC),yes)
IR_OUT += $(IR)/libmori_shmem_device.a
$(IR)/libmori_shmem_device.a: $(IR_DEPS) $(OUT)/.nvcc
	@mkdir -p $(IR)
	@echo "  NVCC    $(IR_SRC) -> $(notdir $@) (-rdc, sm_80 sm_90 compute_90)"
	@$(NVCC) $(NVFLAGS) -rdc=true -lib $(ARCHS) -DMORI_SHMEM_NO_KERNELS -Ikernels -Iinclude -o $@.tmp.a $(IR_SRC) && \
		mv $@.tmp.a $@
endif

# AMD: one bitcode file per arch (amdgcn bitcode is specific to its gfx target), by the compiler
# that builds that arch's kernels.
IR_OUT += $(foreach a,$(HIP_BUILT),$(IR)/libmori_shmem_device_$(a).bc)
IR_HIP_FLAGS := -x hip --cuda-device-only -fgpu-rdc -emit-llvm -c -DMORI_SHMEM_NO_KERNELS -Ikernels -Iinclude
$(foreach a,$(HIP_GOOD),$(IR)/libmori_shmem_device_$(a).bc): $(IR)/libmori_shmem_device_%.bc: $(IR_DEPS) $(OUT)/.hipcc
	@mkdir -p $(IR)
	@echo "  HIPCC   $(IR_SRC) -> $(notdir $@)"
	@$(HIPCC) $(HIPFLAGS) $(IR_HIP_FLAGS) --offload-arch=$* -o $@.tmp $(IR_SRC) && mv $@.tmp $@
$(foreach a,$(HIPC_GOOD),$(IR)/libmori_shmem_device_$(a).bc): $(IR)/libmori_shmem_device_%.bc: $(IR_DEPS) $(OUT)/.hipclang $(HIP_DEVLIBS)/.ok
	@mkdir -p $(IR)
	@echo "  CLANG   $(IR_SRC) -> $(notdir $@) ($(notdir $(HIP_CLANG)))"
	@$(HIP_CLANG) $(HIP_CLANG_FLAGS) $(IR_HIP_FLAGS) --offload-arch=$* -o $@.tmp $(IR_SRC) && \
		mv $@.tmp $@

ir: $(IR_OUT)
all: ir
.PHONY: ir
