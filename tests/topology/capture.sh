#!/usr/bin/env bash
# Regenerate the ibnetdiscover captures in tests/topology/data from the ibsim net
# files (run by developers when a fabric is added; the captures are kept).
#   bash tests/topology/capture.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
topo=${1:-build}/bin/sharp-topo
source "$here/ibsim.sh"
ibsim_available || { echo "capture: ibsim/opensm/ibnetdiscover missing" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'ibsim_stop; rm -rf "$scratch"' EXIT

"$topo" fat-tree --levels 2 --radix 8 --hosts 32 --ibsim >"$here/fat-tree-2l.net"
for net in "$here"/*.net; do
    name=$(basename "$net" .net)
    ibsim_start "$net" "$scratch/$name"
    ibsim_sm
    ibsim_run ibnetdiscover 2>/dev/null >"$here/data/$name.ibnd"
    ibsim_stop
    "$topo" check "$here/data/$name.ibnd"
done
