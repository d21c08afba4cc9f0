#!/usr/bin/env bash
# libsharp_coll's exported symbols are exactly those debian/libsharp-coll1.symbols
# lists, so a new API function fails here, in make check, rather than at
# dpkg-gensymbols in make deb. And the check catches a symbol added to the
# library and one removed from the file, each planted in a copy.
set -uo pipefail
O=${O:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
LIB=$SRC/$O/lib/libsharp_coll.so.1
SYMS=$SRC/debian/libsharp-coll1.symbols
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

[ -r "$LIB" ] || { echo "FAIL: no $LIB (build first)"; exit 1; }

exported() { # LIB: NAME@VERSION of each defined dynamic symbol
    nm -D --defined-only --with-symbol-versions "$1" |
        awk '$2 ~ /^[ATDBRVWi]$/ {
            s = $3; sub(/@@/, "@", s)
            if (s !~ /@/) s = s "@" s   # the version node itself
            print s
        }' | sort -u
}
listed() { # SYMBOLS-FILE: NAME@VERSION of each line that names a symbol
    awk '/^ [^ ]+@[^ ]+ / { print $1 }' "$1" | sort -u
}
compare() { # EXPORTED-LIST LISTED-LIST: prints the differences, fails on any
    local d
    d=$(diff <(echo "$1" | sort) <(echo "$2" | sort) |
        sed -n 's/^< /exported, not in the symbols file: /p; s/^> /in the symbols file, not exported: /p')
    [ -z "$d" ] && return 0
    echo "$d"
    return 1
}

E=$(exported "$LIB")
L=$(listed "$SYMS")
[ "$(echo "$E" | grep -c .)" -gt 20 ] || bad "only $(echo "$E" | grep -c .) symbols read from $LIB"
if out=$(compare "$E" "$L"); then
    ok "$(echo "$E" | grep -c .) exported symbols, all in $(basename "$SYMS")"
else
    bad "$LIB and $SYMS differ:"; echo "$out"
fi

# the check catches each kind of difference
if out=$(compare "$E"$'\nsharp_coll_new_thing@SHARP_COLL_1' "$L"); then
    bad "a new exported symbol was not caught"
else
    ok "caught: $out"
fi
if out=$(compare "$E" "$(echo "$L" | grep -v '^sharp_coll_comm_init@')"); then
    bad "a symbol missing from the file was not caught"
else
    ok "caught: $out"
fi
exit $((fails > 0))
