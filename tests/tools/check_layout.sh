#!/usr/bin/env bash
# check_layout.sh — the house's shape, checked on every `make test` (CTest unit.check_layout).
#
#   tests/tools/check_layout.sh [BUILD_DIR]      (or PSC_BIN=BUILD_DIR PSC_SRC=SOURCE_DIR)
#
# From the built objects (nm: each object's defined and undefined global symbols):
#   (a) no cycle among the .c files of one folder: within common/, ps_server/,
#       worker/ and client/ (main.c included), A -> B when A uses a symbol that B
#       defines; a cycle is reported as a chain of files, each arrow with one of
#       the symbols that make it;
#   (b) no symbol taken from another program's folder: ps_server/, worker/ and
#       client/ use only their own folder, common/, the generated protobuf-c code
#       and system libraries; common/ uses only itself and the generated code.
# From the sources outside tests/ (an awk brace matcher, comments, strings and
# preprocessor lines left out):
#   (c) no function over MAX_FUNC lines (opening brace to closing brace, both
#       counted) and no .c/.h/.cu file over MAX_FILE lines;
#   (d) the rooms: a program's folder keeps at most MAX_FLAT source files beside
#       main.c (a family of files goes into a subfolder: worker/tower/,
#       ps_server/store/, ...), and a private header (*_internal.h) is
#       included only by the files of its own subfolder.
# Objects are found under the CMake targets' object folders
# (BUILD/CMakeFiles/<target>.dir/...); an object whose source no longer exists is
# stale and skipped. Exit 0 when all holds, 1 with every finding listed, 2 when
# the build folder has no objects.
set -u

MAX_FUNC=${MAX_FUNC:-120}
MAX_FILE=${MAX_FILE:-1000}
MAX_FLAT=${MAX_FLAT:-8}

BIN=${1:-${PSC_BIN:-}}
SRC=${PSC_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
NM=${NM:-nm}
if [ -z "$BIN" ] || [ ! -d "$BIN/CMakeFiles" ]; then
    echo "check_layout: no build folder (give it as the argument or PSC_BIN)" >&2
    exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- the objects: "<group> <source path> <object>" ----
# Targets whose objects count; the group is the source's top folder, the
# generated tower table (gen/tower_backends.c) belongs to worker/.
: >"$tmp/objs"
for t in psc_proto psc_common psc_ps psc_worker psc_client ps_server worker psctl; do
    d="$BIN/CMakeFiles/$t.dir"
    [ -d "$d" ] || continue
    find "$d" -name '*.o' | sort | while read -r o; do
        rel=${o#"$d"/}
        rel=${rel%.o}
        case $rel in
        gen/*) src="$BIN/$rel" ;;
        *) src="$SRC/$rel" ;;
        esac
        [ -f "$src" ] || continue # stale: its source was removed or renamed
        case $rel in
        gen/tower_backends.c) g=worker ;;
        gen/*) g=proto ;;
        common/* | ps_server/* | worker/* | client/*) g=${rel%%/*} ;;
        *) continue ;;
        esac
        echo "$g $rel $o"
    done >>"$tmp/objs"
done
nobj=$(wc -l <"$tmp/objs")
if [ "$nobj" -eq 0 ]; then
    echo "check_layout: no objects under $BIN/CMakeFiles (build first)" >&2
    exit 2
fi

# ---- symbols: "D|U <group> <source> <symbol>" ----
while read -r g rel o; do
    "$NM" -g --defined-only "$o" 2>/dev/null | awk -v g="$g" -v f="$rel" 'NF >= 3 && $2 != "U" && $2 != "w" && $2 != "v" {print "D", g, f, $3}'
    "$NM" -u "$o" 2>/dev/null | awk -v g="$g" -v f="$rel" 'NF >= 2 {print "U", g, f, $2}'
done <"$tmp/objs" >"$tmp/syms"

awk '
function allowed(user, owner) {
    if (user == owner || owner == "proto") return 1
    return owner == "common" && user != "proto"
}
# Depth-first search from node u; a grey successor closes a cycle: print the
# chain from it to u and back.
function dfs(u, depth,    k, v, i, chain) {
    color[u] = 1
    stack[depth] = u
    for (k = 1; k <= nsucc[u]; k++) {
        v = succ[u, k]
        if (color[v] == 1) {
            chain = ""
            for (i = depth; i >= 1 && stack[i] != v; i--) {}
            for (; i <= depth; i++) chain = chain stack[i] " -> (" why[stack[i], (i < depth ? stack[i + 1] : v)] ") "
            chain = chain v
            if (!(chain in seen)) {
                seen[chain] = 1
                cycles[++ncycles] = chain
            }
        } else if (color[v] == 0) {
            dfs(v, depth + 1)
        }
    }
    color[u] = 2
}
$1 == "D" && !($4 in owner) { owner[$4] = $3; ownergroup[$4] = $2 }
$1 == "U" { nu++; ug[nu] = $2; uf[nu] = $3; us[nu] = $4 }
END {
    bad = 0
    for (i = 1; i <= nu; i++) {
        s = us[i]
        if (!(s in owner)) continue # a system library or the linker
        f = uf[i]; o = owner[s]; og = ownergroup[s]
        if (!allowed(ug[i], og)) {
            crossing[++ncross] = sprintf("  %s uses %s, defined in %s (%s/ may use only its own folder, common/ and the generated code)", f, s, o, ug[i])
            continue
        }
        if (og != ug[i] || o == f) continue
        if (!((f, o) in why)) {
            why[f, o] = s
            succ[f, ++nsucc[f]] = o
            node[f] = 1
        }
    }
    # a stable order: sort the nodes by name (insertion sort; a few dozen)
    n = 0
    for (f in node) names[++n] = f
    for (i = 2; i <= n; i++) {
        x = names[i]
        for (j = i - 1; j >= 1 && names[j] > x; j--) names[j + 1] = names[j]
        names[j + 1] = x
    }
    for (i = 1; i <= n; i++) if (!color[names[i]]) dfs(names[i], 1)
    if (ncross) {
        printf "(b) symbols taken from another program'\''s folder: %d\n", ncross
        for (i = 1; i <= ncross; i++) print crossing[i]
        bad += ncross
    }
    if (ncycles) {
        printf "(a) cycles among the files of one folder (A -> (symbol) B: A uses B'\''s symbol): %d\n", ncycles
        for (i = 1; i <= ncycles; i++) print "  " cycles[i]
        bad += ncycles
    }
    print bad > "/dev/stderr"
}' "$tmp/syms" >"$tmp/sym_report" 2>"$tmp/sym_bad"

# ---- sizes: the sources outside tests/ ----
(cd "$SRC" && find common ps_server worker client -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) 2>/dev/null | sort) >"$tmp/srcs"
: >"$tmp/size_report"
nsrc=0
while read -r f; do
    nsrc=$((nsrc + 1))
    lines=$(wc -l <"$SRC/$f")
    if [ "$lines" -gt "$MAX_FILE" ]; then echo "  FILE $f: $lines lines" >>"$tmp/size_report"; fi
    awk -v f="$f" -v max="$MAX_FUNC" '
    # Strips comments (state across lines), string and character literals;
    # preprocessor lines (with their continuations) count as blank.
    function strip(s,    out, i, c, c2, q) {
        out = ""
        i = 1
        while (i <= length(s)) {
            c = substr(s, i, 1); c2 = substr(s, i, 2)
            if (incomment) {
                if (c2 == "*/") { incomment = 0; i += 2 } else i++
                continue
            }
            if (c2 == "/*") { incomment = 1; i += 2; continue }
            if (c2 == "//") break
            if (c == "\"" || c == "'\''") {
                q = c; i++
                while (i <= length(s) && substr(s, i, 1) != q) i += (substr(s, i, 1) == "\\") ? 2 : 1
                i++
                out = out q q
                continue
            }
            out = out c
            i++
        }
        return out
    }
    {
        line = $0
        if (inmacro) { inmacro = (line ~ /\\$/); next }
        if (!incomment && line ~ /^[ \t]*#/) { inmacro = (line ~ /\\$/); head = ""; next }
        s = strip(line)
        if (depth == 0 && s ~ /^[ \t]*$/ && !incomment) { head = ""; next }
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (c == "{") {
                if (depth == 0) {
                    infunc = (head ~ /\)[ \t]*$/ && head !~ /=/)
                    if (infunc) {
                        start = NR
                        name = head
                        gsub(/__attribute__[ \t]*\(\(.*\)\)/, "", name)
                        if (match(name, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/))
                            name = substr(name, RSTART, RLENGTH - 1)
                        sub(/[ \t]+$/, "", name)
                    }
                }
                depth++
            } else if (c == "}") {
                depth--
                if (depth == 0) {
                    if (infunc && NR - start + 1 > max) printf "  FUNC %s:%d %s(): %d lines\n", f, start, name, NR - start + 1
                    infunc = 0
                    head = ""
                }
            } else if (depth == 0) {
                if (c == ";") head = ""
                else head = head c
            }
        }
        if (depth == 0) head = head " "
    }' "$SRC/$f" >>"$tmp/size_report"
done <"$tmp/srcs"
nsize=$(wc -l <"$tmp/size_report")

# ---- rooms: files beside main.c, private headers ----
: >"$tmp/room_report"
for prog in ps_server worker client; do
    [ -d "$SRC/$prog" ] || continue
    flat=$(cd "$SRC/$prog" && find . -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) ! -name main.c | wc -l)
    if [ "$flat" -gt "$MAX_FLAT" ]; then
        echo "  ROOM $prog/: $flat source files beside main.c (at most $MAX_FLAT: give a family a subfolder)" >>"$tmp/room_report"
    fi
done
while read -r f; do
    grep -o '#include "[A-Za-z0-9_]*_internal\.h"' "$SRC/$f" 2>/dev/null | sed 's/#include "\(.*\)"/\1/' |
        while read -r h; do
            home=$(cd "$SRC" && find common ps_server worker client -name "$h" 2>/dev/null | head -1)
            [ -n "$home" ] || continue
            if [ "$(dirname "$home")" != "$(dirname "$f")" ]; then
                echo "  PRIVATE $f includes $home, private to $(dirname "$home")/" >>"$tmp/room_report"
            fi
        done
done <"$tmp/srcs"
nroom=$(wc -l <"$tmp/room_report")

nsym=$(cat "$tmp/sym_bad")
cat "$tmp/sym_report"
if [ "$nsize" -gt 0 ]; then
    echo "(c) over the size limits (functions over $MAX_FUNC lines, files over $MAX_FILE): $nsize"
    sort "$tmp/size_report"
fi
if [ "$nroom" -gt 0 ]; then
    echo "(d) outside the rooms: $nroom"
    sort "$tmp/room_report"
fi
total=$((nsym + nsize + nroom))
if [ "$total" -gt 0 ]; then
    echo "check_layout: FAILED: $total finding(s) ($nobj objects, $nsrc source files checked)"
    exit 1
fi
echo "check_layout: OK ($nobj objects: no cycle within a folder, no symbol across programs; $nsrc source files: no function over $MAX_FUNC lines, no file over $MAX_FILE, every family in its room)"
exit 0
