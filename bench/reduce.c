/*
 * bench_reduce: throughput of the fixed-order fold against the memory
 * bandwidth measured in the same run.
 *
 * A fold of `children` payloads of `bytes` each reads children x bytes and
 * writes bytes: its working set is ws = (children + 1) x bytes.  memcpy is
 * timed in the same run over the same working set (ws/2 bytes copied into
 * another ws/2), so both run from the same level of the memory hierarchy.
 *
 *   memcpy rate = bytes copied per second
 *   ratio       = ((children + 1) x bytes / memcpy rate) / fold time
 *                 (the bound: 1.0 = the fold takes as long as
 *                 copying its whole working set)
 *   traffic     = ratio / 2: fold bytes moved per second over memcpy bytes
 *                 moved (read + written) per second; 1.0 = the fold streams
 *                 memory as fast as memcpy does
 *
 * It prints the variant the engine picked (or SHP_REDUCE_ISA forced) and
 * the kernel each kind runs on ("avx512 fused", "avx2 pairwise", ...).
 *
 * Usage: bench_reduce [--quick]    (SHP_REDUCE_ISA=generic|avx2|avx512)
 */
#include "reduce/reduce.h"
#include "core/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double best_of(int reps, double min_secs, void (*fn)(void *arg),
                      void *arg)
{
    double best = 1e30;
    int r;

    for (r = 0; r < reps; r++) {
        uint64_t t0 = shp_time_ns();
        long iters = 0;
        double secs;
        do {
            fn(arg);
            iters++;
            secs = (double)(shp_time_ns() - t0) / 1e9;
        } while (secs < min_secs);
        if (secs / (double)iters < best) {
            best = secs / (double)iters;
        }
    }
    return best;
}

typedef struct {
    void *dst;
    const void *copy_src;
    void *copy_dst;
    size_t copy_bytes;
    const void *const *srcs;
    unsigned n;
    size_t bytes;
    shp_reduce_desc_t desc;
    size_t count;
} job_t;

static void do_memcpy(void *arg)
{
    job_t *j = arg;

    memcpy(j->copy_dst, j->copy_src, j->copy_bytes);
    __asm__ volatile("" ::: "memory");
}

static void do_fold(void *arg)
{
    job_t *j = arg;

    if (shp_reduce_fold(&j->desc, j->dst, j->srcs, j->n, j->count) != SHP_OK) {
        abort();
    }
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {4096, 65536, 1 << 20, 4 << 20, 16 << 20};
    static const unsigned children[] = {2, 8, 16};
    static const struct {
        const char *name;
        shp_reduce_desc_t desc;
    } kinds[] = {
        {"f32_sum", {SHP_DTYPE_F32, SHP_OP_SUM, SHP_DTYPE_NULL}},
        {"i64_band", {SHP_DTYPE_I64, SHP_OP_BAND, SHP_DTYPE_NULL}},
        {"bf16_sum", {SHP_DTYPE_BF16, SHP_OP_SUM, SHP_DTYPE_NULL}},
        {"f16_sum", {SHP_DTYPE_F16, SHP_OP_SUM, SHP_DTYPE_NULL}},
    };
    enum { NKINDS = sizeof(kinds) / sizeof(kinds[0]) };
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    size_t nsizes = quick ? 3 : sizeof(sizes) / sizeof(sizes[0]);
    double min_secs = quick ? 0.02 : 0.1;
    size_t maxb = sizes[nsizes - 1];
    uint8_t *bufs[16], *dst, *copy_src, *copy_dst;
    const void *srcs[16];
    double worst_16x[NKINDS];
    size_t si, ki, ci, i;

    for (i = 0; i < 16; i++) {
        bufs[i] = aligned_alloc(64, maxb);
        if (bufs[i] == NULL) {
            return 1;
        }
        for (size_t b = 0; b < maxb; b += 2) { /* small normal values */
            bufs[i][b] = (uint8_t)(i + b);
            bufs[i][b + 1] = 0x3f;
        }
        srcs[i] = bufs[i];
    }
    dst = aligned_alloc(64, maxb);
    memset(dst, 0, maxb);
    copy_src = aligned_alloc(64, maxb * 17 / 2 + 64);
    copy_dst = aligned_alloc(64, maxb * 17 / 2 + 64);
    if (copy_src == NULL || copy_dst == NULL) {
        return 1;
    }
    memset(copy_src, 1, maxb * 17 / 2 + 64);
    memset(copy_dst, 0, maxb * 17 / 2 + 64);

    for (ki = 0; ki < NKINDS; ki++) {
        worst_16x[ki] = 1e30;
    }
    printf("reduction kernels: %s\n",
           shp_reduce_isa_name(shp_reduce_get_isa()));
    for (ki = 0; ki < NKINDS; ki++) {
        printf("  %-9s %s\n", kinds[ki].name,
               shp_reduce_kernel_name(&kinds[ki].desc));
    }
    printf("%-9s %8s %4s %11s %11s %11s %7s %7s\n", "kind", "bytes", "ch",
           "memcpy GB/s", "fold us", "in GB/s", "ratio", "traffic");
    for (si = 0; si < nsizes; si++) {
        size_t bytes = sizes[si];

        for (ci = 0; ci < sizeof(children) / sizeof(children[0]); ci++) {
            job_t j = {dst, copy_src, copy_dst, 0, srcs, 1, bytes, {0}, 0};
            double t_copy, copy_rate;

            /* memcpy over the fold's working set, in this run */
            j.copy_bytes = (children[ci] + 1) * bytes / 2;
            t_copy = best_of(5, min_secs, do_memcpy, &j);
            copy_rate = (double)j.copy_bytes / t_copy;
            for (ki = 0; ki < sizeof(kinds) / sizeof(kinds[0]); ki++) {
                double t, bound, ratio;
                j.desc = kinds[ki].desc;
                j.n = children[ci];
                j.count = bytes / shp_reduce_elem_size(&j.desc);
                t = best_of(5, min_secs, do_fold, &j);
                bound = (double)(children[ci] + 1) * (double)bytes / copy_rate;
                ratio = bound / t;
                printf("%-9s %8zu %4u %11.2f %11.2f %11.2f %7.2f %7.2f\n",
                       kinds[ki].name, bytes, children[ci], copy_rate / 1e9,
                       t * 1e6, (double)children[ci] * (double)bytes / t / 1e9,
                       ratio, ratio / 2);
                if (children[ci] == 16 && bytes >= (1 << 20) &&
                    ratio < worst_16x[ki]) {
                    worst_16x[ki] = ratio;
                }
            }
        }
    }
    for (i = 0; i < 16; i++) {
        free(bufs[i]);
    }
    free(dst);
    free(copy_src);
    free(copy_dst);
    printf("(ratio: memory-bandwidth bound / fold time; RESULT: the lowest "
           "16-child ratio at >= 1 MiB of each float sum)\n");
    printf("RESULT fold_f32_sum_16x_ratio=%.2f fold_bf16_sum_16x_ratio=%.2f "
           "fold_f16_sum_16x_ratio=%.2f\n",
           worst_16x[0], worst_16x[2], worst_16x[3]);
    return 0;
}
