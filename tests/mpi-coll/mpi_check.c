/*
 * mpi_check: an MPI program (it knows nothing of sharp) that checks every
 * collective libsharp_mpi offloads, against references computed here:
 *
 *   - MPI_Allreduce and MPI_Reduce (every root) for every predefined op on
 *     every type MPI allows it on (integer types: all ten; float and
 *     double: MAX, MIN, SUM, PROD), MINLOC/MAXLOC on MPI_2INT, MPI_FLOAT_INT,
 *     MPI_DOUBLE_INT, MPI_LONG_INT; counts 0, 1, 1000 and 1M (one type);
 *     in place and not
 *   - MPI_Bcast from every root, 0 to 100000 bytes
 *   - MPI_Barrier ordering: nobody leaves before everyone entered
 *   - communicators from split, dup and create, used and freed in loops;
 *     with --hold FILE rank 0 creates FILE after the loops and waits until
 *     it is removed (the test looks at the manager's groups meanwhile)
 *
 * Exit 0 when every check passed (the count of failures otherwise).
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int rank, size, errors;

#define FAIL(...)                                                              \
    do {                                                                       \
        if (errors++ < 20) {                                                   \
            fprintf(stderr, "rank %d: ", rank);                                \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

/* value i of rank r: small, so sums and products of a few ranks fit in
 * every type (products: -1, 1 or 2) */
static long gen(int r, long i, int op_is_prod)
{
    long x = (r * 7 + i * 13 + 3) % 23 - 11;
    return op_is_prod ? (x % 3 == 0 ? 2 : (x > 0 ? 1 : -1)) : x;
}

enum {
    OP_MAX,
    OP_MIN,
    OP_SUM,
    OP_PROD,
    OP_LAND,
    OP_BAND,
    OP_LOR,
    OP_BOR,
    OP_LXOR,
    OP_BXOR,
    NOPS
};
static MPI_Op mpi_op(int o)
{
    MPI_Op t[] = {MPI_MAX,  MPI_MIN, MPI_SUM, MPI_PROD, MPI_LAND,
                  MPI_BAND, MPI_LOR, MPI_BOR, MPI_LXOR, MPI_BXOR};
    return t[o];
}
static const char *op_name[] = {"MAX",  "MIN", "SUM", "PROD", "LAND",
                                "BAND", "LOR", "BOR", "LXOR", "BXOR"};

/* one typed check: allreduce (root < 0) or reduce to root */
#define TYPED_CHECK(T, MT, IS_FLOAT)                                           \
    static void check_##MT(int o, long n, int root, int inplace)               \
    {                                                                          \
        if (IS_FLOAT && o > OP_PROD)                                           \
            return;                                                            \
        T *s = calloc((size_t)n + 1, sizeof(T)),                               \
          *d = calloc((size_t)n + 1, sizeof(T));                               \
        for (long i = 0; i < n; i++) {                                         \
            s[i] = (T)gen(rank, i, o == OP_PROD);                              \
            d[i] = (T)77;                                                      \
        }                                                                      \
        void *sb = s, *rb = d;                                                 \
        if (inplace && (root < 0 || root == rank)) {                           \
            sb = MPI_IN_PLACE;                                                 \
            rb = s;                                                            \
        }                                                                      \
        if (root < 0)                                                          \
            MPI_Allreduce(sb, rb, (int)n, MT, mpi_op(o), MPI_COMM_WORLD);      \
        else                                                                   \
            MPI_Reduce(sb, rb, (int)n, MT, mpi_op(o), root, MPI_COMM_WORLD);   \
        T *res = (T *)rb;                                                      \
        for (long i = 0; (root < 0 || root == rank) && i < n; i++) {           \
            T w = (T)gen(0, i, o == OP_PROD);                                  \
            for (int r = 1; r < size; r++) {                                   \
                T x = (T)gen(r, i, o == OP_PROD);                              \
                switch (o) {                                                   \
                case OP_MAX: w = x > w ? x : w; break;                         \
                case OP_MIN: w = x < w ? x : w; break;                         \
                case OP_SUM: w = (T)(w + x); break;                            \
                case OP_PROD: w = (T)(w * x); break;                           \
                case OP_LAND: w = (T)(w && x); break;                          \
                case OP_LOR: w = (T)(w || x); break;                           \
                case OP_LXOR: w = (T)(!w != !x); break;                        \
                default: w = BITOP(T, o, w, x); break;                         \
                }                                                              \
            }                                                                  \
            if (o == OP_LAND || o == OP_LOR || o == OP_LXOR) {                 \
                /* only truth matters */                                       \
                if (!res[i] != !w) {                                           \
                    FAIL(#MT " %s n=%ld root=%d [%ld] wrong", op_name[o], n,   \
                         root, i);                                             \
                    break;                                                     \
                }                                                              \
            } else if (memcmp(&res[i], &w, sizeof(T)) != 0) {                  \
                FAIL(#MT " %s n=%ld root=%d [%ld] wrong", op_name[o], n, root, \
                     i);                                                       \
                break;                                                         \
            }                                                                  \
        }                                                                      \
        if (root >= 0 && root != rank && !inplace && n > 0 && d[0] != (T)77)   \
            FAIL(#MT " reduce wrote a non-root's buffer");                     \
        free(s);                                                               \
        free(d);                                                               \
    }

#define BITOP(T, o, a, b)                                                      \
    (T)((o) == OP_BAND  ? (unsigned long long)(a) & (unsigned long long)(b)    \
        : (o) == OP_BOR ? (unsigned long long)(a) | (unsigned long long)(b)    \
                        : (unsigned long long)(a) ^ (unsigned long long)(b))

TYPED_CHECK(int, MPI_INT, 0)
TYPED_CHECK(unsigned, MPI_UNSIGNED, 0)
TYPED_CHECK(long, MPI_LONG, 0)
TYPED_CHECK(unsigned long, MPI_UNSIGNED_LONG, 0)
TYPED_CHECK(long long, MPI_LONG_LONG, 0)
TYPED_CHECK(short, MPI_SHORT, 0)
TYPED_CHECK(unsigned short, MPI_UNSIGNED_SHORT, 0)
TYPED_CHECK(signed char, MPI_SIGNED_CHAR, 0)
TYPED_CHECK(unsigned char, MPI_UNSIGNED_CHAR, 0)
TYPED_CHECK(int8_t, MPI_INT8_T, 0)
TYPED_CHECK(uint8_t, MPI_UINT8_T, 0)
TYPED_CHECK(int16_t, MPI_INT16_T, 0)
TYPED_CHECK(uint16_t, MPI_UINT16_T, 0)
TYPED_CHECK(int32_t, MPI_INT32_T, 0)
TYPED_CHECK(uint32_t, MPI_UINT32_T, 0)
TYPED_CHECK(int64_t, MPI_INT64_T, 0)
TYPED_CHECK(uint64_t, MPI_UINT64_T, 0)
TYPED_CHECK(float, MPI_FLOAT, 1)
TYPED_CHECK(double, MPI_DOUBLE, 1)

typedef void (*check_fn)(int, long, int, int);
static const check_fn checks[] = {check_MPI_INT,
                                  check_MPI_UNSIGNED,
                                  check_MPI_LONG,
                                  check_MPI_UNSIGNED_LONG,
                                  check_MPI_LONG_LONG,
                                  check_MPI_SHORT,
                                  check_MPI_UNSIGNED_SHORT,
                                  check_MPI_SIGNED_CHAR,
                                  check_MPI_UNSIGNED_CHAR,
                                  check_MPI_INT8_T,
                                  check_MPI_UINT8_T,
                                  check_MPI_INT16_T,
                                  check_MPI_UINT16_T,
                                  check_MPI_INT32_T,
                                  check_MPI_UINT32_T,
                                  check_MPI_INT64_T,
                                  check_MPI_UINT64_T,
                                  check_MPI_FLOAT,
                                  check_MPI_DOUBLE};
#define NCHECKS (int)(sizeof(checks) / sizeof(checks[0]))

/* MINLOC / MAXLOC on the pair types (ties: the lowest index wins) */
#define LOC_CHECK(VT, MT)                                                      \
    static void loc_##MT(int maxloc, int root)                                 \
    {                                                                          \
        struct {                                                               \
            VT v;                                                              \
            int i;                                                             \
        } s[50], d[50];                                                        \
        for (int k = 0; k < 50; k++) {                                         \
            s[k].v = (VT)((rank * 3 + k) % 5);                                 \
            s[k].i = rank * 10 + k % 3;                                        \
        }                                                                      \
        MPI_Op op = maxloc ? MPI_MAXLOC : MPI_MINLOC;                          \
        if (root < 0)                                                          \
            MPI_Allreduce(s, d, 50, MT, op, MPI_COMM_WORLD);                   \
        else                                                                   \
            MPI_Reduce(s, d, 50, MT, op, root, MPI_COMM_WORLD);                \
        for (int k = 0; (root < 0 || root == rank) && k < 50; k++) {           \
            VT bv = (VT)((0 * 3 + k) % 5);                                     \
            int bi = k % 3;                                                    \
            for (int r = 1; r < size; r++) {                                   \
                VT x = (VT)((r * 3 + k) % 5);                                  \
                int xi = r * 10 + k % 3;                                       \
                if (maxloc ? x > bv : x < bv) {                                \
                    bv = x;                                                    \
                    bi = xi;                                                   \
                } else if (x == bv && xi < bi) {                               \
                    bi = xi;                                                   \
                }                                                              \
            }                                                                  \
            if (d[k].v != bv || d[k].i != bi) {                                \
                FAIL(#MT " %s root=%d [%d]", maxloc ? "MAXLOC" : "MINLOC",     \
                     root, k);                                                 \
                break;                                                         \
            }                                                                  \
        }                                                                      \
    }
LOC_CHECK(int, MPI_2INT)
LOC_CHECK(float, MPI_FLOAT_INT)
LOC_CHECK(double, MPI_DOUBLE_INT)
LOC_CHECK(long, MPI_LONG_INT)

static void bcasts(void)
{
    static const int lens[] = {0, 1, 7, 4096, 100000};
    for (int root = 0; root < size; root++) {
        for (int l = 0; l < 5; l++) {
            int n = lens[l];
            unsigned char *b = malloc((size_t)n + 1);
            for (int i = 0; i < n; i++)
                b[i] = rank == root ? (unsigned char)(i * 5 + root) : 0xee;
            MPI_Bcast(b, n, MPI_BYTE, root, MPI_COMM_WORLD);
            for (int i = 0; i < n; i++)
                if (b[i] != (unsigned char)(i * 5 + root)) {
                    FAIL("bcast root %d len %d [%d]", root, n, i);
                    break;
                }
            free(b);
        }
        double dv[3] = {rank == root ? 1.5 : 0, rank == root ? -2.25 : 0,
                        rank == root ? 1e300 : 0};
        MPI_Bcast(dv, 3, MPI_DOUBLE, root, MPI_COMM_WORLD);
        if (dv[0] != 1.5 || dv[1] != -2.25 || dv[2] != 1e300)
            FAIL("bcast doubles from %d", root);
    }
}

/* one clock for every process of the machine (MPI_Wtime may not be) */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* nobody leaves the barrier before everyone entered it */
static void barrier_order(void)
{
    for (int round = 0; round < 5; round++) {
        usleep((useconds_t)(((rank + round) % size) * 2000));
        double in = now();
        MPI_Barrier(MPI_COMM_WORLD);
        double out = now(), all_in[256];
        MPI_Allgather(&in, 1, MPI_DOUBLE, all_in, 1, MPI_DOUBLE,
                      MPI_COMM_WORLD);
        for (int r = 0; r < size && r < 256; r++)
            if (all_in[r] > out)
                FAIL("left the barrier before rank %d entered it", r);
    }
}

static void comm_loops(void)
{
    MPI_Group world_group, even_group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    int evens[128], ne = 0;
    for (int r = 0; r < size && ne < 128; r += 2)
        evens[ne++] = r;
    MPI_Group_incl(world_group, ne, evens, &even_group);
    for (int it = 0; it < 10; it++) {
        MPI_Comm half, dup, even;
        MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        MPI_Comm_create(MPI_COMM_WORLD, even_group, &even);
        int x = rank + it, s1 = 0, s2 = 0, s3 = 0, w1 = 0, w2 = 0, w3 = 0;
        MPI_Allreduce(&x, &s1, 1, MPI_INT, MPI_SUM, half);
        MPI_Allreduce(&x, &s2, 1, MPI_INT, MPI_SUM, dup);
        if (even != MPI_COMM_NULL)
            MPI_Allreduce(&x, &s3, 1, MPI_INT, MPI_SUM, even);
        for (int r = 0; r < size; r++) {
            w2 += r + it;
            if (r % 2 == rank % 2)
                w1 += r + it;
            if (r % 2 == 0)
                w3 += r + it;
        }
        if (s1 != w1 || s2 != w2 || (even != MPI_COMM_NULL && s3 != w3))
            FAIL("communicator loop %d: %d/%d %d/%d %d/%d", it, s1, w1, s2, w2,
                 s3, w3);
        MPI_Comm_free(&half);
        MPI_Comm_free(&dup);
        if (even != MPI_COMM_NULL)
            MPI_Comm_free(&even);
    }
    MPI_Group_free(&even_group);
    MPI_Group_free(&world_group);
}

int main(int argc, char **argv)
{
    const char *hold = NULL;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int a = 1; a + 1 < argc; a++)
        if (!strcmp(argv[a], "--hold"))
            hold = argv[a + 1];

    for (int c = 0; c < NCHECKS; c++)
        for (int o = 0; o < NOPS; o++) {
            checks[c](o, 0, -1, 0);
            checks[c](o, 1, -1, 0);
            checks[c](o, 1000, -1, c % 2);
            checks[c](o, 1000, (c + o) % size, o % 2);
        }
    /* every root, a few types and ops */
    for (int root = 0; root < size; root++) {
        check_MPI_INT(OP_SUM, 100, root, root % 2);
        check_MPI_DOUBLE(OP_MAX, 100, root, 0);
        check_MPI_UINT8_T(OP_BXOR, 100, root, 0);
    }
    /* 1M elements, pipelined */
    check_MPI_INT(OP_SUM, 1 << 20, -1, 0);
    check_MPI_DOUBLE(OP_MIN, 1 << 20, -1, 1);
    for (int m = 0; m < 2; m++) {
        loc_MPI_2INT(m, -1);
        loc_MPI_FLOAT_INT(m, -1);
        loc_MPI_DOUBLE_INT(m, -1);
        loc_MPI_LONG_INT(m, -1);
        loc_MPI_DOUBLE_INT(m, size - 1);
    }
    bcasts();
    barrier_order();
    comm_loops();
    if (hold != NULL) {
        if (rank == 0) {
            FILE *f = fopen(hold, "w");
            if (f)
                fclose(f);
            struct stat st;
            for (int i = 0; i < 400 && stat(hold, &st) == 0; i++)
                usleep(50000);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_check: %d ranks: %s\n", size,
               total ? "FAILURES" : "every check passed");
    MPI_Finalize();
    return total > 125 ? 125 : total;
}
