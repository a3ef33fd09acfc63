#!/usr/bin/env bash
# mori-bench io's sizes: --batch 100000000 segfaulted on an unchecked
# malloc of batch x 64 descriptors (150 GB), and a --block-min larger than --region printed no
# row and exited 0. Each absurd value is now refused before any daemon is needed: exit 2 and a
# message naming the option. (No daemon: each case exits while parsing.)
source "$(dirname "$0")/testlib.bash"
MORI_RUNTIME_DIR=$RUN
export MORI_RUNTIME_DIR
sub_refused() { # SUBCOMMAND WANT_IN_MESSAGE ARGS...
	local sub=$1 want=$2
	shift 2
	out=$(timeout 30 "$B/mori-bench" "$sub" "$@" 2>&1 > /dev/null)
	rc=$?
	[ "$rc" = 2 ] || fail "mori-bench $sub $*: exit $rc, want 2 ($out)"
	grep -q -- "$want" <<< "$out" || fail "mori-bench $sub $*: message '$out' does not name $want"
}
refused() { sub_refused io "$@"; }
refused --batch --batch 100000000 --block-min 4K --block-max 4K --iters 1 --region 1M
refused --batch --batch -1 --iters 1
refused --batch --batch 1048577 --iters 1
refused --iters --iters 2000000000
refused --warmup --warmup -5
refused --depth --depth 100000
refused --prep-descs --prep-descs 99999999999
refused --region --block-min 8K --block-max 8K --region 4K --iters 1
refused "size '-1'" --region -1
refused "size 'abc'" --region abc
refused "size '1Gfoo'" --region 1Gfoo
pass "mori-bench io refuses absurd --batch, --iters, --warmup, --depth, --prep-descs, sizes and a block past the region: exit 2 with a message"

# mori-bench coll: bad rank counts, iterations and sizes, refused before any rank forks
coll_refused() { sub_refused coll "$@"; }
coll_refused "--pes" --pes 0
coll_refused "--pes" --pes 99
coll_refused "--pes" --pes abc
coll_refused "--pes" --pes "2 x"
coll_refused "--pes" --pes ""
coll_refused "--iters" --iters 0
coll_refused "--iters" --iters abc
coll_refused "--iters" --iters 100000
coll_refused "size 'abc'" --max abc
coll_refused "size '1X'" --max 1X
coll_refused "above --max" --min 5G --max 1G
coll_refused "starts no row" --only no-such-row
out=$(timeout 60 "$B/mori-bench" coll --pes "2,4" --max 64K --only "allreduce oneshot" 2>&1) # with a GPU: small rows
rc=$?
case $rc in
0 | 77 | 1) grep -q "raised to 1 MiB" <<< "$out" || fail "coll --max 64K: no word of the raise ($out)" ;;
*) fail "coll --pes 2,4 --max 64K: exit $rc ($out)" ;;
esac
pass "mori-bench coll refuses bad --pes, --iters, --max, --min and --only before forking (exit 2, naming the option) and says when it raises --max"

# mori-bench shmem --proxy: --only matched substrings (junk measured nothing, exit 0),
# --max read "1G" as 1 byte, bad --iters and unknown options printed only the usage
proxy_refused() { sub_refused shmem "$1" --proxy "${@:2}"; }
proxy_refused "unknown phase 'junk'" --only junk
proxy_refused "unknown phase 'chunk'" --only chunk
proxy_refused "names no phase" --only ""
proxy_refused "--iters abc" --iters abc
proxy_refused "--iters 5" --iters 5
proxy_refused "unknown option --bogus" --bogus x
proxy_refused "size 'abc'" --max abc
proxy_refused "is not 4K .. 1G" --max 2G
pass "mori-bench shmem --proxy refuses unknown --only phases, bad --iters and --max, and unknown options: exit 2 naming them"

# mori-bench kv checks its options before it connects
sub_refused kv --iters --iters 0
sub_refused kv --batch --batch 100000000
sub_refused kv --ops --ops -1
sub_refused kv --clients --clients "8 0"
sub_refused kv --profile --profile bogus
sub_refused kv --record --record /dev/null
sub_refused kv "--min/--max" --min 64K --max 4K
sub_refused kv "size 'x'" --value x
pass "mori-bench kv refuses bad --iters, --batch, --ops, --clients, --profile, --record, sizes: exit 2 naming them"
