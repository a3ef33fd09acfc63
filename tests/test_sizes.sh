#!/usr/bin/env bash
# Size limits (tools/check-sizes): no file in daemon/ or libclient/ over 1000 lines, no function
# over 150 lines in daemon/, libclient/, common/ or tools/. Each breach is named with its file,
# function and length.
set -u
cd "$(dirname "$0")/.." || exit 1
tools/check-sizes || { echo "FAIL: split the files and functions above along their seams"; exit 1; }
echo "ok: sizes within the limits"
