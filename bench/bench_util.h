/* Shared pieces of the benchmarks (the fabric they start:
 * tests/support/fabric.h).  Header-only. */
#ifndef SHP_BENCH_UTIL_H
#define SHP_BENCH_UTIL_H

#include "core/net.h"
#include "core/time.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* 8-byte ping-pong over loopback TCP: mean round trip in us, the two ends
 * pinned to one core (same_cpu) or to two.  On a VM the two differ by far:
 * ends on two cores wake each other's halted virtual CPU (tens of us a
 * round trip), ends on one hand the core over (a few us); left to the
 * scheduler, a run gets either.  The benchmarks divide by the one-core
 * figure (the smaller, so the stricter yardstick) and print both. */
static inline double bench_tcp_rtt_us_on(int same_cpu)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1, iters = 2000;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    char buf[8] = {0};
    cpu_set_t saved, mine, other;
    int cpu = sched_getcpu(), ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&sa, &sl) ||
        sched_getaffinity(0, sizeof(saved), &saved) || cpu < 0) {
        return -1;
    }
    CPU_ZERO(&mine);
    CPU_SET(cpu, &mine);
    CPU_ZERO(&other);
    CPU_SET(same_cpu || ncpu < 2 ? cpu : (cpu + 1) % ncpu, &other);
    sched_setaffinity(0, sizeof(mine), &mine);
    pid_t p = fork();
    if (p == 0) {
        sched_setaffinity(0, sizeof(other), &other);
        int c = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            _exit(1);
        }
        for (int i = 0; i < iters + 100; i++) {
            if (shp_fd_io_full(c, buf, 8, 0) || shp_fd_io_full(c, buf, 8, 1)) {
                _exit(1);
            }
        }
        _exit(0);
    }
    int c = accept(l, NULL, NULL);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t t0 = 0;
    double us = -1;
    for (int i = 0; i < iters + 100; i++) {
        if (i == 100) {
            t0 = shp_time_ns();
        }
        if (shp_fd_io_full(c, buf, 8, 1) || shp_fd_io_full(c, buf, 8, 0)) {
            t0 = 0;
            break;
        }
    }
    if (t0 != 0) {
        us = (double)(shp_time_ns() - t0) / 1e3 / iters;
    }
    close(c);
    close(l);
    waitpid(p, NULL, 0);
    sched_setaffinity(0, sizeof(saved), &saved);
    return us;
}

/* The yardstick (one core) after printing both */
static inline double bench_tcp_rtt_us(void)
{
    double one = bench_tcp_rtt_us_on(1), two = bench_tcp_rtt_us_on(0);
    printf("  loopback TCP round trip (8 B ping-pong): %.1f us with both "
           "ends on one core, %.1f us on two\n",
           one, two);
    return one;
}

#endif
