#!/usr/bin/env bash
# make bench-mpi runs whole, as a user runs it (its defaults: every
# section, the multicast tags' cost with its second build included), in a
# tiny mode: one round, a hundredth of the iterations, the scale section
# at 8 ranks and 2 per host.  Every RESULT key it promises must come out
# a number: a section that rots (a path, a file name, a key) fails here.
set -u
O=${O:-build}
if [ "${SAN:-0}" = 1 ]; then
    echo "skip: the benchmark preloads libsharp_mpi into uninstrumented MPI" \
        "programs; run without SAN=1"
    exit 77
fi
command -v mpirun.openmpi >/dev/null || { echo "skip: no Open MPI"; exit 77; }
out=$(mktemp /tmp/sharp-test-bench.XXXXXX)
trap 'rm -f "$out"' EXIT
SHARP_BENCH_ROUNDS=1 SHARP_BENCH_SPARSE_ROUNDS=1 SHARP_BENCH_SCALE=0.01 SHARP_BENCH_SCALE_NPS=8 \
    SHARP_BENCH_SCALE_PPNS=2 timeout 1200 bash bench/mpi.sh "$O" >"$out" 2>&1
rc=$?
result=$(grep '^RESULT ' "$out" | tail -1)
fails=0
dups=$(echo "$result" | tr ' ' '\n' | sed -n 's/=.*//p' | sort | uniq -d)
[ -z "$dups" ] || { echo "FAIL keys printed twice: $dups"; fails=1; }
[ "$rc" = 0 ] || { echo "FAIL bench/mpi.sh exited $rc"; fails=1; }
for key in mpi_allreduce_8B_np8_vs_tcp mpi_allreduce_8B_np16_vs_tcp \
    mpi_allreduce_4K_np8_vs_tcp mpi_iallreduce_8B_np8_vs_tcp \
    mpi_allreduce_1M_np8_vs_tcp mpi_allreduce_1M_np8_barrier_vs_tcp \
    mpi_allreduce_4M_np8_barrier_vs_tcp mpi_cpu_per_op_np8_vs_tcp \
    mpi_allreduce_1M_np8_barrier_stripes_vs_one \
    mpi_allreduce_4M_np8_barrier_stripes_vs_one \
    mpi_barrier_np8_vs_tcp mpi_layer_ns mpi_allreduce_8B_np8_shm_vs_shm \
    mpi_allreduce_8B_np16_shm_vs_shm mpi_mcast_mac_8B_vs_untagged \
    mpi_mcast_mac_1M_vs_untagged mpi_allreduce_8B_np8_vs_shm \
    mpi_node_aggr_8B_ppn2_vs_per_process mpi_allreduce_1M_np16_vs_tcp \
    mpi_allreduce_1M_np8_shm_vs_shm mpi_bcast_8B_np8_shm_vs_shm \
    mpi_bcast_1M_np8_vs_tcp mpi_barrier_np8_shm_vs_shm \
    mpi_iallreduce_8B_np8_shm_vs_shm mpi_bcast_8B_np8_vs_shm \
    mpi_allreduce_16M_np8_density1_vs_tcp mpi_allreduce_16M_np8_density10_vs_tcp \
    mpi_allreduce_16M_np8_density100_vs_dense mpi_allreduce_1M_np8_density1_vs_tcp; do
    v=$(echo "$result" | tr ' ' '\n' | sed -n "s/^$key=//p")
    # the machine's CPU per operation comes from /proc/stat's 10 ms ticks:
    # a tiny run may see none (nan), but the key must be there
    [ "$key" = mpi_cpu_per_op_np8_vs_tcp ] && [ "$v" = nan ] && continue
    if ! [[ "$v" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
        echo "FAIL $key: '${v:-missing}'"
        fails=$((fails + 1))
    fi
done
if [ $fails -ne 0 ]; then
    tail -30 "$out"
    exit 1
fi
echo "ok   bench/mpi.sh ran whole in tiny mode; every RESULT key a number"
echo "$result"
