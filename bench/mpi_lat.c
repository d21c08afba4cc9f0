/*
 * mpi_lat: OSU-style MPI latency (warm-up, iterations, mean over ranks'
 * maximum) for MPI_Allreduce (float sum) of 8 B to 1 MiB, MPI_Bcast of
 * 8 B and 4 KiB and MPI_Barrier, with the whole machine's CPU time and
 * context switches per operation.  Prints one line per size: "allreduce
 * BYTES US CPU_US CTXSW", "bcast BYTES ..." and "barrier 0 US CPU_US
 * CTXSW".  SHARP_BENCH_QUICK=1: allreduce of 8 B and 4 KiB only (with
 * the bcasts and the barrier), no MPI_Iallreduce: the scale runs.
 *
 * CPU_US is the busy time of every CPU over the timed loop (from
 * /proc/stat: every process counted, daemons, ranks and kernel) divided by
 * the operations; CTXSW the machine's context switches per operation.  On
 * cores shared by every process, latency follows that work.
 *
 * SHARP_BENCH_JOB_CPU=1 adds a sixth column, JOB_CPU_US: the CPU time of
 * the job alone per operation, the ranks' own (getrusage, every thread)
 * and that of the fabric's daemons when SHARP_FABRIC_DIR names one (its
 * pids file; /proc/PID/stat).  Unlike CPU_US it does not count what other
 * programs on the machine do meanwhile, so it stays a fair measure of the
 * work per operation on a busy host (kernel work charged to whichever task
 * a tick finds running, as the kernel's accounting does; ksoftirqd is not
 * counted).
 *
 * SHARP_BENCH_LARGE=1: instead, allreduces of 512 KiB to 16 MiB with a
 * barrier between calls, only the allreduce timed, as OSU's osu_allreduce
 * does ("allreduce_b BYTES US").
 *
 * SHARP_BENCH_SPARSE=1: instead, float sums of 1, 4 and 16 MiB whose
 * blocks of 256 floats (1 KiB) are non-zero at a density of 1, 10, 50 or
 * 100 % (drawn for each rank apart): "sparse_dD BYTES US CPU_US CTXSW"
 * and "wire sparse_dD BYTES B", B the bytes the loopback interface carried
 * per operation and rank (/proc/net/dev, measured at rank 0 over the
 * timed loop: every byte of the job's and the fabric's traffic, results
 * included).
 *
 * SHARP_BENCH_COMM=1: instead, what a communicator costs: "comm_use 0
 * US" a loop of MPI_Comm_dup, one 8-byte MPI_Allreduce on the new
 * communicator and MPI_Comm_free; "comm_bare 0 US" the same without the
 * allreduce (a communicator the program makes and never reduces on).
 *
 * An ordinary MPI program: bench/mpi.sh runs it through sharp, over TCP
 * and over shared memory.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct {
    unsigned long long busy, ctxt;
} machine_t;

static machine_t machine(void)
{
    machine_t m = {0, 0};
    char line[512];
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return m;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long v[8] = {0};
        if (strncmp(line, "cpu ", 4) == 0 &&
            sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
            /* user nice system idle iowait irq softirq steal */
            m.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        } else {
            sscanf(line, "ctxt %llu", &m.ctxt);
        }
    }
    fclose(f);
    return m;
}

/* this process's CPU time in us, every thread */
static double self_cpu_us(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* CPU time in us of the fabric's daemons ($SHARP_FABRIC_DIR/pids: lines
 * "kind name address pid"); 0 without a fabric */
static double fabric_cpu_us(void)
{
    const char *dir = getenv("SHARP_FABRIC_DIR");
    char path[4096], line[512];
    double ticks = 0;
    if (dir == NULL ||
        snprintf(path, sizeof(path), "%s/pids", dir) >= (int)sizeof(path))
        return 0;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        long pid;
        if (sscanf(line, "%*s %*s %*s %ld", &pid) != 1 || pid <= 0)
            continue;
        char sp[64], st[1024];
        snprintf(sp, sizeof(sp), "/proc/%ld/stat", pid);
        FILE *s = fopen(sp, "r");
        if (s == NULL)
            continue;
        size_t n = fread(st, 1, sizeof(st) - 1, s);
        fclose(s);
        st[n] = 0;
        /* after the command's closing parenthesis: field 3 on; utime and
         * stime are fields 14 and 15 */
        char *p = strrchr(st, ')');
        unsigned long long ut, stime;
        if (p != NULL &&
            sscanf(p + 1,
                   " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                   &ut, &stime) == 2)
            ticks += (double)(ut + stime);
    }
    fclose(f);
    return ticks * 1e6 / (double)sysconf(_SC_CLK_TCK);
}

static int job_cpu;

/* time `iters` calls of op() after a barrier; rank 0 prints */
static void measure(const char *name, int bytes, int iters, int rank,
                    void (*op)(int), int n)
{
    PMPI_Barrier(MPI_COMM_WORLD);
    machine_t m0 = rank == 0 ? machine() : (machine_t){0, 0};
    double f0 = rank == 0 && job_cpu ? fabric_cpu_us() : 0;
    double c0 = self_cpu_us();
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        op(n);
    double us = (MPI_Wtime() - t0) * 1e6 / iters, max;
    double cpu = self_cpu_us() - c0, cpus = 0;
    machine_t m1 = rank == 0 ? machine() : (machine_t){0, 0};
    double f1 = rank == 0 && job_cpu ? fabric_cpu_us() : 0;
    MPI_Reduce(&us, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (job_cpu)
        MPI_Reduce(&cpu, &cpus, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double tick_us = 1e6 / (double)sysconf(_SC_CLK_TCK);
        printf("%s %d %.2f %.1f %.1f", name, bytes, max,
               (double)(m1.busy - m0.busy) * tick_us / iters,
               (double)(m1.ctxt - m0.ctxt) / iters);
        if (job_cpu)
            printf(" %.1f", (cpus + f1 - f0) / iters);
        printf("\n");
        fflush(stdout);
    }
}

static float *a, *b;

static void allreduce(int n)
{
    MPI_Allreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* the non-blocking form, waited for at once: its cost next to the
 * blocking one's */
static void iallreduce(int n)
{
    MPI_Request r;
    MPI_Iallreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
}

/* from a rank that moves with the iterations: every node's turn */
static void bcast(int n)
{
    static int it;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Bcast(a, n, MPI_FLOAT, (it++ * 7) % size, MPI_COMM_WORLD);
}

static void barrier(int n)
{
    (void)n;
    MPI_Barrier(MPI_COMM_WORLD);
}

/* SHARP_BENCH_COMM=1's loops: a communicator made, used (n: one 8-byte
 * allreduce) or not, and freed */
static void comm_cycle(int n)
{
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    if (n > 0) {
        MPI_Allreduce(a, b, n, MPI_FLOAT, MPI_SUM, c);
    }
    MPI_Comm_free(&c);
}

static void comm_section(int rank, double scale)
{
    int iters = (int)(40 * scale) > 3 ? (int)(40 * scale) : 3;
    for (int i = 0; i < 3; i++)
        comm_cycle(2);
    measure("comm_use", 0, iters, rank, comm_cycle, 2);
    measure("comm_bare", 0, iters, rank, comm_cycle, 0);
}

/* SHARP_BENCH_LARGE=1: large allreduces with a barrier between calls, as
 * OSU's osu_allreduce measures them (many codes have one: calls never
 * overlap), only the allreduce timed: "allreduce_b BYTES US" lines */
static void large_section(int rank, double scale)
{
    static const int sizes[] = {524288,  1000000, 1048576, 2097152,
                                4194304, 8388608, 16777216};
    int iters = (int)(40 * scale) > 3 ? (int)(40 * scale) : 3;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        int n = sizes[k] / 4;
        double sum = 0, max;
        for (int i = -3; i < iters; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            allreduce(n);
            if (i >= 0)
                sum += MPI_Wtime() - t0;
        }
        double us = sum * 1e6 / iters;
        MPI_Reduce(&us, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("allreduce_b %d %.2f\n", sizes[k], max);
            fflush(stdout);
        }
    }
}

/* bytes sent on the loopback interface so far (/proc/net/dev) */
static double lo_bytes(void)
{
    char line[512];
    double v = 0;
    FILE *f = fopen("/proc/net/dev", "r");
    while (f != NULL && fgets(line, sizeof(line), f)) {
        unsigned long long rx, skip, tx;
        if (sscanf(line, " lo: %llu %llu %llu %llu %llu %llu %llu %llu %llu",
                   &rx, &skip, &skip, &skip, &skip, &skip, &skip, &skip,
                   &tx) == 9)
            v = (double)tx;
    }
    if (f != NULL)
        fclose(f);
    return v;
}

/* SHARP_BENCH_SPARSE=1: mostly-zero float sums ("sparse_dD" lines) */
static void sparse_section(int rank, double scale)
{
    static const int sizes[] = {1 << 20, 1 << 22, 1 << 24},
                     dens[] = {1, 10, 50, 100};
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        int n = sizes[k] / 4;
        for (size_t d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
            unsigned s = (unsigned)(rank * 7919 + k * 31 + d + 1);
            memset(a, 0, (size_t)n * sizeof(float));
            for (int blk = 0; blk < n / 256; blk++) {
                s = s * 1103515245u + 12345u;
                if ((int)((s >> 8) % 100) >= dens[d])
                    continue;
                for (int i = 0; i < 256; i++)
                    a[blk * 256 + i] = (float)((s >> 4) % 1000 + i) / 8.0f;
            }
            /* enough for a median, but in a tiny run (tests) */
            int least = scale < 0.1 ? 2 : sizes[k] > (1 << 22) ? 10 : 25;
            int iters = (int)(least * 2 * scale);
            iters = iters > least ? iters : least;
            for (int i = 0; i < 2; i++)
                allreduce(n);
            char name[32];
            snprintf(name, sizeof(name), "sparse_d%d", dens[d]);
            double w0 = rank == 0 ? lo_bytes() : 0;
            measure(name, sizes[k], iters, rank, allreduce, n);
            if (rank == 0) {
                printf("wire %s %d %.0f\n", name, sizes[k],
                       (lo_bytes() - w0) / iters / size);
                fflush(stdout);
            }
        }
    }
}

int main(int argc, char **argv)
{
    int rank;
    /* SHARP_BENCH_SCALE: a fraction of the iterations (quick runs) */
    const char *sc = getenv("SHARP_BENCH_SCALE");
    double scale = sc ? atof(sc) : 1.0;
    const char *q = getenv("SHARP_BENCH_QUICK");
    int quick = q != NULL && atoi(q) == 1;
    const char *jc = getenv("SHARP_BENCH_JOB_CPU");
    job_cpu = jc != NULL && atoi(jc) == 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *cm = getenv("SHARP_BENCH_COMM");
    if (cm != NULL && atoi(cm) == 1) {
        a = calloc(2, sizeof(float));
        b = calloc(2, sizeof(float));
        comm_section(rank, scale);
        free(a);
        free(b);
        MPI_Finalize();
        return 0;
    }
    const char *sp = getenv("SHARP_BENCH_SPARSE");
    if (sp != NULL && atoi(sp) == 1) {
        a = calloc(1 << 22, sizeof(float)); /* 16 MiB */
        b = calloc(1 << 22, sizeof(float));
        sparse_section(rank, scale);
        free(a);
        free(b);
        MPI_Finalize();
        return 0;
    }
    const char *lg = getenv("SHARP_BENCH_LARGE");
    if (lg != NULL && atoi(lg) == 1) {
        a = calloc(1 << 22, sizeof(float)); /* 16 MiB */
        b = calloc(1 << 22, sizeof(float));
        for (int i = 0; i < 1 << 22; i++) /* dense, as above */
            a[i] = (float)(i % 1000 + 1);
        large_section(rank, scale);
        free(a);
        free(b);
        MPI_Finalize();
        return 0;
    }
    a = calloc(1 << 18, sizeof(float));
    b = calloc(1 << 18, sizeof(float));
    /* dense data: a buffer of zeros would go sparse (SHARP_COLL_SPARSE_MIN) */
    for (int i = 0; i < 1 << 18; i++)
        a[i] = (float)(i % 1000 + 1);
    static const int sizes[] = {8, 64, 512, 4096, 65536, 262144, 1048576};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        int bytes = sizes[k], n = bytes / 4;
        if (quick && bytes != 8 && bytes != 4096) {
            continue;
        }
        int iters = bytes <= 4096 ? 1500 : bytes <= 65536 ? 100 : 60;
        iters = (int)(iters * scale) > 5 ? (int)(iters * scale) : 5;
        for (int i = 0; i < 10; i++)
            allreduce(n);
        measure("allreduce", bytes, iters, rank, allreduce, n);
        if (!quick && (bytes == 8 || bytes == 4096 || bytes == 65536)) {
            for (int i = 0; i < 10; i++)
                iallreduce(n);
            measure("iallreduce", bytes, iters, rank, iallreduce, n);
        }
    }
    static const int bsizes[] = {8, 4096, 1048576};
    for (size_t k = 0; k < sizeof(bsizes) / sizeof(bsizes[0]); k++) {
        int bytes = bsizes[k];
        if (quick && bytes > 4096) {
            continue;
        }
        int iters = bytes <= 4096 ? 1500 : 60;
        iters = (int)(iters * scale) > 5 ? (int)(iters * scale) : 5;
        for (int i = 0; i < 10; i++)
            bcast(bytes / 4);
        measure("bcast", bytes, iters, rank, bcast, bytes / 4);
    }
    for (int i = 0; i < 10; i++)
        barrier(0);
    measure("barrier", 0, (int)(1500 * scale) > 5 ? (int)(1500 * scale) : 5,
            rank, barrier, 0);
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
