#!/usr/bin/env bash
# sharp_am's Prometheus metrics: a fabric with metrics_listen set, an MPI
# job through it (not under SAN=1: libsharp_mpi is preloaded into an
# uninstrumented MPI program), the text format read directly (types, the
# ANs, the operations counted, errors for other paths and methods), then a
# real Prometheus server scrapes it and a metric is read back through its
# HTTP API; every metric the shipped Grafana dashboard queries exists.
set -u
O=${O:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
for c in curl jq prometheus; do
    command -v "$c" >/dev/null || { echo "skip: $c is not installed (make deps)"; exit 77; }
done
DIR=$(mktemp -d /tmp/sharp-test-metrics.XXXXXX)
NET=127.25
MURL=http://$NET.0.1:9105
PURL=http://$NET.0.1:9090
fabric() { "$BIN/sharp-fabric" --dir "$DIR/fabric" "$@"; }
cleanup() {
    [ -n "${prom:-}" ] && kill "$prom" 2>/dev/null && wait "$prom" 2>/dev/null
    fabric down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

cp "$SRC/examples/fat-tree-2l.ibnd" "$DIR/ft.ibnd"
SHARP_AM_METRICS_LISTEN=$NET.0.1:9105 SHARP_AM_STATS_INTERVAL=200ms \
    fabric up "$DIR/ft.ibnd" --net $NET >/dev/null || { echo "fabric up failed"; exit 1; }
nans=$(awk '$1 == "an"' "$DIR/fabric/pids" | wc -l)

# 1. the text format, directly
curl -sf -D "$DIR/hdr" "$MURL/metrics" >"$DIR/m0" || bad "GET /metrics"
if grep -qi '^content-type: text/plain; version=0.0.4' "$DIR/hdr" &&
    grep -q '^# TYPE sharp_an_operations_total counter$' "$DIR/m0" &&
    grep -q "^sharp_am_ans_up $nans\$" "$DIR/m0" &&
    [ "$(grep -c '^sharp_an_up{an="[a-z0-9]*",transport="tcp"} 1$' "$DIR/m0")" = "$nans" ]; then
    ok "text format 0.0.4: every AN ($nans) up, typed families"
else
    bad "text format"; cat "$DIR/hdr" "$DIR/m0"
fi
code=$(curl -s -o /dev/null -w '%{http_code}' "$MURL/other")
[ "$code" = 404 ] && ok "another path: 404" || bad "another path: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x=1 "$MURL/metrics")
[ "$code" = 405 ] && ok "POST: 405" || bad "POST: $code"
# every sample line parses: name{labels} value
if awk '!/^#/ && !/^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.e+-]+$/ { bad = 1; print "bad line: " $0 } END { exit bad }' "$DIR/m0"; then
    ok "every sample line is name{labels} value"
else
    bad "sample lines"
fi

# 2. a job's operations show up (the manager polls every 200 ms here)
ops0=$(awk '/^sharp_an_operations_total/ { s += $2 } END { print s + 0 }' "$DIR/m0")
if [ "${SAN:-0}" != 1 ] && command -v mpirun.openmpi >/dev/null; then
    timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe -np 4 \
        --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp \
        -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_FABRIC_DIR="$DIR/fabric" \
        "$BIN/sharp-fabric" rank -- "$BIN/sharp_mpi_demo_ompi" >"$DIR/job.out" 2>&1 ||
        bad "the MPI job"
    sleep 0.6
    curl -sf "$MURL/metrics" >"$DIR/m1"
    ops1=$(awk '/^sharp_an_operations_total/ { s += $2 } END { print s + 0 }' "$DIR/m1")
    if [ "$ops1" -gt "$ops0" ] && grep -q '^sharp_am_jobs_begun_total 1$' "$DIR/m1" &&
        grep -q '^sharp_am_groups_created_total [1-9]' "$DIR/m1"; then
        ok "a job: operations $ops0 -> $ops1, one job begun, groups created"
    else
        bad "a job's operations ($ops0 -> $ops1)"; grep '^sharp_am' "$DIR/m1"
    fi
else
    echo "(no MPI job under SAN=1: the counters are checked idle only)"
fi

# 3. a real Prometheus scrapes it; read a metric back through its API
cat >"$DIR/prom.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: sharp
    static_configs:
      - targets: ['$NET.0.1:9105']
EOF
prometheus --config.file="$DIR/prom.yml" --storage.tsdb.path="$DIR/tsdb" \
    --web.listen-address="$NET.0.1:9090" >"$DIR/prom.log" 2>&1 &
prom=$!
v=
for _ in $(seq 1 60); do
    v=$(curl -sf "$PURL/api/v1/query?query=sharp_am_ans_up" 2>/dev/null |
        jq -r '.data.result[0].value[1] // empty' 2>/dev/null)
    [ -n "$v" ] && break
    sleep 0.5
done
if [ "$v" = "$nans" ]; then
    ok "Prometheus scraped the manager: sharp_am_ans_up = $v through its API"
else
    bad "Prometheus: sharp_am_ans_up = '${v}'"; tail -5 "$DIR/prom.log"
fi
up=$(curl -sf "$PURL/api/v1/query?query=up%7Bjob%3D%22sharp%22%7D" |
    jq -r '.data.result[0].value[1] // empty')
[ "$up" = 1 ] && ok "the scrape target is healthy (up 1)" || bad "target up = '$up'"

# 4. the dashboard asks only for metrics that exist
dash="$SRC/dist/grafana/sharp.json"
if jq -e '.panels | length > 0' "$dash" >/dev/null; then
    missing=0
    for m in $(jq -r '.. | .expr? // empty' "$dash" | grep -o 'sharp_[a-z_]*' | sort -u); do
        grep -q "^# TYPE $m " "$DIR/m0" || { echo "dashboard metric $m not served"; missing=1; }
    done
    [ $missing = 0 ] && ok "dashboard: valid JSON, every metric it queries is served" ||
        bad "dashboard metrics"
else
    bad "dashboard: not a Grafana dashboard with panels"
fi

# 5. one client cannot take every connection: 64 idle ones from one
# address (as nobody, as any local user could), and a scrape from another
# address is still answered at once
if [ -x /usr/bin/python3 ] && command -v setpriv >/dev/null; then
    setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 - "$NET.0.1" 9105 "$NET.0.77" \
        >"$DIR/hold.out" 2>&1 <<'PY' &
import socket, sys, time
held = []
for _ in range(64):
    s = socket.socket()
    s.bind((sys.argv[3], 0))
    try:
        s.connect((sys.argv[1], int(sys.argv[2])))
        held.append(s)
    except OSError:
        break
print("held", len(held), flush=True)
time.sleep(6)
PY
    holder=$!
    for _ in $(seq 50); do grep -q held "$DIR/hold.out" && break; sleep 0.1; done
    t0=$(date +%s%N)
    if curl -sf -m 3 --interface "$NET.0.78" "$MURL/metrics" >"$DIR/m2"; then
        ms=$((($(date +%s%N) - t0) / 1000000))
        ok "a scrape while one address holds idle connections ($(cat "$DIR/hold.out")): answered in $ms ms"
    else
        bad "a scrape while one address holds idle connections ($(cat "$DIR/hold.out")): not answered"
    fi
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
fi

[ $fails = 0 ]
