#!/usr/bin/env bash
# The layering of the tree, checked.
#
#   scripts/check-layers.sh [-C DIR] [--objects OBJDIR]
#
# 1. Includes: every quoted #include of a product file names a file of its
#    own room or of a room below it (the table below, bottom first); no .c
#    file is included anywhere; product code never includes tests/ or
#    bench/.  A transport provider (transport/NAME/) sees the interface
#    (transport/*.h) and itself, never another provider.
# 2. Calls (with --objects, after a build): the product's object files,
#    linked by the symbols one defines and another uses, form no circle:
#    two files that call each other, or any longer loop.
# 3. Size: no product source file (.c, .h, .inc) over 800 lines.
# 4. Functions: no function over 80 lines.  A function is measured from
#    its opening brace to its closing brace, both counted: the tree's
#    style (.clang-format: BreakBeforeBraces Linux) puts a function's
#    braces, and only a function's, alone at column 0, while a struct's,
#    an initializer's or a block's open at the end of a line and close
#    indented or followed by more (`};`, `} name;`).
#
# The size rules (3, 4) and the circles (2) do not apply to the paths of
# the EXEMPT table below, each with its reason; nothing else is excepted.
#
# Exit 0 when the tree keeps to it, 1 with one line per breach otherwise.
set -uo pipefail

# room: the rooms it may include besides itself and the public include/.
# bench/ and tests/ sit above all of it (bench/ may use tests/support/).
RULES='
core:
reduce: core
protocol: core reduce
transport: core reduce protocol
topology: core
an: core reduce protocol transport
am: core reduce protocol transport topology
sharpd: core reduce protocol transport
libsharp: core reduce protocol transport
mpi-coll: core reduce
plugins/opensm: core reduce protocol topology
plugins/slurm:
cli: core reduce protocol transport topology libsharp
man: core libsharp mpi-coll
bench: core reduce protocol transport topology an am sharpd libsharp mpi-coll cli tests/support
'

# path prefix | the rules waived (size function circle) | why
EXEMPT='
tests/    | size function | tests: a case reads as one story and a file as the list of its cases; not product code
bench/    | size function | benchmarks: a run and its report read top to bottom; not product code
build/    | size function circle | generated: what the build writes (build/gen/shp_paths.h, from the install paths), not written by hand
'
MAX_FILE_LINES=800
MAX_FUNC_LINES=80

DIR=.
OBJS=
while [ $# -gt 0 ]; do
    case $1 in
    -C) DIR=$2; shift 2 ;;
    --objects) OBJS=$2; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-layers: unknown argument '$1' (--help)" >&2; exit 2 ;;
    esac
done
cd "$DIR" || exit 2
TOP=$(pwd)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    list_sources() { git ls-files '*.c' '*.h' '*.inc'; }
else
    list_sources() { find . \( -name '*.[ch]' -o -name '*.inc' \) -printf '%P\n'; }
fi

fail=0
breach() {
    echo "check-layers: $*"
    fail=1
}

# exempt_re RULE: an extended regex of the path prefixes RULE is waived for
exempt_re() {
    local re
    re=$(awk -F'|' -v rule="$1" 'NF >= 3 && (" " $2 " ") ~ (" " rule " ") {
            p = $1; gsub(/[[:space:]]/, "", p); printf "%s%s", sep, p; sep = "|" }' <<<"$EXEMPT")
    echo "^(${re:-/})"
}

# One pass over every quoted include: FILE:LINE:TEXT in, breaches out.
breaches=$(list_sources | xargs grep -n -H \
    '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' /dev/null | awk -v rules="$RULES" '
    function room(p,   r, best) {
        best = ""
        for (r in allow)
            if (index(p, r "/") == 1 && length(r) > length(best)) best = r
        return best
    }
    function dir(p) { sub(/\/[^\/]*$/, "", p); return p }
    BEGIN {
        n = split(rules, l, "\n")
        for (i = 1; i <= n; i++) {
            if (l[i] !~ /:/) continue
            r = l[i]; sub(/:.*/, "", r)
            a = l[i]; sub(/^[^:]*: */, "", a)
            allow[r] = " " a " "
        }
    }
    {
        f = $0; sub(/:.*/, "", f)
        line = $0; sub(/^[^:]*:/, "", line); sub(/:.*/, "", line)
        inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
        if (inc ~ /\.c$/) {
            print f ":" line ": includes a .c file (" inc "): compile it and link it"
            next
        }
        if (f !~ /^(tests|bench)\// && inc ~ /^(tests|bench)\//) {
            print f ":" line ": product code includes " inc
            next
        }
        if (inc !~ /\//) next              # its own folder, or generated
        me = room(f); to = room(inc)
        if (me == "" || to == "") next
        if (me == to) {
            if (me == "transport" && dir(inc) != "transport" && dir(inc) != dir(f))
                print f ":" line ": a transport includes another provider (" inc ")"
            next
        }
        if (index(allow[me], " " to " ") == 0)
            print f ":" line ": " me "/ may not include " to "/ (" inc "): it is not below it"
    }')
if [ -n "$breaches" ]; then
    while read -r b; do breach "$b"; done <<<"$breaches"
fi

# Size: files over MAX_FILE_LINES lines.
big=$(list_sources | grep -v -E "$(exempt_re size)" | xargs -r wc -l |
    awk -v max=$MAX_FILE_LINES '$2 != "total" && $1 > max {
        print $2 ": " $1 " lines, over " max ": split it by job" }')
if [ -n "$big" ]; then
    while read -r b; do breach "$b"; done <<<"$big"
fi

# Functions over MAX_FUNC_LINES lines, from the brace alone at column 0
# that opens one to the one that closes it (both counted).  The name is
# the last identifier before a "(" in the signature above the brace,
# attributes aside; the line reported is the signature's first.
long=$(list_sources | grep -v -E "$(exempt_re function)" |
    xargs -r awk -v max=$MAX_FUNC_LINES '
    function fname(s,   n, best) {
        best = "?"
        while (match(s, /[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(/)) {
            n = substr(s, RSTART, RLENGTH); sub(/[[:space:]]*\($/, "", n)
            if (n !~ /^__/ && n != "format" && best == "?") best = n
            s = substr(s, RSTART + RLENGTH)
        }
        return best
    }
    FNR == 1 { open = 0; sig = ""; at = 0 }
    !open && /^\{[[:space:]]*$/ { open = FNR; name = fname(sig); next }
    open && /^\}[[:space:]]*$/ {
        n = FNR - open + 1
        if (n > max)
            print FILENAME ":" at ": " name "() is " n " lines, over " max \
                ": split it into named steps"
        open = 0; sig = ""; at = 0; next
    }
    open { next }
    /^[[:space:]]*$/ || /;[[:space:]]*$/ || /\*\/[[:space:]]*$/ || /^#/ || /^\}/ {
        sig = ""; at = 0; next
    }
    { if (!at) at = FNR; sig = sig " " $0 }')
if [ -n "$long" ]; then
    while read -r b; do breach "$b"; done <<<"$long"
fi

# Circles of calls between the product's files, from their objects.
if [ -n "$OBJS" ]; then
    # the objects of sources that are still there (a moved file's old
    # object may linger in a build tree)
    objs=$(cd "$OBJS" && find . -name '*.o' | sed 's|^\./||' |
        grep -v -E '^(tests|bench|man)/' | sort |
        while read -r o; do [ -f "$TOP/${o%.o}.c" ] && echo "$o"; done)
    if [ -z "$objs" ]; then
        breach "no objects under $OBJS: build first"
    else
        cycles=$( (cd "$OBJS" &&
            nm -A -g --defined-only $objs | awk '{ f = $1; sub(/\.o:.*/, ".c", f) }
                $(NF-1) ~ /^[TDBRVWC]$/ { print "D", f, $NF }'
            nm -A -u $objs | awk '{ f = $1; sub(/\.o:.*/, ".c", f); print "U", f, $NF }'
        ) | awk -v exempt="$(exempt_re circle)" '
            $1 == "D" { def[$3] = $2; files[$2] = 1 }
            $1 == "U" { use[++n] = $2 SUBSEP $3 }
            END {
                for (i = 1; i <= n; i++) {
                    split(use[i], p, SUBSEP)
                    if ((p[2] in def) && def[p[2]] != p[1]) {
                        r[p[1], def[p[2]]] = 1
                        if (!((p[1], def[p[2]]) in why))
                            why[p[1], def[p[2]]] = p[2]
                    }
                }
                for (k in files) for (i in files) if ((i, k) in r)
                    for (j in files) if ((k, j) in r) r[i, j] = 1
                for (i in files) for (j in files)
                    if (i < j && ((i, j) in r) && ((j, i) in r) &&
                        !(i ~ exempt && j ~ exempt))
                        print i " <-> " j ": " i " uses " \
                            (((i, j) in why) ? why[i, j] : "(through others)") \
                            ", " j " uses " \
                            (((j, i) in why) ? why[j, i] : "(through others)")
            }')
        if [ -n "$cycles" ]; then
            while read -r c; do breach "a circle of calls: $c"; done <<<"$cycles"
        fi
    fi
fi

[ $fail = 0 ] && echo "check-layers: ok"
exit $fail
