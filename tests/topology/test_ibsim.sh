#!/usr/bin/env bash
# The stored captures are what real ibnetdiscover says about the ibsim
# fabrics today: bring each fabric up (ibsim + opensm --once), discover it,
# and compare with the capture (GUIDs, types, descriptions, every link).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
topo=${SHARP_BIN:-${O:-build}/bin}/sharp-topo
source "$here/ibsim.sh"
if ! ibsim_available; then
    echo "SKIP: ibsim, opensm or ibnetdiscover not installed (make deps)"
    exit 77
fi
scratch=$(mktemp -d)
trap 'ibsim_stop; rm -rf "$scratch"' EXIT
rc=0
for net in "$here"/*.net; do
    name=$(basename "$net" .net)
    ibsim_start "$net" "$scratch/$name" || exit 1
    if ! ibsim_sm; then
        echo "FAIL $name: opensm could not bring the subnet up"
        cat "$scratch/$name/opensm.out"
        rc=1
    fi
    ibsim_run ibnetdiscover >"$scratch/$name.ibnd" 2>"$scratch/$name.err"
    ibsim_stop
    if "$topo" diff "$here/data/$name.ibnd" "$scratch/$name.ibnd"; then
        echo "ok   $name: live ibnetdiscover matches the capture"
    else
        echo "FAIL $name"
        rc=1
    fi
done
exit $rc
