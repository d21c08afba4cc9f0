#!/usr/bin/env bash
# The Slurm integration against real Slurm daemons on this machine: munged,
# slurmctld and slurmd (one node, n00001, declaring 4 CPUs) are this test's
# own processes with a private configuration, state under a temporary
# directory and ports of their own; sharp's SPANK plugin is in their
# plugstack.  A sharp fabric (sharp-fabric on 127.28) serves host n00001.
#   1. srun of 4 ranks allreducing through libsharp_coll: every result
#      right, the AN's counters grew by the job's operations, the job was
#      reserved under Slurm's job id with the plugin's quotas and is gone at
#      the manager once Slurm ends it.
#   2. a batch job of user nobody whose step runs allreduces until scancel:
#      while it runs the manager holds it for nobody's uid (reserved, one
#      group); after scancel it is gone, no AN serves a group.
#   3. a batch job that fails (exit 3): released too.
#   4. a batch job of two steps, the manager killed -9 and started again
#      between them: its reservation comes back from the manager's state
#      database, the second step attaches and allreduces, and it is released.
# Skips (77) when Slurm's packages are missing, or when not root (slurmd
# must run as root to start jobs).
set -u
O=${O:-build}
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
RANK=$(cd "$O/tests/plugins/slurm" && pwd)/slurm_rank
for p in munged slurmctld slurmd srun sbatch scancel squeue scontrol; do
    command -v "$p" >/dev/null || { echo "skip: $p not installed (make deps)"; exit 77; }
done
[ -f /usr/include/slurm/spank.h ] || { echo "skip: libslurm-dev not installed"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skip: slurmd must run as root"; exit 77; }
[ -x "$LIB/spank_sharp.so" ] || { echo "no $LIB/spank_sharp.so"; exit 1; }

NET=127.28
CTLD_PORT=28817
SLURMD_PORT=28818
OOB=$NET.200.9:28819
DIR=$(mktemp -d /tmp/sharp-test-slurm.XXXXXX)
chmod 755 "$DIR"
export SLURM_CONF=$DIR/etc/slurm.conf
fabric() { "$BIN/sharp-fabric" --dir "$DIR/fabric" "$@"; }
ctl() { "$BIN/sharpctl" --socket "$DIR/fabric/am.sock" "$@"; }
pids=()
cleanup() {
    scancel --quiet --full "--name=sharp-test" 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
    done
    fabric down >/dev/null 2>&1
    if [ -n "${KEEP_LOGS:-}" ]; then echo "logs kept in $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
fails=0
check() { # DESCRIPTION COMMAND...
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
# wait_for SECONDS COMMAND...: until COMMAND succeeds; 1 on timeout
wait_for() {
    local n=$(($1 * 10))
    shift
    for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
    return 1
}
die() {
    echo "FAIL $*"
    for f in "$DIR"/log/*.log; do echo "--- $f"; tail -n 30 "$f"; done
    exit 1
}

# the fabric ------------------------------------------------------------------
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft.ibnd"
export SHARP_AM_STATS_INTERVAL=200ms
fabric up "$DIR/ft.ibnd" --net $NET >/dev/null || die "sharp-fabric up"
SOCK=$DIR/fabric/hosts/n00001.sock
[ -S "$SOCK" ] || die "no sharpd socket for n00001"

# munge and Slurm -----------------------------------------------------------------
mkdir -p "$DIR"/{munge,munge-run,etc,ctld,spool/n00001,log,tmp,run}
chmod 1777 "$DIR/run" # job 2 runs as nobody
chmod 700 "$DIR/munge"
head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
chmod 400 "$DIR/munge/munge.key"
MUNGE_SOCK=$DIR/munge-run/munge.socket # every user (the key stays 0700)
munged --force --foreground --socket="$MUNGE_SOCK" \
    --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munge/munged.pid" \
    --seed-file="$DIR/munge/seed" --log-file="$DIR/log/munged.log" &
pids+=($!)
wait_for 10 test -S "$MUNGE_SOCK" || die "munged did not start"

HOST=$(hostname -s)
cat >"$SLURM_CONF" <<CONF
ClusterName=sharptest
SlurmctldHost=$HOST($NET.200.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/ctld/slurmctld.pid
SlurmdPidFile=$DIR/spool/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$DIR/tmp
PlugStackConfig=$DIR/etc/plugstack.conf
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
ReturnToService=2
KillWait=2
MessageTimeout=10
InactiveLimit=0
MinJobAge=300
NodeName=n00001 NodeAddr=$NET.200.2 CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=sharp Nodes=n00001 Default=YES MaxTime=INFINITE State=UP
CONF
cat >"$DIR/etc/plugstack.conf" <<CONF
required $LIB/spank_sharp.so sharpd_socket=$SOCK osts=8 max_groups=4 timeout=10
CONF

slurmctld -D -i -f "$SLURM_CONF" >"$DIR/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N n00001 -f "$SLURM_CONF" >"$DIR/log/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { sinfo -h -n n00001 -o %T 2>/dev/null | grep -q '^idle'; }
wait_for 60 node_idle || die "node n00001 not idle: $(sinfo -h -o '%T %E' 2>&1)"
echo "ok   slurmctld and slurmd up, node n00001 idle"

ans_ops() { ctl ans --json | jq '[.[].ops] | add'; }
ops_at_least() { [ "$(ans_ops)" -ge "$1" ]; }
an_groups() { ctl ans --json | jq '[.[].groups] | add'; }
no_an_groups() { [ "$(an_groups)" = 0 ]; }
job_at_am() { ctl jobs --json | jq -e --arg j "$1" 'any(.[]; (.job_id | tostring) == $j)' >/dev/null; }
job_gone() { ! job_at_am "$1"; }
begun() { ctl stats --json | jq .jobs_begun; }

# 1. srun: 4 ranks, 20 allreduces each --------------------------------------------
ops0=$(ans_ops)
begun0=$(begun)
out=$(SHARP_TEST_OOB=$OOB timeout 120 srun -J sharp-test -N1 -n4 "$RANK" 20 2>"$DIR/log/srun1.err")
rc=$?
echo "$out" | sed 's/^/    /'
check "srun: 4 ranks, every allreduce right (exit $rc)" \
    bash -c "[ $rc = 0 ] && [ \$(echo '$out' | grep -c ' 20 allreduces ok') = 4 ]"
[ $rc = 0 ] || cat "$DIR/log/srun1.err"
jid1=$(echo "$out" | sed -n 's/^rank 0: job \([0-9]*\).*/\1/p')
check "the ranks' job is Slurm's job id ($jid1)" test -n "$jid1"
check "the manager admitted one job for it" test "$(begun)" = $((begun0 + 1))
check "slurmd's log: the plugin reserved it" \
    grep -q "spank_sharp: job $jid1 (uid 0): sharp resources reserved: 4 groups, 8 OSTs" "$DIR/log/slurmd.log"
wait_for 5 ops_at_least $((ops0 + 20))
check "sharp carried it: the ANs counted >= 20 more operations ($ops0 -> $(ans_ops))" \
    test "$(ans_ops)" -ge $((ops0 + 20))
check "job $jid1 released at the manager after it ended" wait_for 20 job_gone "$jid1"
check "slurmd's log: the plugin released it" \
    grep -q "spank_sharp: job $jid1: sharp resources released" "$DIR/log/slurmd.log"

# 2. scancel of a running job ------------------------------------------------------
NOBODY=$(id -u nobody)
jid2=$(SHARP_TEST_OOB=$OOB sbatch --parsable -J sharp-test -N1 -n4 --uid=nobody \
    --gid="$(id -g nobody)" -D "$DIR/run" -o "$DIR/run/job2.out" \
    --wrap "srun $RANK loop $DIR/run/started")
check "sbatch as nobody: job $jid2 submitted" test -n "$jid2"
wait_for 60 test -e "$DIR/run/started" || { cat "$DIR/run/job2.out"; die "job $jid2 never allreduced"; }
check "running: the manager holds job $jid2 for nobody: reserved, 8 OSTs, 4 groups at most, 1 group" \
    test "$(ctl jobs --json | jq -c --arg j "$jid2" '.[] | select((.job_id | tostring) == $j) | [.reserved, .uid, .osts, .max_groups, .groups]')" = "[true,$NOBODY,8,4,1]"
check "running: sharpctl jobs says it is reserved" \
    test "$(ctl jobs | awk -v j="$jid2" '$1 == j { print $NF }')" = yes
check "running: an AN serves its group" test "$(an_groups)" -ge 1
ops1=$(ans_ops)
check "running: its allreduces go through the ANs" wait_for 5 ops_at_least $((ops1 + 10))
scancel "$jid2"
check "scancel: job $jid2 released at the manager" wait_for 30 job_gone "$jid2"
check "scancel: no AN serves a group" wait_for 5 no_an_groups
check "scancel: Slurm says CANCELLED" \
    bash -c "scontrol show job $jid2 | grep -q 'JobState=CANCELLED'"

# 3. a failing job ------------------------------------------------------------------------
jid3=$(SHARP_TEST_OOB=$OOB sbatch --parsable -J sharp-test -N1 -n4 -o "$DIR/log/job3.out" \
    --wrap "srun $RANK 5; exit 3")
job3_done() { scontrol show job "$jid3" | grep -q 'JobState=FAILED'; }
check "failing job $jid3: Slurm says FAILED" wait_for 90 job3_done
check "failing job $jid3: its step allreduced before" \
    test "$(grep -c ' 5 allreduces ok' "$DIR/log/job3.out")" = 4
check "failing job $jid3: released at the manager" wait_for 30 job_gone "$jid3"

# 4. the manager killed -9 between two steps of a job ---------------------------------
# (as systemd's Restart= would start it again: same state database) the
# job's reservation is there again and the second step attaches to it
jid4=$(SHARP_TEST_OOB=$OOB sbatch --parsable -J sharp-test -N1 -n4 -D "$DIR/run" \
    -o "$DIR/log/job4.out" --wrap "srun $RANK 5 && touch $DIR/run/step1 &&
        while [ ! -e $DIR/run/go ]; do sleep 0.1; done && srun $RANK 5")
wait_for 90 test -e "$DIR/run/step1" || { cat "$DIR/log/job4.out"; die "job $jid4: no first step"; }
check "two steps: after the first, the manager holds job $jid4" job_at_am "$jid4"
sd_regs() { grep -c "sharpd of host n00001 .*registered" "$DIR/fabric/logs/am.log"; }
regs=$(sd_regs)
fabric kill sharp_am >/dev/null
fabric start sharp_am >/dev/null
check "the manager killed -9 and started again: n00001's sharpd registered again" \
    wait_for 100 bash -c "[ \$(grep -c 'sharpd of host n00001 .*registered' '$DIR/fabric/logs/am.log') -gt $regs ]"
check "the restarted manager holds job $jid4: reserved, for root, 8 OSTs (its state database)" \
    test "$(ctl jobs --json | jq -c --arg j "$jid4" '.[] | select((.job_id | tostring) == $j) | [.reserved, .uid, .osts]')" = "[true,0,8]"
touch "$DIR/run/go"
job4_done() { scontrol show job "$jid4" | grep -q 'JobState=COMPLETED'; }
check "job $jid4: Slurm says COMPLETED" wait_for 90 job4_done
check "job $jid4: both steps allreduced, the second through the restarted manager" \
    test "$(grep -c ' 5 allreduces ok' "$DIR/log/job4.out")" = 8
check "job $jid4: released at the manager" wait_for 30 job_gone "$jid4"

check "nothing left at the manager: no job, no group" \
    test "$(ctl stats --json | jq -c '[.jobs, .groups]')" = "[0,0]"
san=$(grep -l 'Sanitizer' "$DIR"/fabric/logs/* "$DIR"/log/* "$DIR"/run/*.out 2>/dev/null)
check "no sanitizer report in any daemon's or rank's output" test -z "$san"
if [ "$fails" -ne 0 ]; then
    for f in "$DIR"/log/*; do echo "--- $f"; tail -n 20 "$f"; done
fi
echo "slurm: $fails failed"
[ "$fails" = 0 ]
