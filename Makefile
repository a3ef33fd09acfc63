# mori: plain Makefile (redis-style): quiet rules, -MMD dependencies, rebuild when flags change.
#   make             build morid, moractl, libmori (.so/.a/.pc), tools and tests
#   make check       install missing packages, build, run every test (non-zero on failure)
#   make check-asan  the same under AddressSanitizer + UBSan (also: make check SANITIZE=address,undefined)
#   make demo        the main job: KV-cache trace replay between prefill and decode clients
#   make install PREFIX=/usr/local DESTDIR=
VERSION    := 1.0.0
PREFIX     ?= /usr/local
DESTDIR    ?=
SANITIZE   ?=
B          ?= build
CC         ?= cc
NVCC       ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
HIPCC      ?= $(shell command -v hipcc 2>/dev/null || ls /opt/rocm/bin/hipcc 2>/dev/null)

PKGS       := libuv libprotobuf-c libsystemd inih libcjson libsodium
PKG_CFLAGS  = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS    = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lnng -lpthread -ldl
CHECK_LIBS  = $(shell pkg-config --libs check 2>/dev/null)
# What morid alone calls (the KV store's SSD tier: ISA-L's CRC32C and io_uring; its cluster index:
# hiredis).
DAEMON_PKGS := libisal liburing hiredis
DAEMON_LIBS  = $(shell pkg-config --libs $(DAEMON_PKGS) 2>/dev/null || echo -lisal -luring -lhiredis)
# What libmori itself calls (no nng, no libsystemd: only common/svc/ uses those); mori.pc's
# Requires.private and Libs.private say the same for static linking.
LIB_PKGS    := libprotobuf-c
LIB_SYSLIBS := -lpthread -ldl
LIB_LIBS     = $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null) $(LIB_SYSLIBS)
# The SONAME carries the major version, which moves exactly when the ABI breaks (README, "ABI").
SONAME      := libmori.so.$(firstword $(subst ., ,$(VERSION)))

OPT        ?= -O2 -g
# -fvisibility=hidden: libmori.so exports only what include/mori.h marks MORI_API.
CFLAGS_ALL := -std=gnu11 $(OPT) -Wall -Wextra -Werror -Wno-unused-parameter -fPIC -fvisibility=hidden \
              -D_GNU_SOURCE -DMORI_VERSION=\"$(VERSION)\" -Iinclude -Icommon -I$(B)/proto $(PKG_CFLAGS) $(CFLAGS)
ifneq ($(SANITIZE),)
  CFLAGS_ALL += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
  LDFLAGS    += -fsanitize=$(SANITIZE)
endif
Q := $(if $(V),,@)

PROTO_C   := $(B)/proto/mori.pb-c.c
COMMON    := $(wildcard common/*.c) $(PROTO_C)
COMMON_SVC := $(wildcard common/svc/*.c)
# daemon/ by subsystem, one folder each (transport/ one deeper); its files include each other
# by the path under daemon/.
DAEMON    := $(filter-out daemon/main.c,$(wildcard daemon/*.c daemon/*/*.c daemon/*/*/*.c))
LIBCLIENT := $(filter-out libclient/bench.c,$(wildcard libclient/*.c))
TOOLS     := moractl mori-bench mori-kvreplay mori-gpubench mori-viz
TESTS_SRC := $(wildcard tests/test_*.c)
TESTS     := $(patsubst tests/%.c,$(B)/tests/%,$(TESTS_SRC))
TEST_TOOLS := $(B)/tests/notify_listener $(B)/tests/umbp_node

obj = $(patsubst %.c,$(B)/obj/%.o,$(patsubst $(B)/%,%,$(1)))
COMMON_O   := $(call obj,$(COMMON))
COMMON_SVC_O := $(call obj,$(COMMON_SVC))
BENCH_O    := $(call obj,libclient/bench.c)
DAEMON_O   := $(call obj,$(DAEMON))
LIB_O      := $(call obj,$(LIBCLIENT)) $(B)/obj/kernels/mori_kernels.o
# MORI-EP's tuning table (data/ep_tuning/*.json) as generated C: libmori links no JSON parser.
EP_TUNING := $(sort $(wildcard data/ep_tuning/*.json))
LIB_O      += $(B)/obj/gen/ep_tuning.o

all: $(B)/morid $(addprefix $(B)/,$(TOOLS)) $(B)/libmori.so $(B)/libmori.a $(B)/mori.pc $(TESTS) $(TEST_TOOLS) kernels

# Rebuild everything when the flags change.
$(B)/.flags: FORCE
	@mkdir -p $(B); echo '$(CFLAGS_ALL) $(LDFLAGS) $(PKG_LIBS) $(DAEMON_LIBS)' | cmp -s - $@ || echo '$(CFLAGS_ALL) $(LDFLAGS) $(PKG_LIBS) $(DAEMON_LIBS)' > $@

# one run of protoc-c makes both files (a grouped target: make 4.3)
$(B)/proto/mori.pb-c.c $(B)/proto/mori.pb-c.h &: proto/mori.proto
	@mkdir -p $(B)/proto; echo "  PROTOC  $<"
	$(Q)protoc-c --proto_path=proto --c_out=$(B)/proto $<

$(B)/obj/proto/%.o: $(B)/proto/%.c $(B)/.flags
	@mkdir -p $(dir $@); echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) -Wno-error -MMD -c $< -o $@

$(B)/obj/daemon/%.o $(B)/obj/tests/%.o: CFLAGS_ALL += -Idaemon

$(B)/obj/%.o: %.c $(B)/.flags $(B)/proto/mori.pb-c.h
	@mkdir -p $(dir $@); echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(B)/libmorid.a: $(DAEMON_O) $(COMMON_O) $(COMMON_SVC_O)
	$(Q)rm -f $@; ar rcs $@ $^

$(B)/morid: $(call obj,daemon/main.c) $(B)/libmorid.a
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) $(DAEMON_LIBS) -libverbs

# -z defs: a symbol the library uses from a library it does not link fails here, not in a user.
$(B)/libmori.so: $(LIB_O) $(COMMON_O) libclient/libmori.map
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=libclient/libmori.map -Wl,-z,defs \
	  -o $@ $(LIB_O) $(COMMON_O) $(LIB_LIBS)
	$(Q)ln -sf libmori.so $(B)/$(SONAME) # programs linked against the build tree find it by its SONAME

# bench.o (libclient/bench.h, for mori-gpubench) only in the static library.
$(B)/libmori.a: $(LIB_O) $(COMMON_O) $(BENCH_O)
	$(Q)rm -f $@; ar rcs $@ $^

# common/svc/: what morid and the tools share beyond libmori (nng control client, journal).
$(B)/libmori-svc.a: $(COMMON_SVC_O)
	$(Q)rm -f $@; ar rcs $@ $^

PC_SED = -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@REQUIRES_PRIVATE@|$(LIB_PKGS)|' \
	 -e 's|@LIBS_PRIVATE@|$(LIB_SYSLIBS)|'
$(B)/mori.pc: libclient/mori.pc.in
	$(Q)sed $(PC_SED) $< > $@

$(B)/%: $(B)/obj/tools/%.o $(B)/libmori-svc.a $(B)/libmori.a
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(B)/libmori-svc.a $(B)/libmori.a $(PKG_LIBS) -lm

$(B)/tests/%: $(B)/obj/tests/%.o $(B)/libmori.a $(B)/libmorid.a
	@mkdir -p $(dir $@); echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(B)/libmorid.a $(B)/libmori.a $(PKG_LIBS) $(DAEMON_LIBS) $(CHECK_LIBS) -libverbs -lm

# tests/test_gpu_hip_stub drives the HIP runtime table against a stub libamdhip64.so built here
# (tests/hip_stub.c); where HIP's headers are, the stub's entry points are first checked against
# their declarations (a signature that differs is an error).
HIP_API_H := $(firstword $(wildcard /opt/rocm/include/hip/hip_runtime_api.h /usr/include/hip/hip_runtime_api.h))
$(B)/tests/hipstub/libamdhip64.so: tests/hip_stub.c
	@mkdir -p $(dir $@); echo "  CC      $@ (stub HIP runtime)"
	$(if $(HIP_API_H),$(Q)$(CC) -std=gnu11 -Wall -Werror -Wno-enum-conversion -Wno-enum-compare -fsyntax-only \
		-DHIP_STUB_WITH_HEADERS -D__HIP_PLATFORM_AMD__ -I$(patsubst %/hip/hip_runtime_api.h,%,$(HIP_API_H)) $<)
	$(Q)$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -fPIC -shared -o $@ $<
$(B)/tests/test_gpu_hip_stub: $(B)/tests/hipstub/libamdhip64.so

# mori-kvreplay is several files (tools/kvreplay/) and uses libmori's API alone; its unit test
# links them all but main.o.
KVREPLAY_O := $(call obj,$(filter-out tools/kvreplay/main.c,$(wildcard tools/kvreplay/*.c)))
$(B)/mori-kvreplay: $(B)/obj/tools/kvreplay/main.o $(KVREPLAY_O) $(B)/libmori.a
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(B)/libmori.a $(PKG_LIBS) -lm

$(B)/tests/test_kv_logic: $(B)/obj/tests/test_kv_logic.o $(KVREPLAY_O) $(B)/libmori.a
	@mkdir -p $(dir $@); echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(B)/libmori.a $(PKG_LIBS) $(CHECK_LIBS) -lm

# moractl's observation commands (topo, diagnose, metrics) are in tools/moractl_obs.c, kv in moractl_kv.c.
$(B)/moractl: $(B)/obj/tools/moractl.o $(B)/obj/tools/moractl_obs.o $(B)/obj/tools/moractl_kv.o $(B)/libmori-svc.a $(B)/libmori.a
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(B)/libmori-svc.a $(B)/libmori.a $(PKG_LIBS) -lm

# mori-viz (tools/viz/): MORI-VIZ trace buffers to Perfetto JSON; its unit test links viz.o.
VIZ_O := $(call obj,tools/viz/viz.c)
$(B)/mori-viz: $(B)/obj/tools/viz/main.o $(VIZ_O)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^
$(B)/tests/test_viz: $(B)/obj/tests/test_viz.o $(VIZ_O)
	@mkdir -p $(dir $@); echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) $(CHECK_LIBS) -lm

# GPU kernels (mk/kernels.mk): a fatbin where nvcc exists, embedded in libmori as a
# generated C array; without nvcc an empty image, said once. kernels.mk decides what is stale.
kernels: $(B)/kernels/mori_kernels.c
$(B)/kernels/mori_kernels.c: FORCE
	@$(MAKE) -s --no-print-directory -f mk/kernels.mk B=$(B) NVCC=$(NVCC) HIPCC=$(HIPCC) CC=$(CC)
# Kernel images of GPU tests and benchmarks (mk/kernels.mk makes them with libmori's).
$(B)/kernels/shmemtest_image.c $(B)/kernels/shmembench_image.c: $(B)/kernels/mori_kernels.c ; @:
$(B)/tests/test_gpu_shmem_dev $(B)/tests/test_gpu_shmem $(B)/tests/test_gpu_shmem_proxy: $(B)/tests/%: $(B)/obj/tests/%.o \
		$(B)/obj/kernels/shmemtest_image.o $(B)/libmori.a $(B)/libmorid.a
	@mkdir -p $(dir $@); echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(B)/libmorid.a $(B)/libmori.a $(PKG_LIBS) $(DAEMON_LIBS) $(CHECK_LIBS) -libverbs -lm
# mori-bench kv --sim (tools/bench_kv_sim.c) runs the KV store's eviction policies (daemon/kv/kv_policy.c,
# pure C without daemon dependencies) offline on a trace.
$(B)/obj/tools/bench_kv_sim.o: CFLAGS_ALL += -Idaemon
$(B)/mori-bench: $(B)/obj/tools/bench_kv_sim.o $(B)/obj/daemon/kv/kv_policy.o
# mori-bench ep (tools/bench_ep.c: MORI-EP) links into it as well, and flood (tools/bench_flood.c).
$(B)/mori-bench: $(B)/obj/tools/bench_ep.o $(B)/obj/tools/bench_flood.o
# tests/test_gpu_coll and its fused kernel (tests/coll_dev_kernels.cu: MORI-CCL's device API).
$(B)/kernels/colltest_image.c: $(B)/kernels/mori_kernels.c ; @:
$(B)/tests/test_gpu_coll: $(B)/obj/tests/test_gpu_coll.o $(B)/obj/kernels/colltest_image.o $(B)/libmori.a $(B)/libmorid.a
	@mkdir -p $(dir $@); echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(B)/libmorid.a $(B)/libmori.a $(PKG_LIBS) $(DAEMON_LIBS) $(CHECK_LIBS) -libverbs -lm
# tests/test_gpu_cco and its kernels (tests/cco_dev_kernels.cu: MORI-CCO's device API), with
# mori-bench coll's GEMM for its overlap case.
$(B)/kernels/ccotest_image.c: $(B)/kernels/mori_kernels.c ; @:
$(B)/tests/test_gpu_cco: $(B)/obj/tests/test_gpu_cco.o $(B)/obj/kernels/ccotest_image.o \
		$(B)/obj/kernels/collbench_image.o $(B)/libmori.a $(B)/libmorid.a
	@mkdir -p $(dir $@); echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(B)/libmorid.a $(B)/libmori.a $(PKG_LIBS) $(DAEMON_LIBS) $(CHECK_LIBS) -libverbs -lm
# mori-bench coll (tools/bench_coll.c: MORI-CCL) and its GEMM kernel.
$(B)/kernels/collbench_image.c: $(B)/kernels/mori_kernels.c ; @:
$(B)/mori-bench: $(B)/obj/tools/bench_coll.o $(B)/obj/kernels/collbench_image.o
# mori-bench shmem (tools/bench_shmem.c) and its kernels; --proxy: tools/bench_shmem_proxy.c (no GPU).
# mori-bench kv (tools/bench_kv.c, tools/bench_kv_trace.c: UMBP, the KV-cache store).
$(B)/mori-bench: $(B)/obj/tools/bench_kv.o $(B)/obj/tools/bench_kv_trace.o
$(B)/mori-bench: $(B)/obj/tools/mori-bench.o $(B)/obj/tools/bench_shmem.o $(B)/obj/tools/bench_shmem_proxy.o \
		$(B)/obj/kernels/shmembench_image.o \
		$(B)/libmori-svc.a $(B)/libmori.a
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(B)/libmori-svc.a $(B)/libmori.a $(PKG_LIBS) -lm
$(B)/gen/ep_tuning.c: tools/gen-ep-tuning $(EP_TUNING)
	@mkdir -p $(dir $@); echo "  GEN     $@"
	$(Q)python3 tools/gen-ep-tuning $(EP_TUNING) > $@.tmp && mv $@.tmp $@
$(B)/obj/gen/%.o: $(B)/gen/%.c $(B)/.flags
	@mkdir -p $(dir $@); echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) -Ilibclient -c $< -o $@
$(B)/obj/kernels/%.o: $(B)/kernels/%.c $(B)/.flags
	@mkdir -p $(dir $@); echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@

deps:
	@tools/install-deps

# libmori_xla.so (mori.jax's XLA FFI handlers) where jaxlib's FFI headers are: mk/xla.mk
# (XLA_FFI_INCLUDE=DIR, else jax.ffi.include_dir() of $(PYTHON)); says so and skips without them.
xla: $(B)/libmori.so
	@$(MAKE) -s --no-print-directory -f mk/xla.mk B=$(B) CC=$(CC) SONAME=$(SONAME) OPT="$(OPT)" SANITIZE=$(SANITIZE) \
	  $(if $(filter command line environment,$(origin XLA_FFI_INCLUDE)),XLA_FFI_INCLUDE=$(XLA_FFI_INCLUDE))

check: deps
	@$(MAKE) --no-print-directory all
	@B=$(B) tests/run-all

# -O2 as in the normal build: gcc's -Wformat-truncation and similar warnings depend on the
# optimisation level, and -Werror would fail the sanitizer build on code the normal build accepts.
check-asan:
	@$(MAKE) --no-print-directory check SANITIZE=address,undefined B=build-asan OPT="-O2 -g"

check-gpu: all
	@B=$(B) tests/run-gpu

demo: deps
	@$(MAKE) --no-print-directory all
	@B=$(B) tools/demo

# Only what gets installed: a test that does not build must not block an install.
install: $(B)/morid $(addprefix $(B)/,$(TOOLS)) $(B)/libmori.so $(B)/libmori.a
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)/etc/mori $(DESTDIR)$(PREFIX)/lib/systemd/system
	install -m 755 $(B)/morid $(addprefix $(B)/,$(TOOLS)) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 include/mori.h include/mori_types.h include/mori_shmem.h include/mori_ep.h include/mori_coll.h include/mori_cco.h include/mori_umbp.h \
	  $(DESTDIR)$(PREFIX)/include/
	@# the device API (kernels include it) and the types host and device share, as NVSHMEM splits them
	install -d $(DESTDIR)$(PREFIX)/include/mori/device $(DESTDIR)$(PREFIX)/include/mori/device_host
	install -m 644 include/mori/device/*.h include/mori/device/*.cuh $(DESTDIR)$(PREFIX)/include/mori/device/
	install -m 644 include/mori/device_host/*.h $(DESTDIR)$(PREFIX)/include/mori/device_host/
	install -m 755 $(B)/libmori.so $(DESTDIR)$(PREFIX)/lib/libmori.so.$(VERSION)
	ln -sf libmori.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libmori.so
	install -m 644 $(B)/libmori.a $(DESTDIR)$(PREFIX)/lib/
	@# mori.jax's XLA handlers, where `make xla` built them (mori.jax finds them beside libmori)
	[ ! -f $(B)/libmori_xla.so ] || install -m 755 $(B)/libmori_xla.so $(DESTDIR)$(PREFIX)/lib/
	sed $(PC_SED) libclient/mori.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/mori.pc
	@# an existing morid.conf is the admin's (cluster key, listen, ...): a reinstall never
	@# overwrites it; the shipped one goes beside it as morid.conf.new when they differ
	@if [ ! -e $(DESTDIR)/etc/mori/morid.conf ]; then install -m 644 conf/morid.conf $(DESTDIR)/etc/mori/; \
	elif cmp -s conf/morid.conf $(DESTDIR)/etc/mori/morid.conf; then :; \
	else install -m 644 conf/morid.conf $(DESTDIR)/etc/mori/morid.conf.new && \
	  echo "install: $(DESTDIR)/etc/mori/morid.conf exists and is kept; the shipped one is morid.conf.new"; fi
	sed 's|@PREFIX@|$(PREFIX)|g' systemd/morid.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/morid.service
	@# MORI-IR (mk/ir.mk), what of it was built: bitcode, table, device header (apart from
	@# include/: it shares four names with mori_shmem.h), static device library
	install -d $(DESTDIR)$(PREFIX)/lib/mori/ir
	for f in libmori_shmem_device.bc libmori_shmem_device.json mori_shmem_device.h libmori_shmem_device.a \
	  $(notdir $(wildcard $(B)/kernels/ir/libmori_shmem_device_gfx*.bc)); do \
	  [ ! -f $(B)/kernels/ir/$$f ] || install -m 644 $(B)/kernels/ir/$$f $(DESTDIR)$(PREFIX)/lib/mori/ir/ || exit 1; done

# The Python package (python/mori, pure Python) into $(PYTHON)'s module path under PREFIX, with
# the directory libmori went to recorded in mori/_installed.py; without $(PYTHON), said and skipped.
PYTHON    ?= python3
PYTHONDIR ?= $(shell tools/python-sitedir $(PREFIX) $(PYTHON) 2>/dev/null)
install: install-python
install-python:
	@if [ -z "$(PYTHONDIR)" ]; then echo "install-python: no $(PYTHON): the mori Python package is not installed"; \
	else cd python && for f in $$(find mori -name '*.py' ! -name _installed.py); do \
	  install -D -m 644 "$$f" "$(DESTDIR)$(PYTHONDIR)/$$f" || exit 1; done && \
	  echo 'LIBDIR = "$(PREFIX)/lib"' > "$(DESTDIR)$(PYTHONDIR)/mori/_installed.py"; fi
.PHONY: install-python

clean:
	rm -rf $(B) build-asan

.PHONY: all check check-asan check-gpu demo install clean deps kernels xla FORCE
.SECONDARY:
-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
