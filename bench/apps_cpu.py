#!/usr/bin/env python3
"""The machine's CPU during one stretch of a solve, for bench/apps_cpu.sh:
waits for FILE.1 and FILE.2 (petsc_cg -signal_at A,B -signal_file FILE),
reads /proc/stat and the schedstat of every daemon in PIDS (a
sharp-fabric's pids file; none if it is absent) at both, and prints per
iteration (N of them between the marks): context switches, the machine's
busy ms, wall ms, and the daemons' ms on a CPU."""
import os
import sys
import time


def daemons(pids):
    if not os.path.exists(pids):
        return 0
    ns = 0
    for line in open(pids):
        f = line.split()
        try:
            ns += int(open("/proc/%s/schedstat" % f[3]).read().split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return ns


def sample(pids):
    ctxt = busy = 0
    for line in open("/proc/stat"):
        f = line.split()
        if f[0] == "ctxt":
            ctxt = int(f[1])
        elif f[0] == "cpu":  # user nice system irq softirq, in 10 ms ticks
            busy = sum(int(x) for x in (f[1], f[2], f[3], f[6], f[7]))
    return ctxt, busy, time.time(), daemons(pids)


def main():
    mark, n, pids = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    got = []
    for k in (".1", ".2"):
        while not os.path.exists(mark + k):
            time.sleep(0.0005)
        got.append(sample(pids))
    a, b = got
    print("ctxt_per_it %.1f busy_ms_per_it %.3f wall_ms_per_it %.3f "
          "daemons_ms_per_it %.3f" %
          ((b[0] - a[0]) / n, (b[1] - a[1]) * 10.0 / n,
           (b[2] - a[2]) * 1e3 / n, (b[3] - a[3]) / 1e6 / n))


if __name__ == "__main__":
    main()
