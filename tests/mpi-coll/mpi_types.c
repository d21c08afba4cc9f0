/*
 * mpi_types: every named datatype MPI defines (that this MPI library has)
 * x every collective libsharp_mpi offloads, each call compared byte for
 * byte with the same call made through PMPI (which libsharp_mpi does not
 * wrap) on the same inputs.  An ordinary MPI program; it knows nothing of
 * sharp.  One run covers the whole matrix:
 *
 *   - MPI_Allreduce, in place and not, and MPI_Reduce from every root, in
 *     place at the root (the others then pass NULL as rbuf) and not, for
 *     every op MPI defines on the type (MPI-3.1 5.9.2), counts 0, 1, 2, 7,
 *     1000 and one more element than a fragment (--frag, the group's
 *     payload: 4096 bytes by default)
 *   - MPI_Bcast of every named type from every root, same counts
 *   - MPI_Bcast with different types on different ranks (only the type
 *     signatures match): MPI_INT x 4 against a contiguous type, MPI_2INT,
 *     a strided vector, a struct with permuted blocks, absolute addresses
 *     at MPI_BOTTOM, resized types (lb != 0, true lb != 0), an overlapping
 *     send type at the root; MPI_DOUBLE_INT x 2 against equivalent structs
 *   - reductions on derived types and at MPI_BOTTOM (must go to PMPI)
 *   - MPI_Barrier between the types
 *
 * Buffers are filled around the data with a byte pattern, so writing into
 * a hole (MPI_DOUBLE_INT's 4 bytes of padding, MPI_SHORT_INT's 2) or past
 * the data, or into a non-root's receive buffer, shows as a difference;
 * the send buffer must be left alone.
 *
 * Inputs are chosen so that MPI defines the result exactly whatever the
 * order of the reduction: integers of every width with random bits (sums
 * and products wrap), floating-point values whose sums and products are
 * exact (dyadic, no zeros, no NaN), so even float SUM and PROD must match
 * PMPI bit for bit.  When a result differs from PMPI's and the datatype
 * is one sharp carries, it is also compared with a reference folded here
 * in rank order: if ours matches the reference and PMPI's does not, it is
 * counted as the MPI library's defect (Open MPI 4.1.4 and MPICH 4.0.2
 * have some: docs/mpi.md), listed, and not a failure.
 *
 * Rank 0 prints how many calls of each collective libsharp_mpi should
 * have offloaded (summed over the ranks, as its report counts them):
 *   "mpi_types: expect offloaded MPI_Allreduce A MPI_Reduce R MPI_Bcast B
 *    MPI_Barrier C"
 * and "every result matches PMPI" or "FAILURES".  Exit 0 if every check
 * passed.  The test's own bookkeeping uses PMPI, so it is not counted.
 */
#include <mpi.h>

#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, errors;
static long frag = 4096, checks;
static int trace; /* MPI_TYPES_TRACE: 1 rows, 2 calls, 3 PMPI vs reference */
static unsigned long long expect_ar, expect_red, expect_bc, expect_bar;
/* --only A,B,...: these types, "mixed" (bcasts of different types on
 * different ranks), "derived" (reductions on derived types) */
static const char *only;

static int selected(const char *name)
{
    size_t n = strlen(name);
    for (const char *p = only; p != NULL && *p;
         p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return only == NULL;
}

#define FAIL(...)                                                              \
    do {                                                                       \
        if (errors++ < 30) {                                                   \
            fprintf(stderr, "rank %d: ", rank);                                \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

/* ops, in the order of their names */
enum {
    O_MAX,
    O_MIN,
    O_SUM,
    O_PROD,
    O_LAND,
    O_BAND,
    O_LOR,
    O_BOR,
    O_LXOR,
    O_BXOR,
    O_MAXLOC,
    O_MINLOC,
    NOPS
};
static const char *const op_names[NOPS] = {"MAX",  "MIN",  "SUM",    "PROD",
                                           "LAND", "BAND", "LOR",    "BOR",
                                           "LXOR", "BXOR", "MAXLOC", "MINLOC"};
static MPI_Op mpi_op(int o)
{
    MPI_Op t[NOPS] = {MPI_MAX,  MPI_MIN,  MPI_SUM,    MPI_PROD,
                      MPI_LAND, MPI_BAND, MPI_LOR,    MPI_BOR,
                      MPI_LXOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC};
    return t[o];
}
#define B(o) (1u << (o))
#define MINMAX (B(O_MAX) | B(O_MIN))
#define ARITH (B(O_SUM) | B(O_PROD))
#define LOGIC (B(O_LAND) | B(O_LOR) | B(O_LXOR))
#define BITS (B(O_BAND) | B(O_BOR) | B(O_BXOR))
#define LOC (B(O_MAXLOC) | B(O_MINLOC))

/* classes (MPI-3.1 5.9.2): the ops MPI defines on them */
enum cls { C_CINT, C_FINT, C_BYTE, C_FLOAT, C_CPLX, C_LOGICAL, C_PAIR, C_NONE };
static const unsigned class_ops[] = {
    [C_CINT] = MINMAX | ARITH | LOGIC | BITS,
    [C_FINT] = MINMAX | ARITH | BITS, /* and MPI_AINT, _OFFSET, _COUNT */
    [C_BYTE] = BITS,
    [C_FLOAT] = MINMAX | ARITH,
    [C_CPLX] = ARITH,
    [C_LOGICAL] = LOGIC,
    [C_PAIR] = LOC,
    [C_NONE] = 0,
};

/* the kind of a value: signed / unsigned integer, IEEE float or double,
 * long double (or REAL16: opaque, PMPI only), bool or Fortran logical
 * (0 or 1), character bytes */
enum kind { K_S, K_U, K_F, K_LD, K_B, K_C };

/* What libsharp_mpi must offload (docs/mpi.md): OFF_ALL every op MPI
 * defines on the class, OFF_SUM only SUM (complex), 0 nothing. */
enum { OFF_NONE, OFF_ALL, OFF_SUM };

typedef struct {
    const char *name;
    MPI_Datatype dt;
    enum cls cls;
    enum kind vk; /* the values' kind */
    int off;      /* OFF_*: what must be offloaded */
    enum kind ik; /* pairs: the index's kind */
    int isz;      /* pairs: the index's size */
} type_t;

#define T(MT, CLS, VK, OFF)                                                    \
    {                                                                          \
#MT, MT, CLS, VK, OFF, K_S, 0                                          \
    }
#define P(MT, VK, OFF, IK, ISZ)                                                \
    {                                                                          \
#MT, MT, C_PAIR, VK, OFF, IK, ISZ                                      \
    }

static type_t types[] = {
    T(MPI_CHAR, C_NONE, K_C, OFF_NONE),
    T(MPI_WCHAR, C_NONE, K_C, OFF_NONE),
    T(MPI_PACKED, C_NONE, K_C, OFF_NONE),
    T(MPI_CHARACTER, C_NONE, K_C, OFF_NONE),
    T(MPI_BYTE, C_BYTE, K_U, OFF_ALL),
    T(MPI_SIGNED_CHAR, C_CINT, K_S, OFF_ALL),
    T(MPI_UNSIGNED_CHAR, C_CINT, K_U, OFF_ALL),
    T(MPI_SHORT, C_CINT, K_S, OFF_ALL),
    T(MPI_UNSIGNED_SHORT, C_CINT, K_U, OFF_ALL),
    T(MPI_INT, C_CINT, K_S, OFF_ALL),
    T(MPI_UNSIGNED, C_CINT, K_U, OFF_ALL),
    T(MPI_LONG, C_CINT, K_S, OFF_ALL),
    T(MPI_UNSIGNED_LONG, C_CINT, K_U, OFF_ALL),
    T(MPI_LONG_LONG_INT, C_CINT, K_S, OFF_ALL),
    T(MPI_LONG_LONG, C_CINT, K_S, OFF_ALL),
    T(MPI_UNSIGNED_LONG_LONG, C_CINT, K_U, OFF_ALL),
    T(MPI_INT8_T, C_CINT, K_S, OFF_ALL),
    T(MPI_INT16_T, C_CINT, K_S, OFF_ALL),
    T(MPI_INT32_T, C_CINT, K_S, OFF_ALL),
    T(MPI_INT64_T, C_CINT, K_S, OFF_ALL),
    T(MPI_UINT8_T, C_CINT, K_U, OFF_ALL),
    T(MPI_UINT16_T, C_CINT, K_U, OFF_ALL),
    T(MPI_UINT32_T, C_CINT, K_U, OFF_ALL),
    T(MPI_UINT64_T, C_CINT, K_U, OFF_ALL),
    T(MPI_AINT, C_FINT, K_S, OFF_ALL),
    T(MPI_OFFSET, C_FINT, K_S, OFF_ALL),
    T(MPI_COUNT, C_FINT, K_S, OFF_ALL),
    T(MPI_INTEGER, C_FINT, K_S, OFF_ALL),
#ifdef MPI_INTEGER1
    T(MPI_INTEGER1, C_FINT, K_S, OFF_ALL),
#endif
#ifdef MPI_INTEGER2
    T(MPI_INTEGER2, C_FINT, K_S, OFF_ALL),
#endif
#ifdef MPI_INTEGER4
    T(MPI_INTEGER4, C_FINT, K_S, OFF_ALL),
#endif
#ifdef MPI_INTEGER8
    T(MPI_INTEGER8, C_FINT, K_S, OFF_ALL),
#endif
#ifdef MPI_INTEGER16
    T(MPI_INTEGER16, C_FINT, K_S, OFF_NONE),
#endif
    T(MPI_FLOAT, C_FLOAT, K_F, OFF_ALL),
    T(MPI_DOUBLE, C_FLOAT, K_F, OFF_ALL),
    T(MPI_REAL, C_FLOAT, K_F, OFF_ALL),
    T(MPI_DOUBLE_PRECISION, C_FLOAT, K_F, OFF_ALL),
#ifdef MPI_REAL4
    T(MPI_REAL4, C_FLOAT, K_F, OFF_ALL),
#endif
#ifdef MPI_REAL8
    T(MPI_REAL8, C_FLOAT, K_F, OFF_ALL),
#endif
    T(MPI_LONG_DOUBLE, C_FLOAT, K_LD, OFF_NONE),
#ifdef MPI_REAL16
    T(MPI_REAL16, C_FLOAT, K_LD, OFF_NONE),
#endif
    T(MPI_C_COMPLEX, C_CPLX, K_F, OFF_SUM),
    T(MPI_C_FLOAT_COMPLEX, C_CPLX, K_F, OFF_SUM),
    T(MPI_C_DOUBLE_COMPLEX, C_CPLX, K_F, OFF_SUM),
    T(MPI_C_LONG_DOUBLE_COMPLEX, C_CPLX, K_LD, OFF_NONE),
    T(MPI_CXX_FLOAT_COMPLEX, C_CPLX, K_F, OFF_SUM),
    T(MPI_CXX_DOUBLE_COMPLEX, C_CPLX, K_F, OFF_SUM),
    T(MPI_CXX_LONG_DOUBLE_COMPLEX, C_CPLX, K_LD, OFF_NONE),
    T(MPI_COMPLEX, C_CPLX, K_F, OFF_SUM),
    T(MPI_DOUBLE_COMPLEX, C_CPLX, K_F, OFF_SUM),
#ifdef MPI_COMPLEX8
    T(MPI_COMPLEX8, C_CPLX, K_F, OFF_SUM),
#endif
#ifdef MPI_COMPLEX16
    T(MPI_COMPLEX16, C_CPLX, K_F, OFF_SUM),
#endif
#ifdef MPI_COMPLEX32
    T(MPI_COMPLEX32, C_CPLX, K_LD, OFF_NONE),
#endif
    T(MPI_C_BOOL, C_LOGICAL, K_B, OFF_ALL),
    T(MPI_CXX_BOOL, C_LOGICAL, K_B, OFF_ALL),
    T(MPI_LOGICAL, C_LOGICAL, K_B, OFF_NONE),
    P(MPI_2INT, K_S, OFF_ALL, K_S, 4),
    P(MPI_SHORT_INT, K_S, OFF_ALL, K_S, 4),
    P(MPI_LONG_INT, K_S, OFF_ALL, K_S, 4),
    P(MPI_FLOAT_INT, K_F, OFF_ALL, K_S, 4),
    P(MPI_DOUBLE_INT, K_F, OFF_ALL, K_S, 4),
    P(MPI_LONG_DOUBLE_INT, K_LD, OFF_NONE, K_S, 4),
    P(MPI_2INTEGER, K_S, OFF_ALL, K_S, 4),
    P(MPI_2REAL, K_F, OFF_NONE, K_F, 4),
    P(MPI_2DOUBLE_PRECISION, K_F, OFF_NONE, K_F, 8),
/* Open MPI's own (not MPI's): bcast only */
#ifdef MPI_LOGICAL1
    T(MPI_LOGICAL1, C_NONE, K_C, OFF_NONE),
#endif
#ifdef MPI_LOGICAL2
    T(MPI_LOGICAL2, C_NONE, K_C, OFF_NONE),
#endif
#ifdef MPI_LOGICAL4
    T(MPI_LOGICAL4, C_NONE, K_C, OFF_NONE),
#endif
#ifdef MPI_LOGICAL8
    T(MPI_LOGICAL8, C_NONE, K_C, OFF_NONE),
#endif
#ifdef MPI_2COMPLEX
    T(MPI_2COMPLEX, C_NONE, K_C, OFF_NONE),
#endif
#ifdef MPI_2DOUBLE_COMPLEX
    T(MPI_2DOUBLE_COMPLEX, C_NONE, K_C, OFF_NONE),
#endif
};
#define NTYPES (int)(sizeof(types) / sizeof(types[0]))

/* a value's place in an element */
typedef struct {
    int off, size;
    enum kind k;
} field_t;

/* a type's layout, from MPI */
typedef struct {
    const type_t *t;
    int size, nf;
    MPI_Aint ext;
    field_t f[2];
} layout_t;

static int layout_of(const type_t *t, layout_t *l)
{
    MPI_Aint lb, tlb, text;
    memset(l, 0, sizeof(*l));
    l->t = t;
    if (t->dt == MPI_DATATYPE_NULL) {
        return 0;
    }
    MPI_Type_size(t->dt, &l->size);
    MPI_Type_get_extent(t->dt, &lb, &l->ext);
    MPI_Type_get_true_extent(t->dt, &tlb, &text);
    if (lb != 0 || tlb != 0) {
        FAIL("%s: lb %ld, true lb %ld: a named type should have 0", t->name,
             (long)lb, (long)tlb);
        return 0;
    }
    if (t->cls == C_PAIR) {
        l->nf = 2;
        l->f[0] = (field_t){0, l->size - t->isz, t->vk};
        l->f[1] = (field_t){(int)text - t->isz, t->isz, t->ik};
    } else if (t->cls == C_CPLX) {
        l->nf = 2;
        l->f[0] = (field_t){0, l->size / 2, t->vk};
        l->f[1] = (field_t){l->size / 2, l->size / 2, t->vk};
    } else {
        l->nf = 1;
        l->f[0] = (field_t){0, l->size, t->vk};
    }
    return 1;
}

/* must libsharp_mpi offload this op on this type? */
static int offloads(const layout_t *l, int o)
{
    const type_t *t = l->t;
    int s = l->f[0].size;
    if (!(class_ops[t->cls] & B(o)) || t->off == OFF_NONE ||
        (t->off == OFF_SUM && o != O_SUM)) {
        return 0;
    }
    switch (t->vk) {
    case K_S:
    case K_U: return s == 1 || s == 2 || s == 4 || s == 8;
    case K_F: return s == 4 || s == 8;
    case K_B: return s == 1;
    default: return 0;
    }
}

/* Values ----------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* the random word of (call, rank, element, field): any rank's inputs can
 * be made again for the reference */
static uint64_t rnd(uint64_t salt, int r, long i, int f)
{
    return mix(salt ^
               mix(((uint64_t)r << 40) ^ ((uint64_t)i << 3) ^ (uint64_t)f));
}

static void put_float(unsigned char *p, int size, double v)
{
    if (size == 4) {
        float x = (float)v;
        memcpy(p, &x, 4);
    } else if (size == 8) {
        memcpy(p, &v, 8);
    } else { /* long double (x87: 10 bytes of value) or opaque */
        long double x = v;
        memset(p, 0, (size_t)size);
        memcpy(p, &x,
               (size_t)size < sizeof(x) ? (size_t)size
               : LDBL_MANT_DIG == 64    ? 10
                                        : sizeof(x));
    }
}

/* One value for op o (-1: bcast, any bytes). */
static void gen_value(const field_t *f, int o, int pair_value, int pair_index,
                      int cplx, uint64_t h, unsigned char *p)
{
    int sign = (h >> 63) ? -1 : 1;
    if (o < 0 || f->k == K_C) {
        for (int b = 0; b < f->size; b += 8) {
            uint64_t w = mix(h + (uint64_t)b);
            memcpy(p + b, &w, (size_t)(f->size - b < 8 ? f->size - b : 8));
        }
        return;
    }
    switch (f->k) {
    case K_S:
    case K_U: {
        uint64_t v = h;
        if (pair_value) {
            v = h % 5; /* many ties: the lower index must win */
        } else if (pair_index) {
            v = h % 100;
        } else if (o == O_LAND || o == O_LOR || o == O_LXOR) {
            v = h % 4 == 0 ? 0 : (h >> 8) | 1;
        }
        if (f->size <= 8) {
            memcpy(p, &v, (size_t)f->size);
        } else {
            memset(p, 0, (size_t)f->size);
            memcpy(p, &v, 8);
        }
        break;
    }
    case K_B: {
        memset(p, 0, (size_t)f->size);
        p[0] = h % 4 != 0;
        break;
    }
    case K_F:
    case K_LD: {
        double v;
        static const double prod[4] = {0.5, 1, 1.5, 2};
        static const double cprod[4] = {0.5, 1, 2, 1};
        if (pair_value || pair_index) {
            v = (double)(h % (pair_value ? 5 : 100));
        } else if (o == O_SUM) { /* sums of these are exact */
            v = sign * (double)(1 + (h >> 1) % 4096) / 16;
        } else if (o == O_PROD) { /* and products */
            v = sign * (cplx ? cprod : prod)[(h >> 1) & 3];
        } else { /* MAX, MIN: wide range, no zero, no NaN */
            v = sign * (double)(1 + (h >> 1) % (1u << 20));
            for (int e = (int)((h >> 24) % 41) - 20; e > 0; e--)
                v *= 2;
            for (int e = (int)((h >> 24) % 41) - 20; e < 0; e++)
                v /= 2;
        }
        put_float(p, f->size, v);
        break;
    }
    default: break;
    }
}

/* count elements of rank r's input for (salt, op) into buf, whose other
 * bytes (holes) are set to `hole` first */
static void gen_buf(const layout_t *l, long count, int o, uint64_t salt, int r,
                    unsigned char *buf, int hole)
{
    memset(buf, hole, (size_t)(count * l->ext));
    for (long i = 0; i < count; i++) {
        for (int k = 0; k < l->nf; k++) {
            gen_value(&l->f[k], o, l->t->cls == C_PAIR && k == 0,
                      l->t->cls == C_PAIR && k == 1, l->t->cls == C_CPLX,
                      rnd(salt, r, i, k), buf + i * l->ext + l->f[k].off);
        }
    }
}

/* Reference -------------------------------------------------------------- */

static int64_t load_s(const unsigned char *p, int size)
{
    uint64_t v = 0;
    memcpy(&v, p, (size_t)size);
    if (size < 8 && (v >> (size * 8 - 1)) & 1)
        v |= ~0ull << (size * 8);
    return (int64_t)v;
}

static uint64_t load_u(const unsigned char *p, int size)
{
    uint64_t v = 0;
    memcpy(&v, p, (size_t)size);
    return v;
}

static double load_f(const unsigned char *p, int size)
{
    if (size == 4) {
        float x;
        memcpy(&x, p, 4);
        return x;
    }
    double x;
    memcpy(&x, p, 8);
    return x;
}

/* compare two values of a field: <0, 0, >0 */
static int cmp_field(const field_t *f, const unsigned char *a,
                     const unsigned char *b)
{
    if (f->k == K_S) {
        int64_t x = load_s(a, f->size), y = load_s(b, f->size);
        return (x > y) - (x < y);
    }
    if (f->k == K_F) {
        double x = load_f(a, f->size), y = load_f(b, f->size);
        return (x > y) - (x < y);
    }
    uint64_t x = load_u(a, f->size), y = load_u(b, f->size);
    return (x > y) - (x < y);
}

/* acc = acc o x, one field (types sharp carries only) */
static void fold_field(const field_t *f, int o, unsigned char *acc,
                       const unsigned char *x)
{
    if (f->k == K_F) {
        double a = load_f(acc, f->size), b = load_f(x, f->size), r = a;
        if (o == O_MAX)
            r = b > a ? b : a;
        else if (o == O_MIN)
            r = b < a ? b : a;
        else if (o == O_SUM)
            r = f->size == 4 ? (double)((float)a + (float)b) : a + b;
        else if (o == O_PROD)
            r = f->size == 4 ? (double)((float)a * (float)b) : a * b;
        put_float(acc, f->size, r);
        return;
    }
    uint64_t a = load_u(acc, f->size), b = load_u(x, f->size), r = a;
    int c = cmp_field(f, x, acc);
    switch (o) {
    case O_MAX: r = c > 0 ? b : a; break;
    case O_MIN: r = c < 0 ? b : a; break;
    case O_SUM: r = a + b; break;
    case O_PROD: r = a * b; break;
    case O_LAND: r = a && b; break;
    case O_LOR: r = a || b; break;
    case O_LXOR: r = !a != !b; break;
    case O_BAND: r = a & b; break;
    case O_BOR: r = a | b; break;
    case O_BXOR: r = a ^ b; break;
    }
    memcpy(acc, &r, (size_t)f->size);
}

/* the reduction of every rank's input, written over the data of `out`
 * (its holes are left as they are) */
static void reference(const layout_t *l, long count, int o, uint64_t salt,
                      unsigned char *out)
{
    unsigned char *x = malloc((size_t)(count * l->ext) + 1);
    for (int r = 0; r < size; r++) {
        gen_buf(l, count, o, salt, r, x, 0);
        for (long i = 0; i < count; i++) {
            unsigned char *a = out + i * l->ext, *b = x + i * l->ext;
            if (r == 0) {
                for (int k = 0; k < l->nf; k++)
                    memcpy(a + l->f[k].off, b + l->f[k].off,
                           (size_t)l->f[k].size);
            } else if (l->t->cls == C_PAIR) {
                const field_t *v = &l->f[0], *ix = &l->f[1];
                int c = cmp_field(v, b + v->off, a + v->off);
                if (o == O_MINLOC)
                    c = -c;
                if (c > 0 ||
                    (c == 0 && cmp_field(ix, b + ix->off, a + ix->off) < 0)) {
                    memcpy(a + v->off, b + v->off, (size_t)v->size);
                    memcpy(a + ix->off, b + ix->off, (size_t)ix->size);
                }
            } else {
                for (int k = 0; k < l->nf; k++)
                    fold_field(&l->f[k], o, a + l->f[k].off, b + l->f[k].off);
            }
        }
    }
    free(x);
}

/* Checks ----------------------------------------------------------------- */

static unsigned char defect[256][NOPS]; /* [type][op]: PMPI was wrong */

static const char *where(const layout_t *l, long off, char *s, size_t n)
{
    long i = off / l->ext, b = off % l->ext;
    const char *what = "a hole";
    for (int k = 0; k < l->nf; k++)
        if (b >= l->f[k].off && b < l->f[k].off + l->f[k].size)
            what = k == 0 ? (l->nf == 2 ? "first value" : "value")
                          : "second value";
    snprintf(s, n, "element %ld, byte %ld (%s)", i, b, what);
    return s;
}

static long first_diff(const unsigned char *a, const unsigned char *b, long n)
{
    for (long i = 0; i < n; i++)
        if (a[i] != b[i])
            return i;
    return -1;
}

/* where buf differs from the reference (the reduction of every rank's
 * input over `init`, what the receive buffer held), -1 nowhere */
static long ref_diff(const layout_t *l, long count, int o, uint64_t salt,
                     const unsigned char *init, const unsigned char *buf)
{
    long n = count * l->ext, d;
    unsigned char *ref = malloc((size_t)n + 1);
    memcpy(ref, init, (size_t)n);
    reference(l, count, o, salt, ref);
    d = first_diff(buf, ref, n);
    free(ref);
    return d;
}

/* ours (a) against PMPI's (b), both of n bytes; `result_here`: the
 * result is defined in this buffer (not a non-root's); `has_ref`: sharp
 * carries it, so the reference can judge */
static void compare(const layout_t *l, int ti, int o, long count,
                    const char *call, const unsigned char *a,
                    const unsigned char *b, const unsigned char *init,
                    int result_here, int has_ref, uint64_t salt)
{
    long n = count * l->ext, d;
    char s[96];
    int judge = has_ref && result_here && o >= 0;
    checks++;
    if (trace > 2 && judge && (d = ref_diff(l, count, o, salt, init, b)) >= 0)
        fprintf(stderr,
                "rank %d: %s %s %s count %ld: PMPI differs from the "
                "reference at %s\n",
                rank, call, l->t->name, op_names[o], count,
                where(l, d, s, sizeof(s)));
    if ((d = first_diff(a, b, n)) < 0) {
        return;
    }
    if (judge && ref_diff(l, count, o, salt, init, a) < 0 &&
        ref_diff(l, count, o, salt, init, b) >= 0) {
        defect[ti][o] = 1; /* PMPI's own defect */
        return;
    }
    FAIL("%s %s%s%s count %ld: differs from PMPI at %s: 0x%02x, PMPI 0x%02x",
         call, l->t->name, o >= 0 ? " " : "", o >= 0 ? op_names[o] : "", count,
         where(l, d, s, sizeof(s)), a[d], b[d]);
}

/* one (type, op, count): allreduce (in place and not), reduce from every
 * root (in place and not) */
static void reduce_case(const layout_t *l, int ti, int o, long count,
                        unsigned char *sb, unsigned char *sb0,
                        unsigned char *ra, unsigned char *rb,
                        unsigned char *init)
{
    MPI_Datatype dt = l->t->dt;
    MPI_Op op = mpi_op(o);
    uint64_t salt =
        mix(((uint64_t)ti << 32) ^ ((uint64_t)o << 24) ^ (uint64_t)count);
    size_t n = (size_t)(count * l->ext);
    int off = offloads(l, o) && count > 0;

    gen_buf(l, count, o, salt, rank, sb, 0xc3);
    memcpy(sb0, sb, n);
    for (int ip = 0; ip < 2; ip++) {
        /* allreduce */
        if (ip) {
            memcpy(init, sb, n);
        } else {
            memset(init, 0x5a, n);
        }
        memcpy(ra, init, n);
        memcpy(rb, init, n);
        MPI_Allreduce(ip ? MPI_IN_PLACE : sb, ra, (int)count, dt, op,
                      MPI_COMM_WORLD);
        PMPI_Allreduce(ip ? MPI_IN_PLACE : sb, rb, (int)count, dt, op,
                       MPI_COMM_WORLD);
        compare(l, ti, o, count,
                ip ? "MPI_Allreduce in place" : "MPI_Allreduce", ra, rb, init,
                1, off, salt);
        expect_ar += off ? (unsigned)size : 0;
        if (!ip && memcmp(sb, sb0, n) != 0)
            FAIL("MPI_Allreduce %s %s wrote its send buffer", l->t->name,
                 op_names[o]);
        /* reduce, every root; in place: the root's input in rbuf, the
         * others' rbuf NULL */
        for (int root = 0; root < size; root++) {
            int me = rank == root;
            if (ip && me) {
                memcpy(init, sb, n);
            } else {
                memset(init, 0x5a, n);
            }
            memcpy(ra, init, n);
            memcpy(rb, init, n);
            const void *s = ip && me ? MPI_IN_PLACE : sb;
            if (trace > 1)
                fprintf(stderr, "rank %d: reduce %s count %ld root %d ip %d\n",
                        rank, l->t->name, count, root, ip);
            MPI_Reduce(s, ip && !me ? NULL : ra, (int)count, dt, op, root,
                       MPI_COMM_WORLD);
            PMPI_Reduce(s, ip && !me ? NULL : rb, (int)count, dt, op, root,
                        MPI_COMM_WORLD);
            compare(l, ti, o, count, ip ? "MPI_Reduce in place" : "MPI_Reduce",
                    ra, rb, init, me, off, salt);
            expect_red += off ? (unsigned)size : 0;
            if (!(ip && me) && memcmp(sb, sb0, n) != 0)
                FAIL("MPI_Reduce %s %s wrote its send buffer", l->t->name,
                     op_names[o]);
        }
    }
}

static void bcast_case(const layout_t *l, int ti, long count, unsigned char *sb,
                       unsigned char *ra, unsigned char *rb)
{
    size_t n = (size_t)(count * l->ext);
    for (int root = 0; root < size; root++) {
        uint64_t salt = mix(((uint64_t)ti << 32) ^ 0xbcbc0000ull ^
                            (uint64_t)count ^ ((uint64_t)root << 20));
        if (rank == root) {
            gen_buf(l, count, -1, salt, rank, ra, 0xc3);
        } else {
            memset(ra, 0x5a, n);
        }
        memcpy(rb, ra, n);
        memcpy(sb, ra, n);
        MPI_Bcast(ra, (int)count, l->t->dt, root, MPI_COMM_WORLD);
        PMPI_Bcast(rb, (int)count, l->t->dt, root, MPI_COMM_WORLD);
        compare(l, ti, -1, count, "MPI_Bcast", ra, rb, NULL, 0, 0, 0);
        if (rank == root && memcmp(ra, sb, n) != 0)
            FAIL("MPI_Bcast %s count %ld: the root's buffer changed",
                 l->t->name, count);
        expect_bc += count * l->size > 0 ? (unsigned)size : 0;
    }
}

/* Does the MPI library define op o on this type?  MPI allows some of
 * them not to (MPICH has no MPI_SUM on MPI_COMPLEX32): then ours must
 * refuse alike, unless it offloads the op (the standard defines it). */
static unsigned char refused[256][NOPS];

static int pmpi_takes(const layout_t *l, int ti, int o, unsigned char *sb,
                      unsigned char *ra, unsigned char *rb)
{
    int rcp, rcw, cp = 0, cw = 0;
    memset(sb, 0, (size_t)l->ext);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rcp = PMPI_Allreduce(sb, rb, 1, l->t->dt, mpi_op(o), MPI_COMM_WORLD);
    if (rcp != MPI_SUCCESS) {
        rcw = MPI_Allreduce(sb, ra, 1, l->t->dt, mpi_op(o), MPI_COMM_WORLD);
        MPI_Error_class(rcp, &cp);
        MPI_Error_class(rcw, &cw);
        refused[ti][o] = 1;
        checks++;
        if (offloads(l, o))
            expect_ar += (unsigned)size;
        else if (cp != cw)
            FAIL("%s %s: PMPI refuses it (error class %d), ours returned "
                 "class %d",
                 l->t->name, op_names[o], cp, cw);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    return rcp == MPI_SUCCESS;
}

/* Different types on different ranks ---------------------------------------
 * A layout of 4 ints (16 bytes of signature) in a region of 64 bytes at
 * base + 16: every variant is a (type, count, buffer) for the same
 * signature. */
enum { NV_INT = 9 };

static MPI_Datatype int_variant(int v, unsigned char *base, void **buf,
                                int *count, int *owned)
{
    MPI_Datatype t = MPI_INT, c2;
    unsigned char *p = base + 16;
    *owned = 1;
    *buf = p;
    *count = 1;
    switch (v) {
    case 0: /* MPI_INT x 4 */
        *owned = 0;
        *count = 4;
        return MPI_INT;
    case 1: /* contiguous */ MPI_Type_contiguous(4, MPI_INT, &t); break;
    case 2: /* MPI_2INT x 2 */
        *owned = 0;
        *count = 2;
        return MPI_2INT;
    case 3: /* a vector with holes */
        MPI_Type_vector(4, 1, 2, MPI_INT, &t);
        break;
    case 4: { /* a struct of permuted blocks: size == extent, yet not in
               * memory order */
        int bl[4] = {1, 1, 1, 1};
        MPI_Aint d[4] = {4, 0, 12, 8};
        MPI_Datatype ts[4] = {MPI_INT, MPI_INT, MPI_INT, MPI_INT};
        MPI_Type_create_struct(4, bl, d, ts, &t);
        break;
    }
    case 5: { /* absolute addresses, at MPI_BOTTOM */
        int bl[4] = {1, 1, 1, 1};
        MPI_Aint d[4];
        MPI_Get_address(p + 12, &d[0]);
        MPI_Get_address(p + 0, &d[1]);
        MPI_Get_address(p + 28, &d[2]);
        MPI_Get_address(p + 4, &d[3]);
        MPI_Type_create_hindexed(4, bl, d, MPI_INT, &t);
        *buf = MPI_BOTTOM;
        break;
    }
    case 6: /* resized: lb -8, extent 16, 2 elements of 2 ints */
        MPI_Type_contiguous(2, MPI_INT, &c2);
        MPI_Type_create_resized(c2, -8, 16, &t);
        MPI_Type_free(&c2);
        *count = 2;
        break;
    case 7: { /* true lb 8: struct {int @8, int @12}, 2 of them */
        int bl[2] = {1, 1};
        MPI_Aint d[2] = {8, 12};
        MPI_Datatype ts[2] = {MPI_INT, MPI_INT};
        MPI_Type_create_struct(2, bl, d, ts, &t);
        *count = 2;
        break;
    }
    case 8: { /* the root only: overlapping blocks (ints 0, 1, 0, 1) */
        int bl[2] = {2, 2};
        int d[2] = {0, 0};
        MPI_Type_indexed(2, bl, d, MPI_INT, &t);
        break;
    }
    }
    MPI_Type_commit(&t);
    return t;
}

static void dint_variant(int v, MPI_Datatype *t, int *count, int *owned)
{
    int bl[2] = {1, 1};
    MPI_Aint d[2] = {0, 8};
    MPI_Datatype ts[2] = {MPI_DOUBLE, MPI_INT}, s;
    *owned = 1;
    *count = 2;
    switch (v) {
    case 0:
        *owned = 0;
        *t = MPI_DOUBLE_INT;
        return;
    case 1: /* {double, int} with no padding: extent 12 */
        MPI_Type_create_struct(2, bl, d, ts, t);
        break;
    case 2: /* the same resized to 16: MPI_DOUBLE_INT's layout, derived */
        MPI_Type_create_struct(2, bl, d, ts, &s);
        MPI_Type_create_resized(s, 0, 16, t);
        MPI_Type_free(&s);
        break;
    case 3: /* one element: two MPI_DOUBLE_INT */
        MPI_Type_contiguous(2, MPI_DOUBLE_INT, t);
        *count = 1;
        break;
    }
    MPI_Type_commit(t);
}

static void mixed_bcasts(void)
{
    unsigned char a[96], b[96], orig[96];
    char s[64];
    for (int root = 0; root < size; root++) {
        for (int shift = 0; shift < 3; shift++) {
            /* 4 ints */
            int v = (rank + root * 3 + shift * 5) % (NV_INT - 1);
            if (rank == root && shift == 2)
                v = NV_INT - 1; /* the overlapping send type */
            void *buf;
            int count, owned;
            MPI_Datatype t = int_variant(v, a, &buf, &count, &owned);
            uint64_t salt = mix(0x1111ull ^ (uint64_t)(root * 8 + shift));
            for (int i = 0; i < 96; i++)
                a[i] =
                    rank == root ? (unsigned char)rnd(salt, root, i, 0) : 0x5a;
            memcpy(orig, a, sizeof(a));
            MPI_Bcast(buf, count, t, root, MPI_COMM_WORLD);
            memcpy(b, a, sizeof(a));
            memcpy(a, orig, sizeof(a));
            PMPI_Bcast(buf, count, t, root, MPI_COMM_WORLD);
            checks++;
            long d = first_diff(b, a, sizeof(a));
            if (d >= 0)
                FAIL("MPI_Bcast of 4 ints from %d, received as variant %d: "
                     "byte %ld differs from PMPI",
                     root, v, d - 16);
            expect_bc += (unsigned)size;
            if (owned)
                MPI_Type_free(&t);

            /* MPI_DOUBLE_INT x 2 */
            MPI_Datatype dt;
            dint_variant((rank + root + shift) % 4, &dt, &count, &owned);
            for (int i = 0; i < 96; i++)
                a[i] =
                    rank == root ? (unsigned char)rnd(salt, root, i, 1) : 0x5a;
            memcpy(orig, a, sizeof(a));
            MPI_Bcast(a + 8, count, dt, root, MPI_COMM_WORLD);
            memcpy(b, a, sizeof(a));
            memcpy(a, orig, sizeof(a));
            PMPI_Bcast(a + 8, count, dt, root, MPI_COMM_WORLD);
            checks++;
            d = first_diff(b, a, sizeof(a));
            snprintf(s, sizeof(s), "variant %d", (rank + root + shift) % 4);
            if (d >= 0)
                FAIL("MPI_Bcast of 2 MPI_DOUBLE_INT from %d, received as %s: "
                     "byte %ld differs from PMPI",
                     root, s, d - 8);
            expect_bc += (unsigned)size;
            if (owned)
                MPI_Type_free(&dt);
        }
        /* count 0, different types: nothing moves */
        int x = 7;
        MPI_Bcast(&x, 0, rank % 2 ? MPI_INT : MPI_DOUBLE_INT, root,
                  MPI_COMM_WORLD);
        checks++;
        if (x != 7)
            FAIL("MPI_Bcast of nothing wrote the buffer");
    }
}

/* reductions on derived types and at MPI_BOTTOM: PMPI's business (Open
 * MPI 4.1.4 refuses predefined ops on derived types, MPICH computes them:
 * the error class must be PMPI's too) */
static void derived_reductions(void)
{
    int s[32], ra[32], rb[32], bl[3] = {1, 1, 1};
    MPI_Datatype c3, abs3;
    MPI_Aint d[3];
    MPI_Type_contiguous(3, MPI_INT, &c3);
    MPI_Type_commit(&c3);
    MPI_Get_address(&s[5], &d[0]);
    MPI_Get_address(&s[1], &d[1]);
    MPI_Get_address(&s[9], &d[2]);
    MPI_Type_create_hindexed(3, bl, d, MPI_INT, &abs3);
    MPI_Type_commit(&abs3);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int root = -1; root < size; root++) {
        for (int k = 0; k < 2; k++) {
            MPI_Datatype t = k ? abs3 : c3;
            const void *sp = k ? MPI_BOTTOM : (const void *)s;
            int n = k ? 1 : 5, rca, rcb, ca = 0, cb = 0;
            MPI_Op op = root < 0 ? MPI_SUM : k ? MPI_MIN : MPI_BXOR;
            for (int i = 0; i < 32; i++) {
                s[i] = (int)rnd(77, rank, i, root * 2 + k);
                ra[i] = rb[i] = 0x5a5a5a5a;
            }
            if (root < 0) {
                rca = MPI_Allreduce(sp, ra, n, t, op, MPI_COMM_WORLD);
                rcb = PMPI_Allreduce(sp, rb, n, t, op, MPI_COMM_WORLD);
            } else {
                rca = MPI_Reduce(sp, ra, n, t, op, root, MPI_COMM_WORLD);
                rcb = PMPI_Reduce(sp, rb, n, t, op, root, MPI_COMM_WORLD);
            }
            MPI_Error_class(rca, &ca);
            MPI_Error_class(rcb, &cb);
            checks++;
            if (ca != cb)
                FAIL("a reduction on a %s (root %d): error class %d, PMPI %d",
                     k ? "type at MPI_BOTTOM" : "contiguous type", root, ca,
                     cb);
            else if (memcmp(ra, rb, sizeof(ra)) != 0)
                FAIL("a reduction on a %s (root %d) differs from PMPI",
                     k ? "type at MPI_BOTTOM" : "contiguous type", root);
        }
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Type_free(&c3);
    MPI_Type_free(&abs3);
}

int main(int argc, char **argv)
{
#ifdef MPICH_VERSION
    /* MPICH 4.0.2's own MPI_Reduce crashes with MPI_IN_PLACE at a root
     * other than 0 above 2 KiB (pmodels/mpich#6540, fixed in 4.1.2 by
     * #6543): PMPI_Reduce is the reference here, so it must not crash;
     * its generic algorithms do not have the bug */
    setenv("MPIR_CVAR_DEVICE_COLLECTIVES", "none", 0);
#endif
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int a = 1; a + 1 < argc; a++)
        if (!strcmp(argv[a], "--frag"))
            frag = atol(argv[a + 1]);
        else if (!strcmp(argv[a], "--only"))
            only = argv[a + 1];
    trace = getenv("MPI_TYPES_TRACE") ? atoi(getenv("MPI_TYPES_TRACE")) : 0;

    size_t cap = 0;
    int ntested = 0;
    layout_t ls[NTYPES];
    for (int t = 0; t < NTYPES; t++) {
        if (layout_of(&types[t], &ls[t])) {
            long n = frag / ls[t].size + 1;
            size_t need = (size_t)((n > 1000 ? n : 1000) * ls[t].ext);
            cap = need > cap ? need : cap;
        }
    }
    unsigned char *sb = malloc(cap), *sb0 = malloc(cap), *ra = malloc(cap),
                  *rb = malloc(cap), *init = malloc(cap);

    for (int t = 0; t < NTYPES; t++) {
        const layout_t *l = &ls[t];
        if (l->t == NULL || l->t->dt == MPI_DATATYPE_NULL || l->size == 0 ||
            !selected(l->t->name))
            continue;
        ntested++;
        long counts[6] = {0, 1, 2, 7, 1000, frag / l->size + 1};
        for (int o = 0; o < NOPS; o++) {
            if (!(class_ops[l->t->cls] & B(o)))
                continue;
            if (trace && rank == 0)
                fprintf(stderr, "mpi_types: %s %s\n", l->t->name, op_names[o]);
            if (!pmpi_takes(l, t, o, sb, ra, rb))
                continue;
            for (int c = 0; c < 6; c++)
                reduce_case(l, t, o, counts[c], sb, sb0, ra, rb, init);
        }
        for (int c = 0; c < 6; c++)
            bcast_case(l, t, counts[c], sb, ra, rb);
        MPI_Barrier(MPI_COMM_WORLD);
        expect_bar += (unsigned)size;
    }
    if (selected("mixed"))
        mixed_bcasts();
    if (selected("derived"))
        derived_reductions();

    /* the summary, through PMPI: not counted as offloaded calls */
    int total = 0;
    long all_checks = 0;
    unsigned long long ex[4] = {expect_ar, expect_red, expect_bc, expect_bar},
                       exs[4];
    static unsigned char defects[256][NOPS], refusals[256][NOPS];
    PMPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    PMPI_Allreduce(&checks, &all_checks, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    PMPI_Allreduce(ex, exs, 4, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    PMPI_Allreduce(defect, defects, sizeof(defect), MPI_UNSIGNED_CHAR, MPI_BOR,
                   MPI_COMM_WORLD);
    PMPI_Allreduce(refused, refusals, sizeof(refused), MPI_UNSIGNED_CHAR,
                   MPI_BOR, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int t = 0; t < NTYPES; t++)
            for (int o = 0; o < NOPS; o++)
                if (refusals[t][o])
                    printf("mpi_types: %s %s: the MPI library does not define "
                           "it%s\n",
                           types[t].name, op_names[o],
                           offloads(&ls[t], o) ? " (offloaded all the same)"
                                               : "");
        for (int t = 0; t < NTYPES; t++)
            for (int o = 0; o < NOPS; o++)
                if (defects[t][o])
                    printf("mpi_types: PMPI defect: %s %s: the MPI library's "
                           "own result is wrong, ours is the reference's\n",
                           types[t].name, op_names[o]);
        printf("mpi_types: expect offloaded MPI_Allreduce %llu MPI_Reduce %llu "
               "MPI_Bcast %llu MPI_Barrier %llu\n",
               exs[0], exs[1], exs[2], exs[3]);
        printf("mpi_types: %d ranks, %d named types, %ld comparisons: %s\n",
               size, ntested, all_checks,
               total ? "FAILURES" : "every result matches PMPI");
    }
    free(sb);
    free(sb0);
    free(ra);
    free(rb);
    free(init);
    MPI_Finalize();
    return total > 125 ? 125 : total;
}
