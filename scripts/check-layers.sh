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
man: core libsharp
bench: core reduce protocol transport topology an am sharpd libsharp mpi-coll cli tests/support
'

DIR=.
OBJS=
while [ $# -gt 0 ]; do
    case $1 in
    -C) DIR=$2; shift 2 ;;
    --objects) OBJS=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
        ) | awk '
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
                    if (i < j && ((i, j) in r) && ((j, i) in r))
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
