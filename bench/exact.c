/*
 * bench_exact: what exact sums (SHARP_OP_SUM_EXACT) cost next to the
 * normal SUM, in one run.
 *
 * 1. Latency: `sharp-fabric up` on the given topology (the bundled 2-level
 *    fat-tree: 8 hosts, 6 ANs) on 127.26, 8 member processes, one per
 *    host, allreduce of 8 B - 4 KiB of f64: the normal sum, exact in one
 *    pass (the type's whole range, 70 lanes of 8 B per element), exact in
 *    two passes (the window first, then only the limbs the data need), and
 *    the default (one pass up to SHARP_COLL_EXACT_ONE_PASS_MAX, 8 KiB of
 *    lanes).  Data: random doubles, magnitudes 2^-30..2^30, both signs.
 * 2. Bytes each member sends per operation (payload; every message also
 *    has a 32-byte header), from the layouts of the same data.
 * 3. Fold throughput at an AN, in this process: 8 children's payloads
 *    folded (the AN's kernel: int64 SUM for exact, f64 SUM for normal, plus
 *    the exact lanes' bound check), ns per user element; and the client's
 *    encode + decode per element.
 *
 * Last line: RESULT exact_8B_over_sum=... exact_4KiB_over_sum=...
 */
#include "tests/support/test_util.h"

#include <sharp/api/sharp.h>

#include "bench/bench_util.h"
#include "tests/support/fabric.h"
#include "reduce/exact.h"
#include "tests/support/oob_hub.h"

#include <math.h>
#include <sys/socket.h>

#define NP 8
#define NSIZES 4
#define NMODES 4

static const size_t sizes[NSIZES] = {8, 64, 512, 4096};
static const char *const mode_names[NMODES] = {
    "sum", "exact 1 pass", "exact 2 passes", "exact default"};
/* SHARP_COLL_EXACT_ONE_PASS_MAX per mode */
static const char *const one_pass[NMODES] = {"8k", "1m", "0", "8k"};
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

static double value(int rank, size_t i)
{
    uint64_t s = ((uint64_t)rank << 32) ^ i ^ 0x5eedull;
    uint64_t r = test_rand(&s);
    double m = (double)(r >> 11) / 9007199254740992.0;
    return ldexp(r & 1 ? -m : m, (int)((r >> 3) % 61) - 30);
}

static int member(int rank, void *arg)
{
    char v[600];
    (void)arg;
    test_fabric_host_sock(&fab, rank, v, sizeof(v));
    setenv("SHARP_COLL_SHARPD_SOCKET", v, 1);
    double *a = calloc(512, 8), *b = calloc(512, 8);
    for (size_t i = 0; i < 512; i++) {
        a[i] = value(rank, i);
    }
    for (int mode = 0; mode < NMODES; mode++) {
        hub_oob_t oob = {1 + mode, rank, NP};
        struct sharp_coll_context *ctx;
        struct sharp_coll_comm *comm;
        setenv("SHARP_COLL_EXACT_ONE_PASS_MAX", one_pass[mode], 1);
        struct sharp_coll_init_spec s = {0};
        s.job_id = 78 + (uint64_t)mode;
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
        for (int k = 0; k < NSIZES; k++) {
            int iters = 300;
            struct sharp_coll_reduce_spec sp;
            memset(&sp, 0, sizeof(sp));
            sp.sbuf_desc = desc(a, sizes[k]);
            sp.rbuf_desc = desc(b, sizes[k]);
            sp.dtype = SHARP_DTYPE_DOUBLE;
            sp.op = mode == 0 ? SHARP_OP_SUM : SHARP_OP_SUM_EXACT;
            sp.length = sizes[k] / 8;
            for (int i = 0; i < 20; i++) { /* warm-up */
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
    }
    free(a);
    free(b);
    return 0;
}

/* the lanes per element of n elements of the bench's data (two passes) */
static unsigned lanes_of(size_t n)
{
    int64_t win[3] = {INT64_MIN, INT64_MIN, INT64_MIN}, w[3];
    static double v[512];
    for (int r = 0; r < NP; r++) {
        for (size_t i = 0; i < n; i++) {
            v[i] = value(r, i);
        }
        const void *src = v;
        if (shp_exact_window(SHP_DTYPE_F64, &src, 1, n, w) != SHP_OK) {
            return 0;
        }
        for (int l = 0; l < 3; l++) {
            win[l] = w[l] > win[l] ? w[l] : win[l];
        }
    }
    shp_exact_layout_t lay;
    return shp_exact_layout(SHP_DTYPE_F64, win, &lay, NULL) == SHP_OK
               ? lay.lanes
               : 0;
}

/* best of `reps` of fn's ns per element */
typedef struct fold_arg {
    unsigned lanes; /* 0: the normal f64 sum */
    size_t n;
    void *acc;
    const void *srcs[NP];
} fold_arg_t;

static double fold_ns(fold_arg_t *f)
{
    shp_reduce_desc_t d = {f->lanes ? SHP_DTYPE_I64 : SHP_DTYPE_F64, SHP_OP_SUM,
                           SHP_DTYPE_NULL};
    size_t cnt = f->n * (f->lanes ? f->lanes : 1);
    double best = 1e30;
    for (int rep = 0; rep < 7; rep++) {
        uint64_t t0 = shp_time_ns();
        int iters = 200;
        for (int it = 0; it < iters; it++) {
            for (int c = 0; f->lanes && c < NP; c++) {
                if (!shp_exact_lanes_ok(f->srcs[c], cnt)) {
                    return -1;
                }
            }
            if (shp_reduce_fold(&d, f->acc, f->srcs, NP, cnt) != SHP_OK) {
                return -1;
            }
        }
        double ns = (double)(shp_time_ns() - t0) / iters / (double)f->n;
        best = ns < best ? ns : best;
    }
    return best;
}

/* client side: window + encode + decode, ns per element */
static double client_ns(size_t n, int full)
{
    static double v[512], out[512];
    for (size_t i = 0; i < n; i++) {
        v[i] = value(0, i);
    }
    int64_t *lanes = malloc(n * 70 * 8);
    const void *src = v;
    double best = 1e30;
    for (int rep = 0; rep < 7; rep++) {
        uint64_t t0 = shp_time_ns();
        for (int it = 0; it < 200; it++) {
            int64_t win[3];
            shp_exact_layout_t lay;
            if (full) {
                shp_exact_window_full(SHP_DTYPE_F64, win);
            } else if (shp_exact_window(SHP_DTYPE_F64, &src, 1, n, win) !=
                       SHP_OK) {
                return -1;
            }
            if (shp_exact_layout(SHP_DTYPE_F64, win, &lay, NULL) != SHP_OK ||
                shp_exact_encode(&lay, &src, 1, n, lanes) != SHP_OK) {
                return -1;
            }
            shp_exact_decode(&lay, lanes, n, out);
        }
        double ns = (double)(shp_time_ns() - t0) / 200 / (double)n;
        best = ns < best ? ns : best;
    }
    free(lanes);
    return best;
}

int main(int argc, char **argv)
{
    char fabdir[128];
    snprintf(dir, sizeof(dir), "/tmp/sharp-bench-exact.%d", (int)getpid());
    snprintf(fabdir, sizeof(fabdir), "%s/fabric", dir);
    if (test_fabric_init(&fab, "", fabdir) != 0 || argc < 2) {
        fprintf(stderr, "usage: bench_exact TOPOLOGY.ibnd\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (test_fabric_up(&fab, "", argv[1], "127.26", ">/dev/null") != 0) {
        fprintf(stderr, "bench_exact: the fabric did not come up\n");
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
    int ok = hub_run(&h, 600) == NP;
    double us[NMODES][NSIZES];
    int got = 0;
    while (got < NMODES * NSIZES &&
           read(pfd[0], &us[got / NSIZES][got % NSIZES], sizeof(double)) ==
               (ssize_t)sizeof(double)) {
        got++;
    }
    test_fabric_down(&fab, ">/dev/null");
    test_fabric_sh("rm -rf %s", dir);
    if (!ok || got != NMODES * NSIZES) {
        fprintf(stderr, "bench_exact: a member failed\n");
        return 1;
    }
    printf("allreduce of f64, %d members, one per host, through sharp_an on "
           "loopback\n(the daemons and members share this machine's cores); "
           "latency in us\n",
           NP);
    printf("  %6s", "bytes");
    for (int m = 0; m < NMODES; m++) {
        printf(" %15s", mode_names[m]);
    }
    printf("\n");
    for (int k = 0; k < NSIZES; k++) {
        printf("  %6zu", sizes[k]);
        for (int m = 0; m < NMODES; m++) {
            printf(" %15.1f", us[m][k]);
        }
        printf("\n");
    }
    printf("\npayload bytes each member sends per allreduce (+32 B header a "
           "message)\n  %6s %10s %15s %22s\n",
           "bytes", "sum", "exact 1 pass", "exact 2 passes (lanes)");
    for (int k = 0; k < NSIZES; k++) {
        size_t e = sizes[k] / 8;
        unsigned l = lanes_of(e);
        printf("  %6zu %10zu %15zu %14zu + 24 (%u)\n", sizes[k], sizes[k],
               e * 70 * 8, e * l * 8, l);
    }
    /* fold throughput at an AN: 8 children of 512 elements */
    fold_arg_t f = {0};
    size_t fe = 512;
    unsigned typical = lanes_of(fe);
    printf("\nAN fold of %d children x %zu f64 elements, ns per element "
           "(best of 7 x 200)\n",
           NP, fe);
    const unsigned ls[3] = {0, typical, 70};
    const char *const lname[3] = {"sum (f64)", "exact, this data",
                                  "exact, full range"};
    double fold[3];
    for (int k = 0; k < 3; k++) {
        size_t cnt = fe * (ls[k] ? ls[k] : 1);
        f.lanes = ls[k];
        f.n = fe;
        f.acc = calloc(cnt, 8);
        for (int c = 0; c < NP; c++) {
            f.srcs[c] = calloc(cnt, 8);
        }
        fold[k] = fold_ns(&f);
        printf("  %-20s %3u lanes %8.2f ns\n", lname[k], ls[k] ? ls[k] : 1,
               fold[k]);
        free(f.acc);
        for (int c = 0; c < NP; c++) {
            free((void *)f.srcs[c]);
        }
    }
    printf("client: window + encode + decode, ns per element: %.1f (this "
           "data, two passes), %.1f (full range)\n",
           client_ns(fe, 0), client_ns(fe, 1));
    printf("RESULT exact_8B_over_sum=%.2f exact_4KiB_over_sum=%.2f "
           "fold_exact_over_sum=%.1f\n",
           us[3][0] / us[0][0], us[3][NSIZES - 1] / us[0][NSIZES - 1],
           fold[1] / fold[0]);
    return 0;
}
