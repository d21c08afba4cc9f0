#!/usr/bin/env bash
# The checker catches each fault planted in the daemons (make
# check-partitions PLANT=1: a build with core/plant.h's faults compiled
# in): one nemesis run per fault, with the nemesis that exposes it, must
# fail on the invariant that fault breaks:
#   stay_active    the managers cut from each other; the old active does
#                  not step down after the heal        -> settles
#   same_epoch     the managers cut; the standby takes over at the epoch
#                  it knows                            -> one_active_per_epoch
#   forget_epoch   the active manager killed; it starts again at epoch 0
#                                                      -> epochs_grow
#   group_ids      two halves, a manager each, 12-20 s for 60 s (the
#                  standby's half must come to it and make groups); the
#                  managers share one id space and the new active gives
#                  ids from its predecessor's last
#                                                      -> group_ids_unique
#                  (and an_booking: an AN holds the first group of an id
#                  the second was acknowledged with)
#   same_key       every job the same key              -> job_keys_unique
#   silent_revoke  an AN isolated; its groups revoked, the jobs not told
#                  (only when a revoked group is still held at the end)
#                                                      -> no_silent_loss
#   mute_sharpd    the active manager cut from the nodes; sharpd leaves a
#                  group_create it cannot pass on unanswered -> answered
#   an_leak        the ANs keep removed groups         -> no_leak
#   wrong          one result in 97 has a bit flipped  -> mpi_right
# (mpi_bound is shown on planted histories only, test_checker.py.)
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
while read -r plant kinds inv hold s; do
    log=$OUT/planted-$plant.out
    O=$O python3 "$HERE/nemesis.py" --seed 1 --seconds "${s:-$secs}" --kinds "$kinds" \
        --hold "${hold:-1,10}" \
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
stay_active managers settles
same_epoch managers one_active_per_epoch
forget_epoch kill_am epochs_grow
group_ids halves group_ids_unique 12,20 60
same_key managers job_keys_unique
silent_revoke an_isolated no_silent_loss 1,10 40
mute_sharpd active_cut answered
an_leak managers no_leak
wrong managers mpi_right
PLANTS
[ $fails = 0 ]
