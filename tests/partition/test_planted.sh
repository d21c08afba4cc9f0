#!/usr/bin/env bash
# The checker catches each fault planted in the daemons (make
# check-partitions PLANT=1: a build with core/plant.h's faults compiled
# in): one nemesis run per fault, with the nemesis that exposes it, must
# fail on the invariant that fault breaks:
#   epoch          the managers cut from each other; the old active does
#                  not step down after the heal        -> settles
#   group_ids      two halves, a manager each; the new active gives ids
#                  without the margin                  -> group_ids_unique
#   silent_revoke  an AN isolated; its groups revoked, the jobs not told
#                                                      -> no_silent_loss
#   an_leak        the ANs keep removed groups         -> no_leak
#   wrong          one result in 97 has a bit flipped  -> mpi_right
# Skips (77) unless root with iproute2, nftables and MPICH.
set -u
O=${O:-build/plant}
[ "$(id -u)" = 0 ] || { echo "skip: needs root (network namespaces)"; exit 77; }
for c in ip nft mpiexec.mpich python3; do
    command -v $c >/dev/null || { echo "skip: needs $c"; exit 77; }
done
grep -q SHARP_PLANT "$O/bin/sharp_am" ||
    { echo "FAIL: $O is not a PLANT=1 build (make check-partitions PLANT=1)"; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mkdir -p "$O/tests/partition" && cd "$O/tests/partition" && pwd)
secs=${PARTITION_SECONDS:-40}
fails=0
while read -r plant kinds inv; do
    log=$OUT/planted-$plant.out
    O=$O python3 "$HERE/nemesis.py" --seed 1 --seconds "$secs" --kinds "$kinds" \
        --plant "$plant" --history "$OUT/planted-$plant.history.jsonl" </dev/null >"$log" 2>&1
    rc=$?
    violated=$(sed -n 's/^RESULT .* violated=\([a-z_,]*\).*/\1/p' "$log")
    first=$(grep -m1 '^FIRST VIOLATION' "$log")
    if [ $rc = 1 ] && [[ ",$violated," == *",$inv,"* ]]; then
        echo "ok   $plant caught: $inv (violated: $violated)"
        echo "     $first"
    else
        echo "FAIL $plant: expected $inv, the run said violated=${violated:-?} (exit $rc)"
        tail -20 "$log"
        fails=$((fails + 1))
    fi
done <<'PLANTS'
epoch managers settles
group_ids halves group_ids_unique
silent_revoke an_isolated no_silent_loss
an_leak managers no_leak
wrong managers mpi_right
PLANTS
[ $fails = 0 ]
