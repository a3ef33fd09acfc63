# libmori_xla.so: MORI-EP and MORI-CCL as XLA FFI handlers (xla/mori_xla.c, C against XLA's C API
# xla/ffi/api/c_api.h), for python/mori/jax. Built only where those headers are:
#   make xla [XLA_FFI_INCLUDE=DIR]      DIR holds xla/ffi/api/c_api.h (default: jax.ffi.include_dir()
#                                       of $(PYTHON)); without them it says so and builds nothing
# Run by the main Makefile's `xla` target (after libmori.so), so the probe's jax import costs only
# there. Also builds $(B)/tests/xla_ffi_check (tests/xla_ffi_check.c), the handlers driven through
# fake call frames, for tests/test_xla.sh.
B      ?= build
CC     ?= cc
OPT    ?= -O2 -g
PYTHON ?= python3
SONAME ?= libmori.so.1
ifeq ($(origin XLA_FFI_INCLUDE),undefined)
XLA_FFI_INCLUDE := $(shell $(PYTHON) -c 'import jax.ffi; print(jax.ffi.include_dir())' 2>/dev/null)
endif
XLA_HDR := $(wildcard $(XLA_FFI_INCLUDE)/xla/ffi/api/c_api.h)
Q := $(if $(V),,@)
SAN := $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer)
# -isystem: XLA's header is not ours to keep warning-free; -z defs: every symbol resolved at link
XLA_CFLAGS := -std=gnu11 $(OPT) -Wall -Wextra -Werror -Wno-unused-parameter -fPIC -fvisibility=hidden -D_GNU_SOURCE \
              -Iinclude -isystem $(XLA_FFI_INCLUDE) $(SAN)

ifneq ($(XLA_HDR),)
xla: $(B)/libmori_xla.so $(B)/tests/xla_ffi_check
	@echo "  XLA     $(B)/libmori_xla.so against $(XLA_FFI_INCLUDE)"

$(B)/libmori_xla.so: xla/mori_xla.c $(XLA_HDR) $(B)/libmori.so include/mori.h include/mori_ep.h include/mori_coll.h
	@echo "  LD      $@"
	$(Q)$(CC) $(XLA_CFLAGS) -shared -Wl,-soname,libmori_xla.so -Wl,-z,defs -Wl,-rpath,'$$ORIGIN' -o $@ $< \
	  -L$(B) -l:$(SONAME) -lpthread -ldl

$(B)/tests/xla_ffi_check: tests/xla_ffi_check.c tests/harness.h $(B)/libmori_xla.so
	@mkdir -p $(dir $@); echo "  LD      $@"
	$(Q)$(CC) $(XLA_CFLAGS) -Itests -o $@ $< -L$(B) -l:libmori_xla.so -l:$(SONAME) \
	  -Wl,-rpath,'$$ORIGIN/..' $(shell pkg-config --libs check 2>/dev/null) -lpthread
else
xla:
	@echo "xla: no XLA FFI headers ($(if $(XLA_FFI_INCLUDE),none at $(XLA_FFI_INCLUDE)/xla/ffi/api/c_api.h,XLA_FFI_INCLUDE unset and $(PYTHON) has no jax)): libmori_xla.so not built"
endif
.PHONY: xla
