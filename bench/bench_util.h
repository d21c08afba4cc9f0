/* Shared pieces of the benchmarks.  Header-only. */
#ifndef SHP_BENCH_UTIL_H
#define SHP_BENCH_UTIL_H

#include "common/net.h"
#include "common/time.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Daemons the benchmark starts: argv[0] with stdout and stderr appended to
 * `log`; bench_stop_all() stops them (SIGTERM) and reaps them. */
static pid_t bench_pids[256];
static int bench_npids;

static inline void bench_spawn(char *const argv[], const char *log)
{
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "a", stdout);
        (void)f;
        dup2(1, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    if (p > 0 && bench_npids < 256) {
        bench_pids[bench_npids++] = p;
    }
}

static inline void bench_stop_all(void)
{
    for (int i = 0; i < bench_npids; i++) {
        kill(bench_pids[i], SIGTERM);
    }
    for (int i = 0; i < bench_npids; i++) {
        waitpid(bench_pids[i], NULL, 0);
    }
    bench_npids = 0;
}

/* 8-byte ping-pong over loopback TCP: mean round trip in us */
static inline double bench_tcp_rtt_us(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1, iters = 2000;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    char buf[8] = {0};
    if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&sa, &sl)) {
        return -1;
    }
    pid_t p = fork();
    if (p == 0) {
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
    for (int i = 0; i < iters + 100; i++) {
        if (i == 100) {
            t0 = shp_time_ns();
        }
        if (shp_fd_io_full(c, buf, 8, 1) || shp_fd_io_full(c, buf, 8, 0)) {
            return -1;
        }
    }
    double us = (double)(shp_time_ns() - t0) / 1e3 / iters;
    close(c);
    close(l);
    waitpid(p, NULL, 0);
    return us;
}

#endif
