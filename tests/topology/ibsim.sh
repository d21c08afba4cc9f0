# Shell helpers around ibsim (sourced): a simulated InfiniBand fabric that
# real opensm and ibnetdiscover talk to through libumad2sim.
#
#   ibsim_available          exit status 0 if ibsim, opensm, ibnetdiscover and
#                            the umad2sim preload are installed
#   ibsim_start NETFILE DIR  start ibsim on NETFILE (scratch in DIR); its own
#                            socket name, so runs do not collide
#   ibsim_run CMD...         run CMD against the simulated fabric
#   ibsim_sm                 bring the subnet up once (opensm --once)
#   ibsim_stop               stop ibsim

UMAD2SIM=${UMAD2SIM:-/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so}

ibsim_available() {
    command -v ibsim >/dev/null && command -v opensm >/dev/null &&
        command -v ibnetdiscover >/dev/null && [ -r "$UMAD2SIM" ]
}

ibsim_start() {
    IBSIM_DIR=$2
    mkdir -p "$IBSIM_DIR"
    export IBSIM_SOCKNAME="sharp-ibsim-$$-$RANDOM"
    export OSM_TMP_DIR="$IBSIM_DIR" OSM_CACHE_DIR="$IBSIM_DIR"
    ibsim -n -s "$1" >"$IBSIM_DIR/ibsim.log" 2>&1 &
    IBSIM_PID=$!
    for _ in $(seq 200); do
        if grep -q 'simulator ready' "$IBSIM_DIR/ibsim.log" 2>/dev/null; then
            return 0
        fi
        if ! kill -0 "$IBSIM_PID" 2>/dev/null; then
            break
        fi
        sleep 0.05
    done
    echo "ibsim did not start; log:" >&2
    cat "$IBSIM_DIR/ibsim.log" >&2
    return 1
}

ibsim_run() {
    LD_PRELOAD="$UMAD2SIM" "$@"
}

ibsim_sm() {
    ibsim_run timeout 60 opensm --once -f "$IBSIM_DIR/opensm.log" \
        >"$IBSIM_DIR/opensm.out" 2>&1
}

ibsim_stop() {
    if [ -n "${IBSIM_PID:-}" ]; then
        kill "$IBSIM_PID" 2>/dev/null || true
        wait "$IBSIM_PID" 2>/dev/null || true
        IBSIM_PID=
    fi
}
