#!/usr/bin/env bash
# page.sh IN OUT [COMMAND ...]: IN with its line `@OPTIONS@` replaced by what
# COMMAND prints (roff from a program's option table), into OUT.  A page
# with a command must have that line, one without must not.
set -euo pipefail
in=$1 out=$2
shift 2
n=$(grep -c '^@OPTIONS@$' "$in" || true)
if [ $# -gt 0 ]; then
    [ "$n" = 1 ] || { echo "$in: needs one line @OPTIONS@" >&2; exit 1; }
    opts=$(env -i "$@")
    [ -n "$opts" ] || { echo "$in: '$*' printed nothing" >&2; exit 1; }
else
    [ "$n" = 0 ] || { echo "$in: @OPTIONS@ but no program for it" >&2; exit 1; }
    opts=
fi
OPTS=$opts awk '$0 == "@OPTIONS@" { print ENVIRON["OPTS"]; next } { print }' \
    "$in" >"$out"
