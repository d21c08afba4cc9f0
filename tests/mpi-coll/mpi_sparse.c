/*
 * Mostly-zero allreduces through libsharp_mpi (tests/mpi-coll/
 * test_sparse_mpi.sh): every type sharp carries with MPI_SUM, the integer
 * ones with MPI_BOR, MPI_BXOR and MPI_LOR too, buffers of about 160 KiB
 * (several fragments) whose 1 KiB blocks are non-zero at a density drawn
 * per rank and case (0, 1, 10, 50 or 100 %, and runs that do not keep to
 * the blocks), floats among signed zeros, denormals, infinities and NaNs
 * with payloads.  Every other case goes by MPI_Iallreduce.
 *
 * Prints a line per case and pass, "mpi_sparse: case TYPE OP TRIAL HASH" (the
 * result's bits, FNV-1a), which the script compares between a run with
 * sparse fragments and one without; integer results are also checked here
 * against the sum made from every rank's data (each rank makes any rank's
 * data from its seed): order does not change them.  Last line:
 * "mpi_sparse: N cases, K integer results wrong".  --iters N: everything N
 * times (the fault run); --signal FILE: rank 0 makes FILE after the first
 * time (the fault run's cue).
 */
#include <mpi.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bits.h"

#define BLOCK 1024

typedef struct {
    MPI_Datatype t;
    const char *name;
    int size, is_float, is_signed;
} type_t;

static const type_t types[] = {
    {MPI_FLOAT, "float", 4, 1, 1},   {MPI_DOUBLE, "double", 8, 1, 1},
    {MPI_INT8_T, "int8", 1, 0, 1},   {MPI_UINT8_T, "uint8", 1, 0, 0},
    {MPI_INT16_T, "int16", 2, 0, 1}, {MPI_UINT16_T, "uint16", 2, 0, 0},
    {MPI_INT32_T, "int32", 4, 0, 1}, {MPI_UINT32_T, "uint32", 4, 0, 0},
    {MPI_INT64_T, "int64", 8, 0, 1}, {MPI_UINT64_T, "uint64", 8, 0, 0},
};
#define NTYPES (int)(sizeof(types) / sizeof(types[0]))

/* a float's bits: many kinds, for the fold's corner cases */
static uint64_t float_bits(const type_t *ty, uint64_t r)
{
    int d = ty->size == 8;
    switch (r % 10) {
    case 0: return d ? 0x8000000000000000ull : 0x80000000u; /* -0 */
    case 1: return d ? 0x1ull + (r >> 40) : 0x1u + ((r >> 40) & 0xffff);
    case 2: /* a NaN with a payload, quiet or signalling */
        return d ? 0x7ff0000000000001ull | (r >> 20 & 0xfffffffffull)
                 : 0x7f800001u | (uint32_t)(r >> 40 & 0x3fffff);
    case 3: return d ? 0xfff0000000000000ull : 0xff800000u; /* -inf */
    default: {
        double v = (double)(int64_t)(r >> 20 & 0xfffff) / 64.0 - 8000.0;
        if (d) {
            uint64_t u;
            memcpy(&u, &v, 8);
            return u;
        }
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        return u;
    }
    }
}

/* rank's data for case c: blocks non-zero at its density */
static void make(const type_t *ty, int rank, int c, uint8_t *buf, size_t n)
{
    static const int dens[] = {0, 1, 10, 50, 100};
    uint64_t seed = mix(((uint64_t)rank << 40) ^ ((uint64_t)c << 8) ^ 77);
    int density = dens[seed % 5], runs = (seed >> 8) % 4 == 0;
    memset(buf, 0, n);
    for (size_t off = 0; off < n; off += BLOCK) {
        uint64_t r = mix(seed ^ off);
        if ((int)(r % 100) >= density)
            continue;
        size_t from = off, to = off + BLOCK < n ? off + BLOCK : n;
        if (runs) { /* a run that does not keep to the block */
            from = off + (r >> 8) % BLOCK;
            to = from + 1 + (r >> 20) % (2 * BLOCK);
            to = to < n ? to : n;
            from = from < to ? from : to;
        }
        from -= from % ty->size;
        for (size_t i = from; i + ty->size <= to; i += ty->size) {
            uint64_t x = mix(r ^ i);
            uint64_t v = ty->is_float ? float_bits(ty, x) : x >> 13;
            memcpy(buf + i, &v, ty->size); /* little-endian */
        }
    }
}

/* the integer result from every rank's data (order does not matter) */
static int check_int(const type_t *ty, MPI_Op op, int c, int size,
                     const uint8_t *got, size_t n, uint8_t *tmp)
{
    int wrong = 0;
    size_t cnt = n / ty->size;
    uint64_t *acc = calloc(cnt, sizeof(*acc));
    for (int r = 0; r < size; r++) {
        make(ty, r, c, tmp, n);
        for (size_t i = 0; i < cnt; i++) {
            uint64_t v = 0;
            memcpy(&v, tmp + i * ty->size, ty->size);
            if (op == MPI_SUM)
                acc[i] += v;
            else if (op == MPI_BOR)
                acc[i] |= v;
            else if (op == MPI_BXOR)
                acc[i] ^= v;
            else
                acc[i] = acc[i] || v;
        }
    }
    for (size_t i = 0; i < cnt; i++)
        wrong += memcmp(&acc[i], got + i * ty->size, ty->size) != 0;
    free(acc);
    return wrong;
}

int main(int argc, char **argv)
{
    int rank, size, iters = 1, cases = 0, wrong = 0;
    const char *signal_file = NULL;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--iters"))
            iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--signal"))
            signal_file = argv[i + 1];
    size_t max = 200 * 1024;
    uint8_t *in = malloc(max), *out = malloc(max), *tmp = malloc(max);
    MPI_Op ops[] = {MPI_SUM, MPI_BOR, MPI_BXOR, MPI_LOR};
    const char *opn[] = {"sum", "bor", "bxor", "lor"};
    for (int it = 0; it < iters; it++) {
        for (int c = 0, k = 0; c < NTYPES * 4 * 3; c++) {
            const type_t *ty = &types[c % NTYPES];
            int o = c / NTYPES % 4, trial = c / NTYPES / 4;
            if (o > 0 && ty->is_float)
                continue;
            /* about 160 KiB, a tail that is not a whole block */
            size_t cnt = (160 * 1024 + (size_t)mix(c) % 3000) / ty->size;
            size_t n = cnt * ty->size;
            make(ty, rank, c, in, n);
            memset(out, 0xa5, n);
            if (k++ % 2) {
                MPI_Request rq;
                MPI_Iallreduce(in, out, (int)cnt, ty->t, ops[o], MPI_COMM_WORLD,
                               &rq);
                MPI_Wait(&rq, MPI_STATUS_IGNORE);
            } else {
                MPI_Allreduce(in, out, (int)cnt, ty->t, ops[o], MPI_COMM_WORLD);
            }
            cases++;
            if (!ty->is_float)
                wrong += check_int(ty, ops[o], c, size, out, n, tmp);
            if (rank == 0)
                printf("mpi_sparse: case %s %s %d %016llx\n", ty->name, opn[o],
                       trial, (unsigned long long)fnv(out, n));
        }
        if (rank == 0 && it == 0 && signal_file != NULL) {
            fflush(stdout);
            FILE *f = fopen(signal_file, "w");
            if (f != NULL)
                fclose(f);
        }
    }
    int all = 0;
    MPI_Reduce(&wrong, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_sparse: %d cases, %d integer results wrong\n", cases, all);
    free(in);
    free(out);
    free(tmp);
    MPI_Finalize();
    return all != 0;
}
