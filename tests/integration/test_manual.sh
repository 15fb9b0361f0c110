#!/usr/bin/env bash
# test_manual.sh — fails when the man pages fall behind the programs:
#  (a) every long flag that ps_server, worker and psctl print with --help is in
#      that program's man page (as \-\-name or --name in the roff source);
#  (b) every key the job-spec parser accepts (the strings of its keys[] arrays,
#      of optim_params[] and the key argument of its jspec_get_* calls) is a
#      bold word of docs/man/psc-job.5;
#  (c) groff -man -ww -z reports no warning on any page (skipped without groff).
# Needs no cluster: it only runs --help.
source "$(dirname "$0")/lib.sh"

MAN=$SRC/docs/man
for p in ps_server.8 worker.8 psctl.1 psc-job.5; do
    [ -f "$MAN/$p" ] || fail "missing man page docs/man/$p"
done

# (a) flags --------------------------------------------------------------
nflags=0
missing=()
check_flags() { # PROGRAM PAGE
    local prog=$1 page=$2 help flags f
    help=$("$BIN/$prog" --help 2>&1) || fail "$prog --help exited $?"
    flags=$(grep -o -- '--[a-z][a-z0-9_]*' <<<"$help" | sort -u || true)
    [ -n "$flags" ] || fail "no --flags found in $prog --help"
    for f in $flags; do
        nflags=$((nflags + 1))
        # \-\-name or --name, not followed by more of a name (--job vs --job_spec)
        grep -Eq -- "(\\\\-\\\\-|--)${f#--}([^a-z0-9_]|$)" "$MAN/$page" || missing+=("$page: $f")
    done
}
check_flags ps_server ps_server.8
check_flags worker worker.8
check_flags psctl psctl.1
[ ${#missing[@]} = 0 ] || fail "flags of --help missing from the man pages: ${missing[*]}"

# (b) job-spec keys ------------------------------------------------------
mapfile -t sources < <(find "$SRC/common" -name 'job_spec*.c' ! -name 'job_spec_json.c' | sort)
[ ${#sources[@]} -ge 4 ] || fail "expected the job-spec parser in common/job_spec*.c, found ${#sources[@]} files"
all=$(cat "${sources[@]}" | sed 's://.*$::' | tr '\n' ' ')
keys=$( {
    # static const char *const keys[] = {...}; layer_keys[][9] = {...}; keys[][6] = {...}
    grep -o '[a-z_]*keys\(\[[^]]*\]\)* = {[^;]*}' <<<"$all" | grep -o '"[^"]*"' || true
    # optim_params[] = {{"momentum", ...}, ...}: each entry's first string
    grep -o 'optim_params\[\] = {[^;]*}' <<<"$all" | grep -o '{"[^"]*"' | tr -d '{' || true
    # jspec_get_*(c, obj, "key", ...)
    grep -o 'jspec_get_[a-z0-9_]*( *[^,()]*, *[^,()]*, *"[^"]*"' <<<"$all" | grep -o '"[^"]*"$' || true
} | tr -d '"' | sort -u)
nkeys=$(wc -w <<<"$keys")
[ "$nkeys" -ge 40 ] || fail "found only $nkeys job-spec keys in ${sources[*]}: has the parser's shape changed?"
# a key must be a bold word: on a .B/.BR/.BI/.RB line or after \fB
bold=$(grep -E '^\.(B|BR|BI|RB|IB) |\\fB' "$MAN/psc-job.5" || true)
for k in $keys; do
    grep -Eq "(^|[^a-z0-9_])${k}([^a-z0-9_]|$)" <<<"$bold" || missing+=("$k")
done
[ ${#missing[@]} = 0 ] || fail "job-spec keys the parser accepts but docs/man/psc-job.5 does not document: ${missing[*]}"

# (c) groff warnings -----------------------------------------------------
if command -v groff >/dev/null 2>&1; then
    for p in ps_server.8 worker.8 psctl.1 psc-job.5; do
        w=$(groff -man -ww -z "$MAN/$p" 2>&1) || fail "groff failed on docs/man/$p: $w"
        [ -z "$w" ] || fail "groff warns on docs/man/$p: $w"
    done
    groff_note="groff: no warnings"
else
    groff_note="groff not installed: warnings not checked"
fi

pass "$nflags --help flags in the man pages, $nkeys job-spec keys in psc-job(5); $groff_note"
