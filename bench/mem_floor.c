/*
 * bench_mem_floor: what the passes a mostly-zero allreduce cannot avoid
 * cost on this machine's cores, with no message at all (issue 61).
 *
 *   bench_mem_floor [NP [BYTES [DENSITY_PERCENT [ITERS]]]]
 *   (defaults 8, 16 MiB, 1, 20)
 *
 * NP processes at once, as NP ranks on one machine, each per operation:
 * reads its BYTES of floats for their non-zero 1 KiB blocks
 * (shp_sparse_scan, as a member does), writes the BYTES of the result into
 * a buffer (zeros and the blocks present: shp_sparse_expand, as a member
 * expands a sparse result), and then copies that into a second buffer (as
 * libsharp_mpi copies its recovery record into the program's).  Each
 * rank's blocks are its own, so the result holds NP x DENSITY of them.
 * Timed from every process ready (its buffers touched) to every process
 * done, in two runs: without the record's copy, then with it.  Prints
 *
 *   floor NP BYTES DENSITY US_SCAN_RESULT US_WITH_RECORD
 *
 * the wall time per operation: on 2 cores, the least an allreduce of
 * NP ranks can take here whatever the network does.
 */
#include "core/time.h"
#include "reduce/sparse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 1024

/* one rank: its input, the result, the program's buffer; ready written to
 * `ready` once they are touched, then it waits for a byte on `go` */
static int rank_run(int me, int np, size_t bytes, int density, int iters,
                    int record, int ready, int go)
{
    size_t nb = bytes / BLOCK, bm = shp_sparse_bitmap_bytes(bytes, BLOCK);
    uint8_t *in = aligned_alloc(64, bytes), *res = aligned_alloc(64, bytes),
            *prog = aligned_alloc(64, bytes), *bitmap = calloc(1, bm),
            *all = calloc(1, bm), *packed = aligned_alloc(64, bytes);
    char c = 0;

    if (!in || !res || !prog || !bitmap || !all || !packed) {
        return 1;
    }
    memset(in, 0, bytes);
    memset(res, 1, bytes);
    memset(prog, 1, bytes);
    memset(packed, 0, bytes);
    /* this rank's blocks: every (100 / density)th, shifted by rank; the
     * result's: every rank's */
    size_t step = density > 0 ? (size_t)(100 / density) : 0;
    for (size_t b = (size_t)me % (step + !step); step && b < nb; b += step) {
        ((float *)(in + b * BLOCK))[3] = 1.0f;
    }
    for (int r = 0; step && r < np; r++) {
        for (size_t b = (size_t)r % step; b < nb; b += step) {
            all[b / 8] |= (uint8_t)(1u << (b % 8));
        }
    }
    if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1) {
        return 1;
    }
    size_t found = 0;
    for (int i = 0; i < iters; i++) {
        found += shp_sparse_scan(in, bytes, BLOCK, bitmap, nb);
        shp_sparse_expand(res, bytes, BLOCK, all, packed);
        if (record) {
            memcpy(prog, res, bytes);
        }
    }
    return found == 0 && density > 0; /* (kept: the scan is not dead code) */
}

/* wall us per operation of np ranks at once */
static double run(int np, size_t bytes, int density, int iters, int record)
{
    int ready[2], go[2];
    char c = 0;

    if (pipe(ready) != 0 || pipe(go) != 0) {
        return -1;
    }
    for (int p = 0; p < np; p++) {
        if (fork() == 0) {
            _exit(rank_run(p, np, bytes, density, iters, record, ready[1],
                           go[0]));
        }
    }
    for (int p = 0; p < np; p++) {
        if (read(ready[0], &c, 1) != 1) {
            return -1;
        }
    }
    uint64_t t0 = shp_time_ns();
    for (int p = 0; p < np; p++) {
        if (write(go[1], &c, 1) != 1) {
            return -1;
        }
    }
    int bad = 0, st;
    for (int p = 0; p < np; p++) {
        bad |= wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    double us = (double)(shp_time_ns() - t0) / 1e3 / iters;
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
    return bad ? -1 : us;
}

int main(int argc, char **argv)
{
    int np = argc > 1 ? atoi(argv[1]) : 8;
    size_t bytes = argc > 2 ? strtoul(argv[2], NULL, 0) : 16u << 20;
    int density = argc > 3 ? atoi(argv[3]) : 1;
    int iters = argc > 4 ? atoi(argv[4]) : 20;

    if (np < 1 || bytes < BLOCK || bytes % BLOCK || density < 0 ||
        density > 100 || iters < 1) {
        fprintf(stderr, "usage: bench_mem_floor [NP [BYTES (a multiple of "
                        "1024) [DENSITY 0-100 [ITERS]]]]\n");
        return 2;
    }
    double a = run(np, bytes, density, iters, 0);
    double b = run(np, bytes, density, iters, 1);
    if (a < 0 || b < 0) {
        fprintf(stderr, "bench_mem_floor: a process failed\n");
        return 1;
    }
    printf("floor %d %zu %d %.0f %.0f\n", np, bytes, density, a, b);
    return 0;
}
