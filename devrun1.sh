#!/bin/bash
# first device pass of the session: UMBP on CUDA, the jax FFI headers, morid status under list load on 16 cores
U=/tmp/u; rm -rf $U; mkdir -p $U; tar -C $U -xzf bundle/pass/bundle.tgz
export LD_LIBRARY_PATH=$U/lib B=$U/bin MORI_LIB=$U/lib/libmori.so PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; nproc
echo "== jax"
timeout 60 python3 -c 'import jax, jaxlib, jax.ffi; print(jax.__version__, jaxlib.__version__, jax.ffi.include_dir())'
I=$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())' 2>/dev/null) && tar -C "$I" -czf $OUT/xla_ffi_include.tgz . && ls -R "$I" | head -30
python3 -c 'import nvidia, os; print(nvidia.__path__)'; ls $(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])')
echo "== pytest test_umbp (CUDA)"
timeout 240 python3 -m pytest -q -rsx -p no:cacheprovider tests/python/test_umbp.py 2>&1 | tail -25
echo "== bench_umbp_torch"
RT=/tmp/rt1; mkdir -p $RT; $B/morid --runtime-dir $RT --kv_dram_bytes 8589934592 > /tmp/morid1.log 2>&1 & MP=$!
for i in $(seq 50); do [ -S $RT/morid.sock ] && break; sleep 0.1; done
for s in 1M 4M; do timeout 120 python3 tools/bench_umbp_torch.py --runtime-dir $RT --device cuda --size $s --n 128; done
kill $MP; wait $MP
echo "== flood --lists on $(nproc) cores"
RA=/tmp/ra RB=/tmp/rb; mkdir -p $RA $RB
$B/morid --runtime-dir $RA --listen 127.0.0.1:7811 > /tmp/ma.log 2>&1 & A=$!
$B/morid --runtime-dir $RB --listen 127.0.0.1:7812 > /tmp/mb.log 2>&1 & Bp=$!
sleep 1
for r in 1 2; do timeout 100 $B/mori-bench flood --lists 10 --clients 8 --descs 1048576 --node 127.0.0.1:7812 --peer-dir $RB --runtime-dir $RA --seconds 10; done
kill $A $Bp; wait
