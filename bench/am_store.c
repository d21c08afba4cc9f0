/*
 * bench_am_store: what the manager's state database costs (am/am_store.c).
 *
 * In a directory next to this program (on the build's disk, not a tmpfs:
 * the commits' fsyncs are the cost): the mean time of a committed write
 * of one counter (what a block of 1024 group ids costs), of a
 * reservation of 2 hosts (what job_reserve's answer waits for), and of
 * the epoch's advance; side by side with an 8-byte loopback TCP round
 * trip (bench_util.h) measured in the same run.  Per group created, the
 * id block's commit is shared by 1024 groups.
 *
 * Last line: RESULT am_store_commit_us=<us> am_store_reserve_us=<us>
 *            am_store_per_group_us=<us>
 */
#include "am/am_store.h"
#include "bench/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 200

int main(int argc, char **argv)
{
    char self[512], dir[600], err[2048];
    (void)argc;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(dir, sizeof(dir), "%s/bench-am-store.%d", self, (int)getpid());
    shp_am_store_t *s;
    if (shp_am_store_open(dir, 0, &s, err, sizeof(err)) != SHP_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], err);
        return 1;
    }
    uint64_t t0 = shp_time_ns();
    for (int i = 0; i < ROUNDS; i++)
        if (shp_am_store_counter_set(s, "group_next", (uint64_t)i) != SHP_OK)
            return 1;
    uint64_t t1 = shp_time_ns();
    char *hosts[] = {"n00001", "n00002"};
    uint8_t held[] = {1, 1};
    shp_am_store_job_t j = {.uid = 1000,
                            .max_groups = 16,
                            .osts = 16,
                            .payload = 32768,
                            .nhosts = 2,
                            .hosts = hosts,
                            .held = held};
    for (int i = 0; i < ROUNDS; i++) {
        j.job_id = (uint64_t)i;
        if (shp_am_store_job_put(s, &j) != SHP_OK)
            return 1;
    }
    uint64_t t2 = shp_time_ns();
    uint64_t e;
    for (int i = 0; i < ROUNDS; i++)
        if (shp_am_store_epoch_advance(s, 0, &e) != SHP_OK)
            return 1;
    uint64_t t3 = shp_time_ns();
    shp_am_store_close(s);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    double commit = (double)(t1 - t0) / ROUNDS / 1e3;
    double reserve = (double)(t2 - t1) / ROUNDS / 1e3;
    double epoch = (double)(t3 - t2) / ROUNDS / 1e3;
    double rtt = bench_tcp_rtt_us_on(1);
    printf("state database (SQLite, WAL, synchronous=FULL), %d commits "
           "each:\n",
           ROUNDS);
    printf("  a counter (a block of 1024 group ids)  %9.1f us  %7.1fx a "
           "TCP round trip\n",
           commit, commit / rtt);
    printf("  a reservation of 2 hosts              %9.1f us  %7.1fx\n",
           reserve, reserve / rtt);
    printf("  the epoch advanced                    %9.1f us  %7.1fx\n", epoch,
           epoch / rtt);
    printf("  per group created (block / 1024)      %9.3f us  %7.3fx\n",
           commit / 1024, commit / 1024 / rtt);
    printf("  loopback TCP round trip (8 B)         %9.1f us\n", rtt);
    printf("RESULT am_store_commit_us=%.1f am_store_reserve_us=%.1f "
           "am_store_per_group_us=%.3f\n",
           commit, reserve, commit / 1024);
    return 0;
}
