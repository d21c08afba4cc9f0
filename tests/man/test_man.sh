#!/usr/bin/env bash
# The manual pages (man/, built into $O/man):
#  - every installed program has a page in section 1 or 8, each daemon's
#    configuration file one in section 5, libsharp_coll sharp_coll(3) and
#    the MPI layer libsharp_mpi(7);
#  - groff renders each with every warning on (-ww) and says nothing;
#  - every option --help lists is in the program's page; every command of
#    sharpctl, sharp-topo and sharp-fabric too; every key --dump-config
#    prints is in the file's page with its environment name; every
#    SHARP_COLL_* setting of the library's table is in sharp_coll(3); every
#    variable the MPI layer reads is in libsharp_mpi(7);
#  - the check itself fails on a page with one option taken out;
#  - make install-man puts them under MANDIR/manN, where man finds them.
set -u
O=${O:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC"
M=$O/man
B=$O/bin
T=$(mktemp -d /tmp/sharp-test-man.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
check() {
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
command -v groff >/dev/null || { echo "skip: no groff"; exit 77; }

# the page as plain text on long lines, words never hyphenated
render() {
    LC_ALL=C groff -t -man -Tascii -P-c -P-b -P-u -rLL=300n "$1" 2>/dev/null |
        tr -s ' '
}
# has TEXT WORD: WORD in TEXT, not as part of a longer option or name
has() {
    grep -qE -- "(^|[^A-Za-z0-9_-])$(printf '%s' "$2" | sed 's/[.[\*^$|]/\\&/g')([^A-Za-z0-9_-]|$)" <<<"$1"
}
# missing PAGE WORD...: prints the words the page lacks
missing() {
    local text w out=()
    text=$(render "$1")
    shift
    for w in "$@"; do has "$text" "$w" || out+=("$w"); done
    echo "${out[*]}"
}
covers() { # DESCRIPTION PAGE WORD...
    local d=$1 page=$2 m
    shift 2
    m=$(missing "$page" "$@")
    [ -z "$m" ] || echo "     $page lacks: $m"
    check "$d ($# names)" test -z "$m"
}
# options of a --help text: every --word
help_opts() { grep -oE -- '(^|[^A-Za-z0-9-])--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z0-9-]+' | sort -u; }
# commands of a --help text: the lower-case words leading each entry under
# "Commands:" (up to the first argument), e.g. "topology load"
help_cmds() {
    sed -n '/^Commands:/,/^$/p' | grep -E '^  [a-z]' |
        sed -E 's/^  //; s/(  |[^a-z -]).*//; s/ [A-Za-z]*[A-Z][A-Za-z]*.*//; s/ +$//' | sort -u
}

bins=$(make -s --no-print-directory O="$O" print-INST_BINS)
pages=()
for b in $bins; do
    n=$(basename "$b")
    p=""
    for s in 8 1; do [ -f "$M/$n.$s" ] && p=$M/$n.$s; done
    check "$n has a page in section 1 or 8" test -n "$p"
    [ -n "$p" ] && pages+=("$p")
done
for d in sharp_am sharp_an sharpd; do
    check "$d.conf(5) exists" test -f "$M/$d.conf.5"
done
check "sharp_coll(3) exists" test -f "$M/sharp_coll.3"
check "libsharp_mpi(7) exists" test -f "$M/libsharp_mpi.7"

# groff with all warnings: nothing on stderr
for p in "$M"/*.[0-9]; do
    w=$(LC_ALL=C.UTF-8 groff -t -man -ww -z -Tutf8 "$p" 2>&1)
    [ -z "$w" ] || echo "$w" | sed 's/^/     /'
    check "$(basename "$p") renders without warnings (groff -ww)" test -z "$w"
done

# every option of --help (and command) in the program's page
for b in $bins; do
    n=$(basename "$b")
    p=$(ls "$M/$n".[18] 2>/dev/null | head -1)
    [ -n "$p" ] || continue
    help=$(env -i PATH="$PATH" "$b" --help 2>&1)
    mapfile -t opts < <(help_opts <<<"$help")
    check "$n --help lists options" test "${#opts[@]}" -gt 0
    covers "$n: every option of --help in $(basename "$p")" "$p" "${opts[@]}"
    mapfile -t cmds < <(help_cmds <<<"$help")
    if [ "${#cmds[@]}" -gt 0 ]; then
        covers "$n: every command of --help in $(basename "$p")" "$p" "${cmds[@]}"
    fi
done
check "sharpctl's commands were found in its --help" \
    test "$(env -i "$B/sharpctl" --help | help_cmds | wc -l)" -ge 10

# every key of --dump-config, with its environment name, in NAME.conf(5)
for d in sharp_am sharp_an sharpd; do
    case $d in sharp_am) e=SHARP_AM_ ;; sharp_an) e=SHARP_AN_ ;; sharpd) e=SHARPD_ ;; esac
    mapfile -t keys < <(env -i "$B/$d" --dump-config --config /dev/null |
        sed -n 's/^\([a-z_][a-z_0-9]*\) = .*/\1/p')
    envs=()
    for k in "${keys[@]}"; do envs+=("$e${k^^}"); done
    check "$d --dump-config has keys" test "${#keys[@]}" -gt 5
    covers "$d: every key of --dump-config in $d.conf.5" "$M/$d.conf.5" "${keys[@]}" "${envs[@]}"
done

# the library's SHARP_COLL_* table, read from its source
mapfile -t coll < <(sed -n '/coll_opts\[\] = {/,/{NULL}/p' libsharp/coll_ctx.c |
    sed -n 's/^ *{"\([a-z_0-9]*\)",.*/\1/p' | tr a-z A-Z | sed 's/^/SHARP_COLL_/')
check "libsharp_coll's table has settings" test "${#coll[@]}" -gt 10
covers "every SHARP_COLL_* setting in sharp_coll.3" "$M/sharp_coll.3" "${coll[@]}"

# every variable the MPI layer and libsharp_yield read: the rows of the
# layer's table (SHARP_MPI_ and the name in capitals) and the names its
# files spell out
mapfile -t mpivars < <({ sed -n 's/^ *ROW("\([a-z_0-9]*\)",.*/\1/p' mpi-coll/settings_table.c |
    tr a-z A-Z | sed 's/^/SHARP_MPI_/'
    grep -ohE '"SHARP_(MPI|YIELD|FABRIC)_[A-Z0-9_]+"' mpi-coll/*.c | tr -d '"'; } |
    sort -u)
check "the MPI layer reads variables" test "${#mpivars[@]}" -gt 8
covers "every variable of mpi-coll/ in libsharp_mpi.7" "$M/libsharp_mpi.7" "${mpivars[@]}"

# the check can fail: sharp_an.8 without its --max-osts entry
awk '/^\\fB\\-\\-max\\-osts/ { skip = 1; next } skip && /^\.TP/ { skip = 0 } !skip' \
    "$M/sharp_an.8" >"$T/cut.8"
m=$(missing "$T/cut.8" --max-osts --max-trees)
check "a page without --max-osts is found lacking it (and only it)" test "$m" = "--max-osts"

# install-man: MANDIR/manN, found by man
make -s --no-print-directory O="$O" install-man DESTDIR="$T/stage" PREFIX=/usr >/dev/null
for p in "$M"/*.[0-9]; do
    n=$(basename "$p")
    check "install-man: /usr/share/man/man${n##*.}/$n" \
        test -f "$T/stage/usr/share/man/man${n##*.}/$n"
done
check "man finds sharp_an(8) in the staged MANDIR" \
    test "$(MANPATH=$T/stage/usr/share/man man -w sharp_an 2>/dev/null)" = \
    "$T/stage/usr/share/man/man8/sharp_an.8"

echo "test_man: $fails failure(s)"
[ "$fails" = 0 ]
