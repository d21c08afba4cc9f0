/*
 * bench_coll: libsharp_coll allreduce latency through a local fabric.
 *
 * `sharp-fabric up` on the bundled 2-level fat-tree (2 spines, 4 leaves,
 * 8 hosts: sharp_am, 6 sharp_an, 8 sharpd), 8 member processes, one per
 * host, allreduce (int32 sum) of 8 B to 1 MiB: warm-up, then the mean over
 * the iterations.  In the same run, one loopback TCP round trip of 8 bytes
 * (ping-pong between two processes, TCP_NODELAY), the floor of any
 * exchange between two processes here: an allreduce through the tree is
 * at least member -> leaf AN -> spine -> leaf AN -> member.
 *
 * Last line: RESULT coll_8B_np8_over_rtt=<allreduce 8 B / TCP round trip>
 */
#include "tests/support/test_util.h"

#include <sharp/api/sharp.h>

#include "tests/support/oob_hub.h"
#include "bench/bench_util.h"
#include "tests/support/fabric.h"

#include <sys/socket.h>

#define NP 8
#define NSIZES 7

static const size_t sizes[NSIZES] = {8, 64, 512, 4096, 32768, 262144, 1 << 20};
static test_fabric_t fab;
static char dir[64];
static int result_fd;

static struct sharp_coll_data_desc desc(void *p, size_t n)
{
    struct sharp_coll_data_desc d;
    memset(&d, 0, sizeof(d));
    d.type = SHARP_DATA_BUFFER;
    d.mem_type = SHARP_MEM_TYPE_HOST;
    d.buffer.ptr = p;
    d.buffer.length = n;
    return d;
}

static int member(int rank, void *arg)
{
    char v[600];
    hub_oob_t oob = {1, rank, NP};
    struct sharp_coll_context *ctx;
    struct sharp_coll_comm *comm;
    (void)arg;
    test_fabric_host_sock(&fab, rank, v, sizeof(v));
    setenv("SHARP_COLL_SHARPD_SOCKET", v, 1);
    struct sharp_coll_init_spec s = {0};
    s.job_id = 77;
    s.world_rank = rank;
    s.world_size = NP;
    s.config = sharp_coll_default_config;
    s.oob_colls.bcast = hub_bcast;
    s.oob_colls.barrier = hub_barrier;
    s.oob_colls.gather = hub_gather;
    s.oob_ctx = &oob;
    struct sharp_coll_comm_init_spec cs = {
        .rank = rank, .size = NP, .oob_ctx = &oob};
    if (sharp_coll_init(&s, &ctx) != 0 ||
        sharp_coll_comm_init(ctx, &cs, &comm) != 0) {
        return 2;
    }
    int32_t *a = calloc(1, sizes[NSIZES - 1]),
            *b = calloc(1, sizes[NSIZES - 1]);
    /* dense data: zeros would go sparse (SHARP_COLL_SPARSE_MIN) */
    for (size_t i = 0; a != NULL && i < sizes[NSIZES - 1] / 4; i++)
        a[i] = (int32_t)(i % 1000 + 1);
    for (int k = 0; k < NSIZES; k++) {
        int iters = sizes[k] <= 4096 ? 300 : sizes[k] <= 262144 ? 30 : 10;
        struct sharp_coll_reduce_spec sp;
        memset(&sp, 0, sizeof(sp));
        sp.sbuf_desc = desc(a, sizes[k]);
        sp.rbuf_desc = desc(b, sizes[k]);
        sp.dtype = SHARP_DTYPE_INT;
        sp.op = SHARP_OP_SUM;
        sp.length = sizes[k] / 4;
        for (int i = 0; i < 10; i++) { /* warm-up */
            if (sharp_coll_do_allreduce(comm, &sp) != 0) {
                return 3;
            }
        }
        sharp_coll_do_barrier(comm);
        uint64_t t0 = shp_time_ns();
        for (int i = 0; i < iters; i++) {
            if (sharp_coll_do_allreduce(comm, &sp) != 0) {
                return 3;
            }
        }
        double us = (double)(shp_time_ns() - t0) / 1e3 / iters;
        if (rank == 0 && write(result_fd, &us, sizeof(us)) != sizeof(us)) {
            return 4;
        }
    }
    sharp_coll_comm_destroy(comm);
    sharp_coll_finalize(ctx);
    free(a);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    char fabdir[128];
    snprintf(dir, sizeof(dir), "/tmp/sharp-bench-coll.%d", (int)getpid());
    snprintf(fabdir, sizeof(fabdir), "%s/fabric", dir);
    if (test_fabric_init(&fab, "", fabdir) != 0 || argc < 2) {
        fprintf(stderr, "usage: bench_coll TOPOLOGY.ibnd\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (test_fabric_up(&fab, "", argv[1], "127.18", ">/dev/null") != 0) {
        fprintf(stderr, "bench_coll: the fabric did not come up\n");
        return 1;
    }
    int pfd[2];
    if (pipe(pfd) != 0) {
        return 1;
    }
    result_fd = pfd[1];
    hub_t h = {0};
    for (int r = 0; r < NP; r++) {
        hub_spawn(&h, member, r, NULL);
    }
    close(pfd[1]);
    int ok = hub_run(&h, 300) == NP;
    double us[NSIZES];
    int got = 0;
    while (got < NSIZES &&
           read(pfd[0], &us[got], sizeof(us[0])) == (ssize_t)sizeof(us[0])) {
        got++;
    }
    test_fabric_down(&fab, ">/dev/null");
    test_fabric_sh("rm -rf %s", dir);
    if (!ok || got != NSIZES) {
        fprintf(stderr, "bench_coll: a member failed\n");
        return 1;
    }
    double rtt = bench_tcp_rtt_us();
    printf("allreduce (int32 sum), %d members, one per host, through "
           "sharp_an on loopback;\nthe 15 daemons and the %d members share "
           "this machine's cores\n",
           NP, NP);
    printf("  %9s %12s %10s\n", "bytes", "latency us", "x TCP RTT");
    for (int k = 0; k < NSIZES; k++) {
        printf("  %9zu %12.1f %10.1f\n", sizes[k], us[k], us[k] / rtt);
    }
    printf("RESULT coll_8B_np8_over_rtt=%.2f\n", us[0] / rtt);
    return 0;
}
