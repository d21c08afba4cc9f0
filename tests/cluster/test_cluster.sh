#!/usr/bin/env bash
# The Debian packages run as a cluster runs them (make check-cluster):
# nine systemd containers (systemd-nspawn -b) booted from one root made by
# mmdebstrap with the packages' runtime dependencies, each in a network
# namespace of its own on one bridge (10.93.0.0/24, in namespaces this test
# makes: nothing leaves the machine):
#
#   sm1, sm2           sharp_am, active and standby (sharp-am, sharp-tools)
#   spine01, leaf01,   one AN each, sharp_an@NAME (sharp-an)
#   leaf02
#   n00001..n00004     sharpd, libsharp-coll1, sharp-mpi, Open MPI
#
# Each node gets the packages with apt-get install ./*.deb, its secret as
# docs/admin.md says (the managers the cluster secret, every AN and sharpd
# its node secret from `sharp_am --node-secret`), its configuration, and
# its daemon from `systemctl enable --now`.  Then, with MPI jobs whose
# ranks run in the compute containers (mpirun on this machine, in a
# namespace of the bridge, starts each orted in its container through
# tests/cluster/rsh-agent: nsenter into the container's namespaces):
#
#   1. a job, every result checked (sharp_mpi_demo), offloaded (sharpctl:
#      the ANs counted its operations; the MPI layer's report: no call on
#      MPI);
#   2. kill -9 of an AN, a sharpd and the active manager during a job:
#      systemd restarts each (NRestarts), the standby takes over, the job
#      finishes right;
#   3. systemctl stop of an AN during a job: a clean stop (status 0, no
#      SIGKILL), the manager ends its groups with a reason; the job
#      finishes right; errors reach the journal with their priority
#      (journalctl -u sharp_am -p err / -u sharpd -p err);
#   4. the units' hardening: every unit active, none failed, the state
#      and runtime directories made by systemd;
#   5. an upgrade in service: during a job, a newer build of the packages
#      (the same one, its version bumped: tests/cluster/bump-debs.sh)
#      installed node by node as docs/admin.md says (the standby manager,
#      the active one, each AN, each sharpd), each back before the next;
#      the job finishes right; its calls on MPI are counted and printed;
#   6. the control protocol's version: a peer one version ahead is
#      refused, and the manager's journal says why;
#   7. remove and purge on a compute node, an AN host and the standby:
#      nothing left running, no secret, no state left.
#
# Root only.  Environment: O (build dir, its deb/ holds the packages),
# SHARP_CLUSTER_DEBS (another directory of .debs, e.g. broken ones),
# SHARP_CLUSTER_CACHE (where the root is kept, /var/cache/sharp-cluster),
# KEEP=1 (leave the run directory O/cluster: logs, journals).
set -u
O=${O:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC"
HERE=$SRC/tests/cluster
[ "$(id -u)" = 0 ] || { echo "skip: boots containers: root only"; exit 77; }
D=${SHARP_CLUSTER_DEBS:-$O/deb}
D=$(cd "$D" 2>/dev/null && pwd) || { echo "FAIL no $D (make deb first)"; exit 1; }
for t in mmdebstrap systemd-nspawn nsenter ip mpirun.openmpi mpicc.openmpi; do
    command -v "$t" >/dev/null || { echo "FAIL $t missing (make deps-cluster)"; exit 1; }
done
CACHE=${SHARP_CLUSTER_CACHE:-/var/cache/sharp-cluster}
R=$(mkdir -p "$O/cluster" && cd "$O/cluster" && pwd)
NET=10.93.0
P=shc # network namespaces shc-NODE, the bridge's shc-br
MANAGERS=(sm1 sm2)
ANS=(spine01 leaf01 leaf02)
HOSTS=(n00001 n00002 n00003 n00004)
NODES=("${MANAGERS[@]}" "${ANS[@]}" "${HOSTS[@]}")
declare -A IP=([sm1]=$NET.1 [sm2]=$NET.2 [spine01]=$NET.11 [leaf01]=$NET.12
    [leaf02]=$NET.13 [n00001]=$NET.21 [n00002]=$NET.22 [n00003]=$NET.23
    [n00004]=$NET.24 [login]=$NET.250)
AMS="$NET.1:6126,$NET.2:6126"
L=/usr/lib/x86_64-linux-gnu
T0=$(date +%s)
fails=0
check() {
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
# a step everything after depends on: stop here when it fails
need() {
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); finish; fi
}
say() { echo "---- [$(($(date +%s) - T0)) s] $*"; }

mapfile -t debs < <(ls "$D"/*.deb 2>/dev/null | grep -v -- '-dbgsym_')
[ "${#debs[@]}" -ge 9 ] || { echo "FAIL the packages are not in $D (make deb)"; exit 1; }
VER=$(dpkg-deb -f "$(ls "$D"/sharp-common_*.deb | head -1)" Version)

# teardown ---------------------------------------------------------------------
teardown() {
    local n pid t
    for n in "${NODES[@]}"; do
        pid=$(cat "$R/nodes/$n/nspawn.pid" 2>/dev/null) || continue
        kill -TERM "$pid" 2>/dev/null # nspawn: the container powers off
    done
    for n in "${NODES[@]}"; do
        pid=$(cat "$R/nodes/$n/nspawn.pid" 2>/dev/null) || continue
        for t in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null
        rm -f "$R/nodes/$n/nspawn.pid"
    done
    for n in "${NODES[@]}"; do
        mountpoint -q "$R/nodes/$n/root" && umount "$R/nodes/$n/root"
    done
    for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$P-"); do
        ip netns del "$n" 2>/dev/null
    done
    rm -rf "/etc/netns/$P-login"
    for n in $CGROUPS; do
        [ -d "$n/sharp-cluster" ] && find "$n/sharp-cluster" -depth -type d -exec rmdir {} + 2>/dev/null
    done
}
finish() {
    # a job still running (interrupted): its mpirun, started here
    [ -n "${jp:-}" ] && pkill -TERM -P "$jp" 2>/dev/null
    say "done: $fails failure(s), $(($(date +%s) - T0)) s"
    # each node's journal, for whoever reads the logs
    if [ "$fails" != 0 ] || [ -n "${KEEP:-}" ]; then
        for n in "${NODES[@]}"; do
            [ -f "$R/nodes/$n/leader" ] &&
                on "$n" journalctl -b --no-pager -o short-precise >"$R/nodes/$n/journal.txt" 2>&1
        done
    fi
    if [ -n "${HOLD:-}" ]; then # debugging: the cluster stays up until $R/hold goes
        touch "$R/hold"
        echo "test_cluster: HOLD: the cluster is up; rm $R/hold to tear it down"
        while [ -e "$R/hold" ]; do sleep 2; done
    fi
    teardown
    if [ "$fails" != 0 ] || [ -n "${KEEP:-}" ]; then
        echo "test_cluster: logs and journals in $R/nodes/*/"
    else
        rm -rf "$R/nodes"
    fi
    echo "test_cluster: $fails failure(s)"
    [ "$fails" = 0 ]
    exit
}
trap 'echo "test_cluster: interrupted"; fails=$((fails + 1)); finish' INT TERM

# run CMD in NODE (its namespaces: mount, pid, network, uts, ipc, cgroup),
# as root with a clean environment
on() {
    local n=$1
    shift
    nsenter -t "$(cat "$R/nodes/$n/leader")" -a -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 TERM=dumb "$@"
}

# the root: one, cached, with the packages' runtime dependencies ----------------
# (what the packages Depends on besides themselves, Open MPI's programs for
# the job's orted, and systemd); its name is a hash of that list, so a new
# dependency makes a new root
runtime_deps() {
    local p
    for p in sharp-common sharp-am sharp-an sharpd libsharp-coll1 sharp-mpi sharp-tools; do
        dpkg-deb -f "$(ls "$D/${p}_"*.deb | head -1)" Depends
    done | tr ',' '\n' | sed 's/(.*//; s/|.*//; s/ //g' | grep -v '^$' | grep -v sharp | sort -u
}
INCLUDE=$( (echo systemd systemd-sysv dbus iproute2 openmpi-bin; runtime_deps) | tr ' ' '\n' | sort -u | tr '\n' ',')
INCLUDE=${INCLUDE%,}
# (RECIPE: how the root is made below; change it with what follows)
RECIPE=2
BASE=$CACHE/root-$(echo "bookworm $INCLUDE $RECIPE" | md5sum | cut -c1-12)
say "the root: $BASE"
if [ ! -f "$BASE/.complete" ]; then
    rm -rf "$BASE" "$BASE.new"
    mkdir -p "$CACHE"
    start=$(date +%s)
    if ! mmdebstrap --variant=minbase --include="$INCLUDE" bookworm "$BASE.new" >"$R/mmdebstrap.log" 2>&1; then
        tail -n 20 "$R/mmdebstrap.log"
        echo "FAIL mmdebstrap (log: $R/mmdebstrap.log)"
        exit 1
    fi
    # nothing the test does not use: no getty, no timers waking the 2 cores,
    # no remount of a root nspawn mounted (it failed on a loaded machine:
    # "Failed at step CGROUP", the container then "degraded")
    chroot "$BASE.new" systemctl mask getty@.service console-getty.service \
        systemd-remount-fs.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer \
        dpkg-db-backup.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1
    touch "$BASE.new/.complete"
    mv "$BASE.new" "$BASE"
    echo "ok   root made by mmdebstrap in $(($(date +%s) - start)) s ($INCLUDE)"
else
    echo "ok   root cached ($INCLUDE)"
fi

# the cgroup hierarchies systemd uses (cgroup v2, or v1's name=systemd
# and the unified one of a hybrid setup): one cgroup for each container
CGROUPS=""
for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
    [ -e "$h/cgroup.procs" ] && CGROUPS="$CGROUPS $h"
done
[ -n "$CGROUPS" ] || CGROUPS=/sys/fs/cgroup

# the network: a bridge in shc-br, each node's eth0 a veth on it --------------
teardown
rm -rf "$R/nodes"
mkdir -p "$R/nodes" "$R/job"
ip netns add "$P-br"
ip -n "$P-br" link add br0 type bridge mcast_snooping 0
ip -n "$P-br" link set br0 up
ip -n "$P-br" link set lo up
# (the namespace mpirun runs in: the nodes' names in its /etc/hosts, no
# name server, so no name is looked up outside; ip netns exec mounts them)
mkdir -p "/etc/netns/$P-login"
{ echo "127.0.0.1 localhost"; for n in "${NODES[@]}" login; do echo "${IP[$n]} $n"; done; } >"/etc/netns/$P-login/hosts"
: >"/etc/netns/$P-login/resolv.conf"
i=0
for n in "${NODES[@]}" login; do
    ip netns add "$P-$n"
    ip link add "${P}a$i" type veth peer name "${P}b$i"
    ip link set "${P}a$i" netns "$P-$n"
    ip link set "${P}b$i" netns "$P-br"
    ip -n "$P-$n" link set "${P}a$i" name eth0
    ip -n "$P-$n" addr add "${IP[$n]}/24" dev eth0
    ip -n "$P-$n" link set eth0 up
    ip -n "$P-$n" link set lo up
    ip -n "$P-$n" route add 224.0.0.0/4 dev eth0
    ip -n "$P-br" link set "${P}b$i" master br0 up
    i=$((i + 1))
done

# boot: each node an overlay of the root, systemd-nspawn -b -------------------
say "booting ${#NODES[@]} containers"
hosts_file=$(printf '127.0.0.1 localhost\n'; for n in "${NODES[@]}"; do echo "${IP[$n]} $n"; done)
for n in "${NODES[@]}"; do
    N=$R/nodes/$n
    mkdir -p "$N/upper" "$N/work" "$N/root"
    mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$N/upper,workdir=$N/work" "$N/root" ||
        { echo "FAIL overlay mount for $n"; fails=1; finish; }
    echo "$hosts_file" >"$N/root/etc/hosts"
    echo "$n" >"$N/root/etc/hostname"
    # --keep-unit --register=no: no machined, no scope (this machine's
    # init need not be systemd); the container's cgroups go under the one
    # nspawn runs in, so each runs in a cgroup of its own (else all nine
    # systemds share /payload/system.slice/sharpd.service: a stop in one
    # container kills every container's sharpd, and a unit's start fails
    # with 219/CGROUP when another container removes its cgroup); the
    # packages and the job's program read-only
    (
        for h in $CGROUPS; do
            mkdir -p "$h/sharp-cluster/$n" && echo "$BASHPID" >"$h/sharp-cluster/$n/cgroup.procs"
        done
        exec systemd-nspawn -q -D "$N/root" -M "$n" -b --register=no --keep-unit \
            --network-namespace-path="/run/netns/$P-$n" --console=passive \
            --bind-ro="$D:/srv/debs" --bind-ro="$R/job:/srv/job" --bind-ro="$HERE"
    ) >"$N/nspawn.log" 2>&1 </dev/null &
    echo $! >"$N/nspawn.pid"
done
booted() { # every container's systemd says running
    local n pid l st
    for n in "${NODES[@]}"; do
        pid=$(cat "$R/nodes/$n/nspawn.pid")
        kill -0 "$pid" 2>/dev/null || { echo "container $n: nspawn exited: $(tail -n 3 "$R/nodes/$n/nspawn.log")"; return 1; }
        l=$(pgrep -P "$pid" | head -1)
        [ -n "$l" ] || return 2
        echo "$l" >"$R/nodes/$n/leader"
        st=$(on "$n" systemctl is-system-running 2>/dev/null)
        case $st in
        running) ;;
        degraded) # a unit of the base system failed: said, not fatal
            [ -f "$R/nodes/$n/degraded" ] ||
                echo "     $n degraded: $(on "$n" systemctl --failed --no-legend --plain | tr '\n' ' ')" |
                tee "$R/nodes/$n/degraded" ;;
        *) return 2 ;;
        esac
    done
}
boot_ok() {
    local t rc
    for t in $(seq 300); do
        booted
        rc=$?
        [ $rc = 0 ] && return 0
        [ $rc = 1 ] && return 1
        sleep 0.5
    done
    for n in "${NODES[@]}"; do echo "$n: $(on "$n" systemctl is-system-running 2>&1)"; done
    return 1
}
need "${#NODES[@]} containers booted, systemd running in each" boot_ok

# install, as docs/admin.md says ----------------------------------------------
say "installing the packages"
role_debs() { # the packages of NODE's role (docs/admin.md "Install")
    case $1 in
    sm*) echo ./sharp-common_*.deb ./sharp-am_*.deb ./sharp-tools_*.deb ;;
    n0*) echo ./sharp-common_*.deb ./sharpd_*.deb ./libsharp-coll1_*.deb ./sharp-mpi_*.deb ;;
    *) echo ./sharp-common_*.deb ./sharp-an_*.deb ;;
    esac
}
install_pkgs() { # NODE DIR [APT OPTIONS]: apt-get install of NODE's role's packages in DIR
    local n=$1 dir=$2
    shift 2
    on "$n" sh -c "cd $dir && DEBIAN_FRONTEND=noninteractive apt-get install -y $* $(role_debs "$n")" \
        >>"$R/nodes/$n/apt.log" 2>&1
}
for n in "${NODES[@]}"; do
    need "$n: apt-get install $(role_debs "$n")" install_pkgs "$n" /srv/debs
done
check "every node: the secret made by the postinst (0600), no unit started or enabled" bash -c '
    for n in '"${NODES[*]}"'; do
        r='"$R"'/nodes/$n/root
        [ "$(stat -c %a $r/etc/sharp/secret)" = 600 ] || { echo "$n: no secret"; exit 1; }
        ls $r/etc/systemd/system/*.wants 2>/dev/null | grep -q sharp && { echo "$n: a unit enabled"; exit 1; }
        pgrep -f "^/usr/bin/sharp" --ns $(cat '"$R"'/nodes/$n/leader) >/dev/null && { echo "$n: a daemon runs"; exit 1; }
    done; exit 0'

# secrets, as docs/admin.md says: the standby manager the same cluster
# secret, each AN and sharpd its node secret made on the manager's host ----------
say "secrets and configuration"
put_secret() { # NODE: stdin becomes NODE's /etc/sharp/secret (0600, root's)
    on "$1" sh -c 'umask 077 && cat >/etc/sharp/secret.new && mv /etc/sharp/secret.new /etc/sharp/secret'
}
on sm1 cat /etc/sharp/secret | put_secret sm2
for n in "${ANS[@]}"; do on sm1 sharp_am --node-secret "an:$n" | put_secret "$n"; done
for n in "${HOSTS[@]}"; do on sm1 sharp_am --node-secret "sharpd:$n" | put_secret "$n"; done
check "node secrets in place: sm2 holds sm1's cluster secret, the others each their own" bash -c '
    r='"$R"'/nodes
    cmp -s $r/sm1/root/etc/sharp/secret $r/sm2/root/etc/sharp/secret &&
    ! cmp -s $r/sm1/root/etc/sharp/secret $r/leaf01/root/etc/sharp/secret &&
    ! cmp -s $r/n00001/root/etc/sharp/secret $r/n00002/root/etc/sharp/secret &&
    [ "$(stat -c "%U %a" $r/n00001/root/etc/sharp/secret)" = "root 600" ]'

# configuration: appended to the packages' conffiles (docs/admin.md)
on sm1 sh -c 'cat >/etc/sharp/topology.ibnd' <"$HERE/topology.ibnd"
on sm2 sh -c 'cat >/etc/sharp/topology.ibnd' <"$HERE/topology.ibnd"
for n in sm1 sm2; do
    {
        echo "listen = 0.0.0.0:6126"
        echo "address = ${IP[$n]}:6126"
        echo "peers = $AMS"
        [ "$n" = sm2 ] && echo "standby = yes"
        echo "takeover_after = 1s"
        echo "topology = /etc/sharp/topology.ibnd"
        echo "stats_interval = 1s"
    } | on "$n" sh -c 'cat >>/etc/sharp/sharp_am.conf'
done
for n in "${ANS[@]}"; do
    printf 'am = %s\nlisten = 0.0.0.0:7200\nadvertise = %s\n' "$AMS" "${IP[$n]}" |
        on "$n" sh -c 'cat >>/etc/sharp/sharp_an.conf'
done
for n in "${HOSTS[@]}"; do
    printf 'am = %s\n' "$AMS" | on "$n" sh -c 'cat >>/etc/sharp/sharpd.conf'
done

# start, as docs/admin.md says --------------------------------------------------
say "systemctl enable --now"
for n in sm1 sm2; do on "$n" systemctl enable --now sharp_am >/dev/null 2>&1; done
for n in "${ANS[@]}"; do on "$n" systemctl enable --now "sharp_an@$n" >/dev/null 2>&1; done
for n in "${HOSTS[@]}"; do on "$n" systemctl enable --now sharpd >/dev/null 2>&1; done

unit_of() { # NODE: its daemon's unit
    case $1 in sm*) echo sharp_am ;; n0*) echo sharpd ;; *) echo "sharp_an@$1" ;; esac
}
prop() { on "$1" systemctl show -p "$2" --value "$(unit_of "$1")"; }
all_active() {
    local n
    for n in "${NODES[@]}"; do
        [ "$(on "$n" systemctl is-active "$(unit_of "$n")")" = active ] || return 1
    done
}
# which manager is active, which is standby (sharpctl status on each)
role() { on "$1" sharpctl status --json 2>/dev/null | jq -r '.role // empty'; }
active_am() {
    local n
    for n in sm1 sm2; do [ "$(role $n)" = active ] && { echo $n; return; }; done
}
# NODE's sharpd is registered with the active manager: the last of its
# journal's lines about the manager says so
sharpd_registered() {
    on "$1" journalctl -u sharpd -o cat -q --no-pager |
        grep -E 'registered with the aggregation manager|SD0003|SD0005|shutting down|Main process exited|Started ' |
        tail -n 1 | grep -q 'registered with the aggregation manager'
}
# the active manager sees every AN up and a tree, and every sharpd is
# registered with it
fabric_up() {
    local a n
    a=$(active_am)
    [ -n "$a" ] || return 1
    [ "$(on "$a" sharpctl ans --json | jq '[.[] | select(.state == "up")] | length')" = "${#ANS[@]}" ] &&
        [ "$(on "$a" sharpctl trees --json | jq '[.[] | select(.state == "up")] | length')" -ge 1 ] || return 1
    for n in "${HOSTS[@]}"; do
        [ -f "$R/nodes/$n/gone" ] || sharpd_registered "$n" || return 1
    done
}
wait_for() { # SECONDS CMD...: until CMD succeeds
    local t=$(($1 * 2))
    shift
    while [ "$t" -gt 0 ]; do
        "$@" && return 0
        sleep 0.5
        t=$((t - 1))
    done
    return 1
}
# the units that are not active, each with systemd's result and the last
# line its own process logged (what a missing directory makes it say)
units_why() {
    local n u
    for n in "${NODES[@]}"; do
        u=$(unit_of "$n")
        [ "$(on "$n" systemctl is-active "$u")" = active ] && continue
        echo "     $n: $u $(on "$n" systemctl show -p Result --value "$u"):" \
            "$(on "$n" journalctl _SYSTEMD_UNIT="$u.service" -n 1 --no-pager -o cat 2>/dev/null | tail -n 1)"
    done
}
wait_for 20 all_active || units_why
need "every unit active: sharp_am (sm1, sm2), sharp_an@NAME (3), sharpd (4)" all_active
need "sm1 active, sm2 standby (sharpctl status)" wait_for 20 bash -c "[ \"\$(nsenter -t $(cat "$R/nodes/sm1/leader") -a sharpctl status --json | jq -r .role)\" = active ]"
need "the manager sees every AN up, a tree, every sharpd (sharpctl ans, trees, stats)" wait_for 30 fabric_up
unit_dirs() {
    on sm1 test -S /run/sharp/am.sock && on n00001 test -S /run/sharp/sharpd.sock &&
        [ "$(on sm1 stat -c %a /var/lib/sharp)" = 700 ] && on sm1 test -f /var/lib/sharp/am.db
}
check "the units' directories: /run/sharp (am.sock, sharpd.sock), /var/lib/sharp 0700 with am.db" unit_dirs

# systemctl reload (ExecReload=/bin/kill -HUP: procps, a dependency)
reloads() {
    local n pid
    for n in sm1 leaf01 n00001; do
        pid=$(prop "$n" MainPID)
        on "$n" systemctl reload "$(unit_of "$n")" || return 1
        [ "$(prop "$n" MainPID)" = "$pid" ] && [ "$(on "$n" systemctl is-active "$(unit_of "$n")")" = active ] || return 1
    done
}
check "systemctl reload of sharp_am, sharp_an@leaf01, sharpd: the same process, active" reloads

# MPI jobs ---------------------------------------------------------------------
mpicc.openmpi -O2 -o "$R/job/demo" mpi-coll/sharp_mpi_demo.c || { fails=1; finish; }
# mpirun here, in the namespace shc-login on the bridge; each orted started
# in its container by the agent (nsenter), the ranks there with the
# container's libsharp_mpi_ompi.so and /run/sharp/sharpd.sock
job() { # LOG ARGS...: the demo on the four hosts, one rank each
    local log=$1
    shift
    # (mpirun passes plm_rsh_agent on to each orted, which fails when that
    # path is not in its container: tests/cluster is bound into each)
    SHARP_CLUSTER_RUN=$R OMPI_MCA_plm_rsh_agent=$HERE/rsh-agent OMPI_MCA_plm_rsh_no_tree_spawn=1 \
        ip netns exec "$P-login" mpirun.openmpi --allow-run-as-root \
        -np "${#HOSTS[@]}" --host "$(IFS=,; echo "${HOSTS[*]}")" \
        --mca oob_tcp_if_include "$NET.0/24" --mca btl self,tcp \
        --mca btl_tcp_if_include "$NET.0/24" \
        -x LD_PRELOAD=$L/libsharp_mpi_ompi.so -x SHARP_MPI_VERBOSE=1 \
        /srv/job/demo "$@" >"$log" 2>&1
}
# the MPI layer's report: calls on sharp, calls on MPI (the "fallback"
# column and the calls redone), summed over the collectives
offloaded() { awk '/^sharp_mpi: MPI_[A-Za-z]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+$/ {s += $3} END {print s + 0}' "$1"; }
on_mpi() {
    awk '/^sharp_mpi: MPI_[A-Za-z]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+$/ {s += $5}
         /call\(s\) redone on MPI/ {for (i = 1; i < NF; i++) if ($(i + 1) == "call(s)") s += $i}
         END {print s + 0}' "$1"
}
an_ops() { on "$(active_am)" sharpctl ans --json | jq '[.. | objects | .ops? | numbers] | add // 0'; }

say "job 1: offloaded, every result checked"
ops0=$(an_ops)
need "job 1 (4 ranks, one per compute container) ran, every result right" job "$R/job1.log"
sleep 2.5 # the manager reads the ANs' counters every second (stats_interval)
ops1=$(an_ops)
echo "     job 1: $(offloaded "$R/job1.log") calls offloaded, $(on_mpi "$R/job1.log") on MPI; the ANs counted $((ops1 - ops0)) operations"
check "job 1 offloaded: the ANs folded its operations (sharpctl ans: $((ops1 - ops0)))" test $((ops1 - ops0)) -gt 0
check "job 1: no call on MPI (the MPI layer's report)" test "$(on_mpi "$R/job1.log")" = 0

# kill -9: systemd restarts each daemon, the job goes on right -----------------
say "job 2: kill -9 of an AN, a sharpd and the active manager while it runs"
mainpid() { prop "$1" MainPID; }
restarted() { # NODE OLDPID: a new main process, active
    local p
    p=$(mainpid "$1")
    [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$2" ] &&
        [ "$(on "$1" systemctl is-active "$(unit_of "$1")")" = active ]
}
kill9() { # NODE: kill -9 of its daemon's main process, as root there would
    local n=$1 pid r0
    pid=$(mainpid "$n")
    r0=$(prop "$n" NRestarts)
    on "$n" sh -c "kill -9 $pid"
    if wait_for 15 restarted "$n" "$pid"; then
        echo "ok   $n: $(unit_of "$n") killed (pid $pid), restarted by systemd (pid $(mainpid "$n"), NRestarts $r0 -> $(prop "$n" NRestarts))"
    else
        echo "FAIL $n: $(unit_of "$n") not restarted after kill -9"
        fails=$((fails + 1))
    fi
}
job "$R/job2.log" --loop 40 &
jp=$!
sleep 8
kill9 leaf01
wait_for 20 fabric_up
sleep 4
kill9 n00002
wait_for 20 fabric_up
sleep 4
old_active=$(active_am)
kill9 "$old_active"
wait_for 30 fabric_up
new_active=$(active_am)
check "after the active manager's kill: the other is active ($new_active), the restarted one standby" \
    test -n "$new_active" -a "$new_active" != "$old_active" -a "$(role "$old_active")" = standby
if wait $jp; then
    echo "ok   job 2 finished, every result right"
else
    tail -n 20 "$R/job2.log"
    echo "FAIL job 2"
    fails=$((fails + 1))
fi
echo "     job 2: $(offloaded "$R/job2.log") calls offloaded, $(on_mpi "$R/job2.log") on MPI (three kills)"
grep '^sharp_mpi: recovery' "$R/job2.log" | sed 's/^/     /'
need "every unit active again, the fabric up" wait_for 30 fabric_up

# systemctl stop: a clean shutdown; the manager ends the groups with a reason --
say "job 3: systemctl stop of an AN while it runs"
job "$R/job3.log" --loop 20 &
jp=$!
sleep 8
since=$(on leaf02 date '+%Y-%m-%d %H:%M:%S')
a=$(active_am)
since_am=$(on "$a" date '+%Y-%m-%d %H:%M:%S')
on leaf02 systemctl stop sharp_an@leaf02
check "systemctl stop sharp_an@leaf02: a clean exit (Result=success, status 0, inactive)" bash -c "
    [ \"\$(nsenter -t $(cat "$R/nodes/leaf02/leader") -a systemctl show -p Result,ExecMainStatus,ActiveState --value sharp_an@leaf02 | tr '\n' ' ')\" = 'success 0 inactive ' ]"
check "sharp_an@leaf02's journal: it shut down on the signal, not killed" \
    bash -c "nsenter -t $(cat "$R/nodes/leaf02/leader") -a journalctl -u sharp_an@leaf02 --since '$since' --no-pager | grep -q 'shutting down' &&
             ! nsenter -t $(cat "$R/nodes/leaf02/leader") -a journalctl -u sharp_an@leaf02 --since '$since' --no-pager | grep -q 'SIGKILL'"
sleep 3
on "$a" journalctl -u sharp_am --since "$since_am" --no-pager >"$R/am-stop.log" 2>&1
check "the manager ($a) ended the groups over leaf02 with a reason (its journal)" \
    grep -Eiq 'leaf02.*(revok|lost|down|gone)|(revok|lost|down|gone).*leaf02' "$R/am-stop.log"
grep -Ei 'leaf02' "$R/am-stop.log" | head -n 4 | sed 's/^/     /'
on leaf02 systemctl start sharp_an@leaf02
if wait $jp; then
    echo "ok   job 3 finished, every result right"
else
    tail -n 20 "$R/job3.log"
    echo "FAIL job 3"
    fails=$((fails + 1))
fi
echo "     job 3: $(offloaded "$R/job3.log") calls offloaded, $(on_mpi "$R/job3.log") on MPI (an AN stopped)"
need "the fabric up again" wait_for 30 fabric_up

# the journal's priorities: an administrator's mistakes are errors, in the
# journal at priority err: n00003 given n00004's node secret (its sharpd
# says so), n00004 a secret of no cluster (the manager refuses it) -------------
say "the journal: n00003 with another node's secret, n00004 with a wrong one"
a=$(active_am)
since_am=$(on "$a" date '+%Y-%m-%d %H:%M:%S')
since=$(on n00003 date '+%Y-%m-%d %H:%M:%S')
on sm1 sharp_am --node-secret sharpd:n00004 | put_secret n00003
head -c 32 /dev/urandom | base64 | put_secret n00004
on n00003 systemctl restart sharpd
on n00004 systemctl restart sharpd
sleep 4
# (it tries both managers: either may refuse it first)
for m in sm1 sm2; do on "$m" journalctl -u sharp_am -p err --since "$since_am" --no-pager -q; done >"$R/am-err.log" 2>&1
on n00003 journalctl -u sharpd -p err --since "$since" --no-pager -q >"$R/sharpd-err.log" 2>&1
on n00004 journalctl -u sharpd -p warning --since "$since" --no-pager -q >"$R/sharpd4-warn.log" 2>&1
sed 's/^/     /' "$R/am-err.log" | head -n 2
sed 's/^/     /' "$R/sharpd-err.log" | head -n 1
echo "     n00004's sharpd at priority warning or above: $(wc -l <"$R/sharpd4-warn.log") line(s)"
sed 's/^/     /' "$R/sharpd4-warn.log" | head -n 2
# (n00004's wrong secret: the handshake is mutual and the sharpd checks
# the manager's proof first, so it is n00004's sharpd that refuses, at err;
# the manager sees a connection closed in its handshake and says nothing
# at err)
check "journalctl -u sharpd -p err on n00003: sharpd says its secret is another node's" grep -q 'SD0001' "$R/sharpd-err.log"
check "journalctl -u sharpd -p warning on n00004: sharpd refuses, at err, a manager that does not prove its secret" \
    grep -q 'SD0001' "$R/sharpd4-warn.log"
# an AN lost (AM0201, job 3) is a warning: in -p warning, not in -p err
prio_differ() {
    on "$a" journalctl -u sharp_am -p warning --no-pager -q | grep -q AM0201 &&
        ! on "$a" journalctl -u sharp_am -p err --no-pager -q | grep -q AM0201
}
check "the priorities differ: the AN lost (AM0201) in sharp_am's -p warning, not in -p err" prio_differ
on sm1 sharp_am --node-secret sharpd:n00003 | put_secret n00003
on sm1 sharp_am --node-secret sharpd:n00004 | put_secret n00004
on n00003 systemctl restart sharpd
on n00004 systemctl restart sharpd
need "n00003, n00004 with their own secrets again: the fabric up" wait_for 30 fabric_up
check "the hardening breaks nothing: no unit failed on any node" bash -c '
    for n in '"${NODES[*]}"'; do
        f=$(nsenter -t $(cat '"$R"'/nodes/$n/leader) -a systemctl --failed --no-legend --plain | grep sharp)
        [ -z "$f" ] || { echo "$n: $f"; exit 1; }
    done'

# the control protocol's version: a peer one version ahead ---------------------
say "a peer one protocol version ahead"
a=$(active_am)
since_am=$(on "$a" date '+%Y-%m-%d %H:%M:%S')
# a control frame: magic "SH", version 2, type 1 (message), length 2, "{}"
ip netns exec "$P-login" bash -c "exec 3<>/dev/tcp/${IP[$a]}/6126 && printf 'SH\\x02\\x01\\x00\\x00\\x00\\x02{}' >&3 && timeout 3 cat <&3" >"$R/version-reply" 2>/dev/null
sleep 1
on "$a" journalctl -u sharp_am --since "$since_am" --no-pager >"$R/am-version.log" 2>&1
check "the manager refuses a control frame of version 2 and says why in its journal" \
    grep -q 'speaks control protocol version 2, this node 1' "$R/am-version.log"
# what the newer peer learns: a bare ping of version 1 ("SH", 1, 2, length 0)
check "the newer peer is told the manager's version before the connection closes" \
    bash -c "od -An -tx1 '$R/version-reply' | tr -d ' \\n' | grep -q 5348010200000000"
grep 'version' "$R/am-version.log" | head -n 2 | sed 's/^/     /'

# an upgrade in service ----------------------------------------------------------
say "job 4: the packages upgraded node by node while it runs"
NEW=$R/debs-new
rm -rf "$NEW"
need "a newer build of the packages (version $VER+up1: tests/cluster/bump-debs.sh)" \
    bash "$HERE/bump-debs.sh" "$D" "$NEW" "$VER+up1"
rm -rf "$R/job/debs-new" && cp -r "$NEW" "$R/job/debs-new"
job "$R/job4.log" --loop 180 &
jp=$!
sleep 8
upgrade() { # NODE: as docs/admin.md says, then wait until it serves again
    local n=$1 pid0 u
    u=$(unit_of "$n")
    pid0=$(mainpid "$n")
    if ! install_pkgs "$n" /srv/job/debs-new "-o Dpkg::Options::=--force-confold"; then
        echo "FAIL $n: apt-get install of the new packages (log: $R/nodes/$n/apt.log)"
        fails=$((fails + 1))
        return
    fi
    # the postinst restarted it (docs/admin.md): a new main process
    if wait_for 15 restarted "$n" "$pid0" && wait_for 30 fabric_up; then
        echo "ok   $n upgraded to $(on "$n" dpkg-query -W -f='${Version}' sharp-common), $u restarted by the postinst (pid $pid0 -> $(mainpid "$n")), the fabric up"
    else
        echo "FAIL $n: $u not restarted on the new packages, or the fabric not up"
        fails=$((fails + 1))
    fi
}
first_active=$(active_am)
standby=$([ "$first_active" = sm1 ] && echo sm2 || echo sm1)
upgrade "$standby"
check "$standby (the standby) is standby again" wait_for 10 bash -c "[ \"\$(nsenter -t $(cat "$R/nodes/$standby/leader") -a sharpctl status --json | jq -r .role)\" = standby ]"
upgrade "$first_active"
check "the takeover: $standby active, $first_active (upgraded, restarted) standby" \
    test "$(role "$standby")" = active -a "$(role "$first_active")" = standby
for n in "${ANS[@]}" "${HOSTS[@]}"; do
    upgrade "$n"
    sleep 2
done
upgraded_at=$(($(date +%s) - T0))
check "job 4 still ran when the last node was upgraded (an upgrade in service)" kill -0 "$jp"
if wait $jp; then
    echo "ok   job 4 finished, every result right, across the upgrade of every node"
else
    tail -n 20 "$R/job4.log"
    echo "FAIL job 4"
    fails=$((fails + 1))
fi
c_sharp=$(offloaded "$R/job4.log")
c_mpi=$(on_mpi "$R/job4.log")
echo "     job 4 (across the upgrade, done at $upgraded_at s): $c_sharp calls offloaded, $c_mpi on MPI"
grep '^sharp_mpi: recovery' "$R/job4.log" | sed 's/^/     /'
echo "$c_sharp $c_mpi" >"$R/upgrade-calls"
check "every node runs the new version (dpkg) and its daemon the new binary" bash -c '
    for n in '"${NODES[*]}"'; do
        l=$(cat '"$R"'/nodes/$n/leader)
        v=$(nsenter -t $l -a dpkg-query -W -f="\${Version}" sharp-common)
        [ "$v" = "'"$VER+up1"'" ] || { echo "$n: sharp-common $v"; exit 1; }
        for p in $(nsenter -t $l -a pgrep -f "^/usr/bin/sharp"); do
            nsenter -t $l -a readlink /proc/$p/exe | grep -q deleted && { echo "$n: pid $p runs a deleted binary"; exit 1; }
        done
    done; exit 0'
say "job 5: after the upgrade"
need "job 5 ran, every result right" job "$R/job5.log"
check "job 5: no call on MPI" test "$(on_mpi "$R/job5.log")" = 0

# remove and purge -----------------------------------------------------------
say "remove and purge"
# (dpkg --purge: apt-get purge refuses the packages that had no
# configuration, removed for good already; /etc/sharp stays on a manager
# if it holds the administrator's topology, nothing of the packages' in it)
removed() { # NODE PACKAGES...: remove, then purge, as an administrator would
    local n=$1
    shift
    on "$n" env DEBIAN_FRONTEND=noninteractive apt-get remove -y "$@" >>"$R/nodes/$n/apt.log" 2>&1 &&
        ! on "$n" pgrep -f '^/usr/bin/sharp' >/dev/null &&
        [ "$(on "$n" systemctl is-active "$(unit_of "$n")")" != active ] &&
        on "$n" dpkg --purge "$@" >>"$R/nodes/$n/apt.log" 2>&1 &&
        ! on "$n" pgrep -f '^/usr/bin/sharp' >/dev/null &&
        [ ! -e "$R/nodes/$n/root/etc/sharp/secret" ] &&
        [ -z "$(ls "$R/nodes/$n/root/etc/sharp" 2>/dev/null | grep -vx topology.ibnd)" ] &&
        [ -z "$(ls "$R/nodes/$n/root"/etc/systemd/system/*.wants/ 2>/dev/null | grep sharp)" ]
}
check "n00004: apt-get remove stops sharpd, purge leaves no secret, nothing in /etc/sharp, no link" \
    removed n00004 sharp-common sharpd libsharp-coll1 sharp-mpi
check "leaf02: apt-get remove stops sharp_an@leaf02, purge leaves nothing" \
    removed leaf02 sharp-common sharp-an
sb=$([ "$(active_am)" = sm1 ] && echo sm2 || echo sm1)
removed_am() { removed "$1" sharp-common sharp-am sharp-tools && [ ! -e "$R/nodes/$1/root/var/lib/sharp" ]; }
check "$sb (standby): apt-get remove stops sharp_am, purge leaves no secret, no /var/lib/sharp (/etc/sharp: the topology only)" \
    removed_am "$sb"

finish
