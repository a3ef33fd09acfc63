# GPU kernels, built ahead of time and embedded in libmori as a generated C array.
# Invoked by the top Makefile as: make -f kernels/kernels.mk B=build NVCC=/path/to/nvcc
#   with nvcc:    a fatbin for sm_80 and sm_90 plus compute_90 PTX (newer GPUs JIT the PTX);
#                 kernels/abi_check.c also checks gpu.h's restated driver ABI against cuda.h.
#   without nvcc, or with one that cannot compile (kernels/probe-nvcc.sh):
#                 an empty image; libmori then answers GPU transfers with MORI_ENOKERNEL.
#   HIP:          code objects for gfx942/gfx950 are not built yet (no hipcc that targets them
#                 here); on AMD GPUs libmori answers GPU transfers with MORI_ENOKERNEL.
B      ?= build
NVCC   ?=
CC     ?= cc
OUT    := $(B)/kernels
GEN    := $(OUT)/mori_kernels.c
SRC    := kernels/copy.cu
DEPS   := $(SRC) kernels/mori_gpu.h kernels/mori_copy.h kernels/kernels.mk kernels/embed.sh \
          kernels/probe-nvcc.sh
ARCHS  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
          -gencode arch=compute_90,code=compute_90
NVFLAGS ?= -O3 -std=c++17
NVCC_OK   := $(if $(NVCC),$(shell sh kernels/probe-nvcc.sh "$(NVCC)" "$(OUT)"),not found)
HAVE_NVCC := $(if $(filter yes,$(NVCC_OK)),yes,)

all: $(GEN)

# Rebuild when the compiler choice changes (nvcc installed or removed).
$(OUT)/.nvcc: FORCE
	@mkdir -p $(OUT); echo '$(NVCC) $(HAVE_NVCC) $(NVFLAGS)' | cmp -s - $@ || echo '$(NVCC) $(HAVE_NVCC) $(NVFLAGS)' > $@

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

$(GEN): $(OUT)/copy.fatbin $(OUT)/abi_check.ok
	@sh kernels/embed.sh $< "sm_80 sm_90 compute_90" > $@.tmp && mv $@.tmp $@
else
$(GEN): $(DEPS) $(OUT)/.nvcc
	@echo "  KERNELS none: nvcc $(NVCC_OK); libmori is built without GPU kernels (GPU transfers give MORI_ENOKERNEL)"
	@sh kernels/embed.sh "" "" > $@.tmp && mv $@.tmp $@
endif

.PHONY: all FORCE
