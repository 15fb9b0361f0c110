#!/usr/bin/env bash
# test_demo_ctr_data — `deploy/demo_ctr.sh --data DIR` never deletes what it did
# not write: a DIR holding the user's own files is refused (exit 73, the reason
# on stderr) and every file in it is left byte for byte; a DIR the script marked
# as its own (.psc-demo-ctr) is not refused. (Generating and training are
# make demo-ctr's; here the script is stopped before it trains: --build points
# at a folder without psc_gen_ctr — the refusal comes before the script looks
# for it — or at one whose psc_gen_ctr fails at once.)
source "$(dirname "$0")/lib.sh"
user=$TMP/my-criteo
mkdir -p "$user/sub"
printf '1\t2\t\t3\n' >"$user/day_0.tsv"
printf 'keep\n' >"$user/sub/notes.txt"
before=$(cd "$user" && find . -type f -exec sha256sum {} + | sort)
set +e
mkdir -p "$TMP/nobuild"
bash "$SRC/deploy/demo_ctr.sh" --build "$TMP/nobuild" --data "$user" >"$TMP/out.log" 2>"$TMP/err.log"
code=$?
set -e
[ "$code" = 73 ] || fail "demo_ctr.sh on the user's directory exited $code, expected 73: $(cat "$TMP/err.log")"
grep -q "is not empty and was not written by this script" "$TMP/err.log" || fail "no reason given: $(cat "$TMP/err.log")"
after=$(cd "$user" && find . -type f -exec sha256sum {} + | sort)
[ "$before" = "$after" ] || fail "the user's files changed"
# its own directory (marked) is generated into: a fake psc_gen_ctr that records it ran
fake=$TMP/fakebuild
mkdir -p "$fake"
printf '#!/bin/sh\necho ran >"%s/gen.ran"\nexit 3\n' "$TMP" >"$fake/psc_gen_ctr"
chmod +x "$fake/psc_gen_ctr"
own=$TMP/own
mkdir -p "$own"; : >"$own/.psc-demo-ctr"; printf 'half\n' >"$own/train-00000-of-00002.tsv.gz"
set +e
bash "$SRC/deploy/demo_ctr.sh" --build "$fake" --data "$own" >/dev/null 2>"$TMP/err2.log"
set -e
[ -f "$TMP/gen.ran" ] || fail "the script's own directory was refused: $(cat "$TMP/err2.log")"
pass "demo_ctr.sh leaves a directory it did not write alone and regenerates its own"
