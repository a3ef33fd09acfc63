#!/usr/bin/env bash
# mori-kvreplay's input handling, end to end: a malformed or truncated
# trace line is an error naming file and line (exit 2); --skip-bad-lines skips and counts them;
# an explicit missing trace is an error; a missing default trace falls back to the synthetic
# workload and says so; bad options are refused. No daemon needed (--dry-run schedules only).
source "$(dirname "$0")/testlib.bash"

REPLAY=$B/mori-kvreplay
[ -x "$REPLAY" ] || fail "$REPLAY is not built"
good='{"timestamp": 0, "input_length": 1000, "output_length": 3, "hash_ids": [0, 1]}'
good2='{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [0, 2]}'

# expect_error NAME REGEX ARGS...: exit 2 and stderr matching REGEX
expect_error() {
	local name=$1 re=$2 rc
	shift 2
	"$REPLAY" "$@" > "$T/out" 2> "$T/err"
	rc=$?
	[ $rc = 2 ] || fail "$name: exit $rc, expected 2: $(cat "$T/out" "$T/err")"
	grep -Eq -- "$re" "$T/err" || fail "$name: stderr does not match /$re/: $(cat "$T/err")"
	pass "$name: $(head -n 1 "$T/err")"
}

printf '%s\n%s\n{"timestamp": 9, "input_length": 7\n%s\n' "$good" "$good2" "$good" > "$T/bad.jsonl"
expect_error "malformed line 3" "bad\.jsonl:3: malformed JSON" --trace "$T/bad.jsonl" --dry-run --model tiny

printf '%s\n%s\n%s\n{"timestamp": 9, "input_len' "$good" "$good" "$good2" > "$T/trunc.jsonl"
expect_error "truncated last line" "trunc\.jsonl:4: .*truncated" --trace "$T/trunc.jsonl" --dry-run --model tiny

printf '%s\n{"timestamp": 1, "input_length": 2000, "output_length": 3, "hash_ids": [0, 1]}\n' "$good" > "$T/count.jsonl"
expect_error "hash_ids of the wrong length" "count\.jsonl:2: .*needs 4" --trace "$T/count.jsonl" --dry-run --model tiny

printf '%s\n{"timestamp": "x", "input_length": 5, "output_length": 3, "hash_ids": [0]}\n' "$good" > "$T/ts.jsonl"
expect_error "timestamp not a number" "ts\.jsonl:2: .*timestamp" --trace "$T/ts.jsonl" --dry-run --model tiny

# --skip-bad-lines: the two good requests of trunc.jsonl's kind are replayed, bad ones counted
printf '%s\nnot json\n%s\n{"timestamp": 9, "input_len' "$good" "$good2" > "$T/skip.jsonl"
js=$("$REPLAY" --trace "$T/skip.jsonl" --skip-bad-lines --dry-run --model tiny --json) ||
	fail "--skip-bad-lines failed: $js"
[ "$(json_get bad_lines_skipped <<< "$js")" = 2 ] || fail "bad_lines_skipped is not 2: $js"
[ "$(json_get requests <<< "$js")" = 2 ] || fail "requests is not 2: $js"
[ "$(json_get blocks_total <<< "$js")" = 4 ] || fail "blocks_total is not 4: $js"
[ "$(json_get blocks_moved <<< "$js")" = 3 ] || fail "blocks_moved is not 3 (ids 0, 1, 2): $js"
[ "$(json_get blocks_skipped <<< "$js")" = 1 ] || fail "blocks_skipped is not 1 (id 0 again): $js"
pass "--skip-bad-lines: 2 skipped, 2 requests, 3 blocks moved, 1 cached"

expect_error "explicit trace missing" "cannot open trace $T/none.jsonl" --trace "$T/none.jsonl" --dry-run
expect_error "unknown model" "unknown model \"gpt5\"" --model gpt5 --dry-run
expect_error "bad page size" "page tokens 24 must divide 512" --page-tokens 24 --dry-run
expect_error "pool smaller than a block" "no whole block" --pool-mib 10 --dry-run --synthetic
expect_error "bad number" "bad value for --requests" --requests 12x --dry-run

# A trace that never ends or never starts is refused at once, not read without
# bound (/dev/zero: 4.5 GB in 10 s) or waited on forever (a FIFO without a writer)
mkfifo "$T/fifo.jsonl"
for f in "$T/fifo.jsonl" /dev/zero "$T"; do
	timeout 10 "$REPLAY" --trace "$f" --dry-run --model tiny > "$T/out" 2> "$T/err"
	rc=$?
	[ $rc = 2 ] || fail "trace $f: exit $rc, expected 2 at once (124: it hung): $(cat "$T/err")"
	grep -q "cannot open trace $f: not a regular file" "$T/err" || fail "trace $f: $(cat "$T/err")"
	pass "trace $f refused: $(head -n 1 "$T/err")"
done
# a line past TRACE_LINE_MAX (16 MiB) is refused naming file and line, even with --skip-bad-lines
{ printf '%s\n' "$good"; head -c $((16 * 1024 * 1024 + 10)) /dev/zero | tr '\0' x; } > "$T/long.jsonl"
expect_error "line over 16 MiB" "long\.jsonl:2: line longer than 16777216 bytes" --trace "$T/long.jsonl" --dry-run --model tiny
expect_error "line over 16 MiB, skip-bad" "long\.jsonl:2: line longer than" --trace "$T/long.jsonl" --skip-bad-lines --dry-run --model tiny
# the bytes near a malformed spot are printed escaped: no terminal escape sequence gets through
printf '%s\n{"timestamp": x\033[2J\343\231 "y"}\n' "$good" > "$T/esc.jsonl"
expect_error "malformed binary line, escaped" 'esc\.jsonl:2: malformed JSON at column 15, near "x\\x1b\[2J\\xe3\\x99 \\x22y\\x22\}"' --trace "$T/esc.jsonl" --dry-run --model tiny
! grep -q $'\033' "$T/err" || fail "a raw ESC byte reached stderr: $(od -c "$T/err" | head -3)"
pass "no raw byte of the trace in the message"

# default trace absent (run from a directory without ../shared/data): synthetic, said so
mkdir -p "$T/a/b"
out=$(cd "$T/a/b" && "$REPLAY" --dry-run --model tiny --requests 300 2>&1) || fail "synthetic run failed: $out"
grep -q "SYNTHETIC" <<< "$out" || fail "synthetic fallback not announced: $out"
js=$(cd "$T/a/b" && "$REPLAY" --dry-run --model tiny --requests 300 --json 2> /dev/null) || fail "synthetic --json failed"
[ "$(json_get synthetic <<< "$js")" = true ] || fail "\"synthetic\" is not true: $js"
[ "$(json_get requests <<< "$js")" = 300 ] || fail "synthetic requests is not 300: $js"
grep -q '"trace":.*not found' <<< "$js" || fail "\"trace\" does not say the file was not found: $js"
pass "missing default trace: synthetic workload, announced in text and JSON"

# the daemon is not there: a clear error, exit 2
expect_error "no daemon" "cannot connect to morid" --runtime-dir "$T/nothing" --synthetic --requests 1 --model tiny
exit 0
