#!/usr/bin/env bash
# scripts/check-layers.sh: the tree as it stands keeps to its layering (its
# includes and, from the build's objects, its calls); and the check fails on
# what it is there to catch, each planted in a copy: an include that points
# up, a provider that includes another, a .c file included, product code
# that includes a test, a file over 800 lines, a function over 80 lines,
# and two files that call each other; and the same size breaches in tests/
# (exempt, with its reason in the script's table) pass.
set -uo pipefail
O=${O:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CHECK=$SRC/scripts/check-layers.sh
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# the tree itself
if out=$(bash "$CHECK" -C "$SRC" --objects "$SRC/$O/obj" 2>&1); then
    ok "the tree keeps to its layers"
else
    bad "the tree breaks its layers:"; echo "$out"
fi

# planted breaches, one copy each; every one must be named
plant() { # NAME FILE LINE EXPECTED
    local t=$D/$1
    mkdir -p "$t"
    (cd "$SRC" && git ls-files '*.c' '*.h' '*.inc' | tar -cf - -T -) | tar -C "$t" -xf -
    printf '%s\n' "$3" >>"$t/$2"
    if out=$(bash "$CHECK" -C "$t" 2>&1); then
        bad "$1: not caught"
    elif grep -q -- "$4" <<<"$out"; then
        ok "$1: $(grep -- "$4" <<<"$out" | head -1)"
    else
        bad "$1: caught, but not named as expected ($4):"; echo "$out"
    fi
}
plant upward core/log.c '#include "an/an.h"' 'core/log.c:.*core/ may not include an/'
plant sideways transport/tcp/tcp.c '#include "transport/shm/shm.h"' \
    'a transport includes another provider'
plant dot-c an/main.c '#include "an/an_ctl.c"' 'an/main.c:.*includes a .c file'
plant test-in-product libsharp/coll_ctx.c '#include "tests/support/test_util.h"' \
    'libsharp/coll_ctx.c:.*product code includes tests/'

# the size rules: a file grown past 800 lines, a function past 80
long_file=$(for i in $(seq 801); do echo "/* planted line $i */"; done)
long_func=$(printf 'int planted_long(int x);\nint planted_long(int x)\n{\n'
    for i in $(seq 80); do echo "    x += $i;"; done
    printf '    return x;\n}')
plant big-file core/log.c "$long_file" 'core/log.c: [0-9]* lines, over 800'
plant long-function core/log.c "$long_func" \
    'core/log.c:[0-9]*: planted_long() is 83 lines, over 80'

# the exempt: the same breaches in a test are not named
t=$D/exempt
mkdir -p "$t"
(cd "$SRC" && git ls-files '*.c' '*.h' '*.inc' | tar -cf - -T -) | tar -C "$t" -xf -
printf '%s\n%s\n' "$long_file" "$long_func" >>"$t/tests/core/test_status_log.c"
if bash "$CHECK" -C "$t" 2>&1 | grep -q 'tests/core/test_status_log.c'; then
    bad "a test's size was named: tests/ is exempt"
else
    ok "a long test and a long test function pass (tests/ is exempt)"
fi

# two objects that call each other
mkdir -p "$D/loop/src/core" "$D/loop/obj/core"
printf 'void b(void);\nvoid a(void) { b(); }\n' >"$D/loop/src/core/a.c"
printf 'void a(void);\nvoid b(void) { a(); }\n' >"$D/loop/src/core/b.c"
for f in a b; do
    cc -c "$D/loop/src/core/$f.c" -o "$D/loop/obj/core/$f.o"
done
if out=$(bash "$CHECK" -C "$D/loop/src" --objects "$D/loop/obj" 2>&1); then
    bad "a circle of calls: not caught"
elif grep -q 'a circle of calls: core/a.c <-> core/b.c' <<<"$out"; then
    ok "$(grep circle <<<"$out")"
else
    bad "a circle of calls: caught, but not named:"; echo "$out"
fi

[ $fails = 0 ] || exit 1
