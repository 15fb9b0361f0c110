#!/usr/bin/env bash
# test_gen_ctr — psc_gen_ctr's streams, with and without drift (no cluster):
#  (a) without --drift, --drift 0 changes no byte, and --threads none;
#  (b) --drift L is deterministic (the same bytes on 1 and 3 threads), and
#      --start N --train_rows M writes the training rows N..N+M-1 of the stream
#      that --train_rows N+M --files 2 cuts at N, and the same test rows (which
#      follow the stream's training rows);
#  (c) ids move with drift: of the categorical fields of a file's last tenth,
#      under 5 % hold a value seen in its first tenth (a gap of 4 lifetimes),
#      against over half without drift; adjacent tenths still share over 30 %
#      (an id stays live for a while); over a third of the distinct ids of the
#      drifted file occur once (the long tail);
#  (d) the planted model is the undrifted one: positive rate and planted AUC on
#      the training rows within 0.01 of the run without drift;
#  (e) a negative --drift or --start is refused with exit 64, naming the flag.
source "$(dirname "$0")/lib.sh"
G=$BIN/psc_gen_ctr
common=(--train_rows 40000 --test_rows 4000 --seed 5 --max_cardinality 1000000)

# gen DIR FLAGS... — writes DIR, its summary in DIR.out
gen() {
    local d=$1; shift
    "$G" --out "$TMP/$d" "$@" >"$TMP/$d.out" 2>"$TMP/gen.log" || fail "psc_gen_ctr $* failed: $(cat "$TMP/gen.log")"
}
sums() { (cd "$TMP/$1" && sha256sum -- *); }

# (a)
gen plain "${common[@]}" --files 2 --threads 2
gen plain0 "${common[@]}" --files 2 --threads 1 --drift 0
[ "$(sums plain)" = "$(sums plain0)" ] || fail "--drift 0 or --threads changed the undrifted files"

# (b)
gen drift "${common[@]}" --files 2 --threads 3 --drift 4000
gen drift1 "${common[@]}" --files 2 --threads 1 --drift 4000
[ "$(sums drift)" = "$(sums drift1)" ] || fail "the drifted files differ between --threads 3 and 1"
[ "$(sums drift)" != "$(sums plain)" ] || fail "--drift 4000 wrote the undrifted files"
gen second --train_rows 20000 --start 20000 --test_rows 4000 --seed 5 --max_cardinality 1000000 --files 1 --drift 4000
cmp -s "$TMP/drift/train-00001-of-00002.tsv" "$TMP/second/train-00000-of-00001.tsv" ||
    fail "--start 20000 --train_rows 20000 is not the second half of --train_rows 40000"
cmp -s "$TMP/drift/test.tsv" "$TMP/second/test.tsv" || fail "--start moved the test rows of the same stream"
grep -q "training rows are examples 20000..39999, test rows 40000..43999; each id live 4000 examples" \
    "$TMP/second.out" || fail "no stream line in the summary: $(cat "$TMP/second.out")"

# (c) share TENTH_A TENTH_B FILE ROWS: of the non-empty C fields of tenth B, the share whose
# (feature, value) occurs in tenth A
share() {
    awk -F'\t' -v A="$1" -v B="$2" -v n="$4" '
        { t = int((NR - 1) * 10 / n)
          if (t == A) for (f = 15; f <= 40; f++) if ($f != "") seen[f, $f] = 1
          if (t == B) for (f = 15; f <= 40; f++) if ($f != "") { tot++; hit += ((f, $f) in seen) } }
        END { printf "%.4f\n", hit / tot }' "$3"
}
ge() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x >= y) }'; }
f_drift=$TMP/drift/train-00000-of-00002.tsv
f_plain=$TMP/plain/train-00000-of-00002.tsv
far_d=$(share 0 9 "$f_drift" 20000)
far_p=$(share 0 9 "$f_plain" 20000)
near_d=$(share 4 5 "$f_drift" 20000)
echo "first tenth's values in the last tenth: drift $far_d, no drift $far_p; adjacent tenths with drift $near_d"
ge 0.05 "$far_d" || fail "with drift, $far_d of the last tenth's fields hold values of the first tenth (want < 0.05)"
ge "$far_p" 0.5 || fail "without drift, only $far_p of the last tenth's fields hold values of the first tenth"
ge "$near_d" 0.3 || fail "with drift, adjacent tenths share only $near_d (ids should stay live for a while)"
once=$(awk -F'\t' '{ for (f = 15; f <= 40; f++) if ($f != "") c[f, $f]++ }
    END { for (k in c) { d++; o += c[k] == 1 }; printf "%.4f\n", o / d }' "$f_drift")
echo "ids of the drifted file seen once: $once"
ge "$once" 0.33 || fail "only $once of the drifted file's distinct ids occur once"

# (d)
line() { sed -n 's/^train: .*positives \([0-9.]*\); generating model.s AUC \([0-9.]*\),.*/\1 \2/p' "$TMP/$1.out"; }
read -r pos_p auc_p <<<"$(line plain)"
read -r pos_d auc_d <<<"$(line drift)"
[ -n "$auc_p" ] && [ -n "$auc_d" ] || fail "no training summary: $(cat "$TMP/plain.out" "$TMP/drift.out")"
echo "positives / planted AUC on the training rows: no drift $pos_p / $auc_p, drift $pos_d / $auc_d"
awk -v a="$pos_p" -v b="$pos_d" -v c="$auc_p" -v d="$auc_d" \
    'BEGIN { exit !((a - b) ^ 2 < 1e-4 && (c - d) ^ 2 < 1e-4) }' ||
    fail "drift changed the planted model: positives $pos_p -> $pos_d, AUC $auc_p -> $auc_d"

# (e)
for flag in --drift --start; do
    set +e
    "$G" --out "$TMP/bad" "$flag" -1 >/dev/null 2>"$TMP/bad.log"
    code=$?
    set -e
    [ "$code" = 64 ] || fail "$flag -1 exited $code, expected 64"
    grep -q -- "$flag" "$TMP/bad.log" || fail "$flag -1: the message names no flag: $(cat "$TMP/bad.log")"
done
pass "psc_gen_ctr: drift deterministic, continued by --start, ids move ($far_d far, $near_d near), model unchanged"
