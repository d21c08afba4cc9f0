#!/usr/bin/env bash
# The partition runs of make check-partitions (tests/partition/nemesis.py):
# PARTITION_RUNS (1) runs of PARTITION_SECONDS (60) of nemeses each, on a
# --netns fabric with two managers, the first seeded with PARTITION_SEED
# (default: from the clock; each printed) and the next ones with the
# following seeds; every history read by checker.py.  Stops at the first
# run that fails (its seed, schedule and first violated invariant are
# printed; the history is kept under $O/tests/partition/).  Last line: the
# runs' figures (operations recorded, nemeses applied, MPI jobs, the
# longest settling after a heal).
# Skips (77) unless root with iproute2, nftables and MPICH.
set -u
O=${O:-build}
[ "$(id -u)" = 0 ] || { echo "skip: needs root (network namespaces)"; exit 77; }
for c in ip nft mpiexec.mpich python3; do
    command -v $c >/dev/null || { echo "skip: needs $c"; exit 77; }
done
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mkdir -p "$O/tests/partition" && cd "$O/tests/partition" && pwd)
runs=${PARTITION_RUNS:-1}
secs=${PARTITION_SECONDS:-60}
seed=${PARTITION_SEED:-}
[ -n "$seed" ] || seed=$(($(date +%s) % 100000))
ops=0 nem=0 jobs=0 worst=0
for ((i = 0; i < runs; i++)); do
    s=$((seed + i))
    log=$OUT/run-$s.out
    O=$O python3 "$HERE/nemesis.py" --seed "$s" --seconds "$secs" \
        --history "$OUT/run-$s.history.jsonl" >"$log" 2>&1
    rc=$?
    cat "$log"
    [ $rc = 0 ] || { echo "FAIL: run $((i + 1)) of $runs (seed $s)"; exit 1; }
    rm -f "$OUT/run-$s.history.jsonl"
    r=$(grep '^RESULT partition_seed' "$log")
    v() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$r"; }
    ops=$((ops + $(v answered))) nem=$((nem + $(v nemeses))) jobs=$((jobs + $(v mpi_jobs)))
    worst=$(python3 -c "print(max($worst, $(v settle_max_s)))")
done
echo "partitions: $runs runs of $secs s (seeds $seed..$((seed + runs - 1))) passed:" \
    "$ops requests answered, $nem nemeses, $jobs MPI jobs right, longest settling after a heal ${worst} s"
