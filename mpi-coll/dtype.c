/*
 * libsharp_mpi: datatypes and ops, and whether a call may be offloaded
 * (the same rules for the blocking, non-blocking and persistent forms).
 *
 * A reduction is offloaded only for a predefined datatype and a predefined
 * op that MPI defines on it (MPI-3.1 5.9.2) and that sharp computes with
 * the same result, bit for bit, as the MPI library would; anything else goes
 * to PMPI unchanged (so an op MPI does not define on a type gets the MPI
 * library's own error).  Every rank passes the same count, datatype and op
 * to a reduction, so this local decision is the same everywhere.  The pair
 * types with a hole are packed to the wire and back, never writing the
 * hole; complex SUM is a sum of twice as many reals.
 *
 * A bcast carries any datatype, named or derived: the decision depends only
 * on count x size, the same on every rank whatever type each passes, and a
 * layout that is not one run of bytes goes through PMPI_Pack/_Unpack.
 *
 * Not offloaded (passed to PMPI unchanged): reductions on derived types or
 * on types sharp cannot carry (long double, 32-byte complex, Fortran
 * LOGICAL, MPI_2REAL, ...), ops MPI does not define on the type (so PMPI
 * reports the error), user ops, count 0, messages above SHARP_MPI_MAX_BYTES
 * (or 2 GiB).  With SHARP_MPI_REPRODUCIBLE=1 a floating-point sum that goes
 * to PMPI is still exact (smpi_exact_pmpi: the network's arithmetic).
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "reduce/exact.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OPB(o) (1u << (o))
#define OPS_MINMAX (OPB(SHARP_OP_MAX) | OPB(SHARP_OP_MIN))
#define OPS_ARITH (OPB(SHARP_OP_SUM) | OPB(SHARP_OP_PROD))
#define OPS_LOGICAL                                                            \
    (OPB(SHARP_OP_LAND) | OPB(SHARP_OP_LOR) | OPB(SHARP_OP_LXOR))
#define OPS_BITWISE                                                            \
    (OPB(SHARP_OP_BAND) | OPB(SHARP_OP_BOR) | OPB(SHARP_OP_BXOR))
#define OPS_LOC (OPB(SHARP_OP_MAXLOC) | OPB(SHARP_OP_MINLOC))

enum tclass {
    T_CINT,       /* C integer, signed */
    T_CUINT,      /* C integer, unsigned */
    T_FINT,       /* Fortran integer; MPI_AINT, MPI_OFFSET, MPI_COUNT */
    T_BYTE,       /* MPI_BYTE */
    T_FLOAT,      /* floating point of 4 or 8 bytes (not long double) */
    T_COMPLEX,    /* two of those: SUM is two sums; PROD is not */
    T_BOOL,       /* C (and C++) bool of one byte, 0 or 1 */
    T_PAIR_INT,   /* (integer, int) for MINLOC / MAXLOC */
    T_PAIR_FLOAT, /* (float or double, int) */
};

/* per class: the ops MPI defines and sharp carries */
static const unsigned class_ops[] = {
    [T_CINT] = OPS_MINMAX | OPS_ARITH | OPS_LOGICAL | OPS_BITWISE,
    [T_CUINT] = OPS_MINMAX | OPS_ARITH | OPS_LOGICAL | OPS_BITWISE,
    [T_FINT] = OPS_MINMAX | OPS_ARITH | OPS_BITWISE,
    [T_BYTE] = OPS_BITWISE,
    [T_FLOAT] = OPS_MINMAX | OPS_ARITH,
    [T_COMPLEX] = OPB(SHARP_OP_SUM),
    [T_BOOL] = OPS_LOGICAL,
    [T_PAIR_INT] = OPS_LOC,
    [T_PAIR_FLOAT] = OPS_LOC,
};

/* Not here, so not offloaded: MPI_CHAR, MPI_WCHAR, MPI_CHARACTER and
 * MPI_PACKED (MPI defines no reduction on them); MPI_LONG_DOUBLE,
 * MPI_REAL16, the long double and 32-byte complex types and
 * MPI_LONG_DOUBLE_INT (sharp has no such type); MPI_LOGICAL (its .TRUE. is
 * the MPI library's choice); MPI_2REAL and MPI_2DOUBLE_PRECISION (their
 * index is not an integer); MPI_INTEGER16; Open MPI's MPI_LOGICALn and
 * MPI_2COMPLEX (not MPI's).  A type the MPI library leaves out is
 * MPI_DATATYPE_NULL here and never matches. */
static const struct {
    MPI_Datatype dt;
    enum tclass cls;
} known_types[] = {
    {MPI_INT, T_CINT},
    {MPI_LONG, T_CINT},
    {MPI_SHORT, T_CINT},
    {MPI_SIGNED_CHAR, T_CINT},
    {MPI_LONG_LONG_INT, T_CINT},
    {MPI_LONG_LONG, T_CINT},
    {MPI_INT8_T, T_CINT},
    {MPI_INT16_T, T_CINT},
    {MPI_INT32_T, T_CINT},
    {MPI_INT64_T, T_CINT},
    {MPI_UNSIGNED, T_CUINT},
    {MPI_UNSIGNED_LONG, T_CUINT},
    {MPI_UNSIGNED_SHORT, T_CUINT},
    {MPI_UNSIGNED_CHAR, T_CUINT},
    {MPI_UNSIGNED_LONG_LONG, T_CUINT},
    {MPI_UINT8_T, T_CUINT},
    {MPI_UINT16_T, T_CUINT},
    {MPI_UINT32_T, T_CUINT},
    {MPI_UINT64_T, T_CUINT},
    {MPI_AINT, T_FINT},
    {MPI_OFFSET, T_FINT},
    {MPI_COUNT, T_FINT},
    {MPI_INTEGER, T_FINT},
#ifdef MPI_INTEGER1
    {MPI_INTEGER1, T_FINT},
#endif
#ifdef MPI_INTEGER2
    {MPI_INTEGER2, T_FINT},
#endif
#ifdef MPI_INTEGER4
    {MPI_INTEGER4, T_FINT},
#endif
#ifdef MPI_INTEGER8
    {MPI_INTEGER8, T_FINT},
#endif
    {MPI_BYTE, T_BYTE},
    {MPI_FLOAT, T_FLOAT},
    {MPI_DOUBLE, T_FLOAT},
    {MPI_REAL, T_FLOAT},
    {MPI_DOUBLE_PRECISION, T_FLOAT},
#ifdef MPI_REAL4
    {MPI_REAL4, T_FLOAT},
#endif
#ifdef MPI_REAL8
    {MPI_REAL8, T_FLOAT},
#endif
    {MPI_C_FLOAT_COMPLEX, T_COMPLEX},
    {MPI_C_DOUBLE_COMPLEX, T_COMPLEX},
    {MPI_COMPLEX, T_COMPLEX},
    {MPI_DOUBLE_COMPLEX, T_COMPLEX},
#ifdef MPI_COMPLEX8
    {MPI_COMPLEX8, T_COMPLEX},
#endif
#ifdef MPI_COMPLEX16
    {MPI_COMPLEX16, T_COMPLEX},
#endif
    {MPI_CXX_FLOAT_COMPLEX, T_COMPLEX},
    {MPI_CXX_DOUBLE_COMPLEX, T_COMPLEX},
    {MPI_C_BOOL, T_BOOL},
    {MPI_CXX_BOOL, T_BOOL},
    {MPI_2INT, T_PAIR_INT},
    {MPI_SHORT_INT, T_PAIR_INT},
    {MPI_LONG_INT, T_PAIR_INT},
    {MPI_2INTEGER, T_PAIR_INT},
    {MPI_FLOAT_INT, T_PAIR_FLOAT},
    {MPI_DOUBLE_INT, T_PAIR_FLOAT},
};

static int int_dtype(int size, int is_signed)
{
    switch (size) {
    case 1: return is_signed ? SHARP_DTYPE_INT8 : SHARP_DTYPE_UINT8;
    case 2: return is_signed ? SHARP_DTYPE_SHORT : SHARP_DTYPE_UNSIGNED_SHORT;
    case 4: return is_signed ? SHARP_DTYPE_INT : SHARP_DTYPE_UNSIGNED;
    case 8: return is_signed ? SHARP_DTYPE_LONG : SHARP_DTYPE_UNSIGNED_LONG;
    }
    return -1;
}

static int float_dtype(int size)
{
    return size == 4 ? SHARP_DTYPE_FLOAT : size == 8 ? SHARP_DTYPE_DOUBLE : -1;
}

/* 1 and *m filled in if sharp can reduce this datatype */
static int map_dtype_find(MPI_Datatype dt, dt_map_t *m)
{
    size_t i, n = sizeof(known_types) / sizeof(known_types[0]);
    int size = 0;
    MPI_Aint lb, ext, tlb, text;

    if (dt == MPI_DATATYPE_NULL) {
        return 0;
    }
    for (i = 0; i < n && known_types[i].dt != dt; i++) {
    }
    if (i == n) {
        return 0; /* derived, or a type sharp cannot carry */
    }
    PMPI_Type_size(dt, &size);
    PMPI_Type_get_extent(dt, &lb, &ext);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    memset(m, 0, sizeof(*m));
    m->tag = SHARP_DTYPE_NULL;
    m->mult = 1;
    m->ops = class_ops[known_types[i].cls];
    m->ext = (size_t)ext;
    m->size = (size_t)size;
    switch (known_types[i].cls) {
    case T_CINT:
    case T_FINT: m->sdt = int_dtype(size, 1); break;
    case T_CUINT: m->sdt = int_dtype(size, 0); break;
    case T_BYTE: m->sdt = SHARP_DTYPE_UINT8; break;
    case T_BOOL: m->sdt = size == 1 ? SHARP_DTYPE_UINT8 : -1; break;
    case T_FLOAT: m->sdt = float_dtype(size); break;
    case T_COMPLEX:
        m->sdt = size % 2 == 0 ? float_dtype(size / 2) : -1;
        m->mult = 2;
        break;
    case T_PAIR_INT:
    case T_PAIR_FLOAT:
        /* C struct {value; int index;}: the index's offset from the true
         * extent, the value at 0; the wire has them packed */
        m->sdt = known_types[i].cls == T_PAIR_INT ? int_dtype(size - 4, 1)
                                                  : float_dtype(size - 4);
        m->tag = SHARP_DTYPE_INT;
        m->vs = (size_t)size - 4;
        m->toff = (size_t)text - 4;
        if (lb != 0 || tlb != 0 || text < size || m->toff < m->vs ||
            ext < text) {
            m->sdt = -1;
        }
        m->packed = m->toff != m->vs || (size_t)ext != (size_t)size;
        break;
    }
    /* a named type without holes (but the pairs above) */
    if (m->sdt >= 0 && m->tag == SHARP_DTYPE_NULL &&
        (lb != 0 || tlb != 0 || ext != size || text != size)) {
        m->sdt = -1;
    }
    return m->sdt >= 0;
}

/* map_dtype_find, with the answer for the last datatype asked kept per
 * thread: only predefined datatypes are ever mapped (known_types), and a
 * predefined handle names the same type for the whole job, so the table's
 * search and the three MPI queries are made once, not on every call */
SMPI_HOT static int map_dtype(MPI_Datatype dt, dt_map_t *m)
{
    static __thread MPI_Datatype last_dt = MPI_DATATYPE_NULL;
    static __thread dt_map_t last_m;
    static __thread int last_ok;
    if (dt != last_dt || dt == MPI_DATATYPE_NULL) {
        last_ok = map_dtype_find(dt, &last_m);
        last_dt = dt;
    }
    *m = last_m;
    return last_ok;
}

/* Is the data of one element of dt a single run of bytes at true_lb, in
 * the order the type map lists them?  Named types (not MPI_SHORT_INT: it
 * has a hole), and duplicates, contiguous and resized types of such; any
 * other constructor is answered "no" (the data are packed then), since
 * size == true extent alone does not exclude permuted or overlapping
 * blocks. */
int smpi_dense_type(MPI_Datatype dt, int depth)
{
    int ni = 0, na = 0, nd = 0, comb, size = 0, ok = 0;
    MPI_Aint tlb, text;

    PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb);
    PMPI_Type_size(dt, &size);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    if (text != (MPI_Aint)size) {
        return 0;
    }
    if (comb == MPI_COMBINER_NAMED) {
        return 1;
    }
    if (depth > 16 || nd != 1 || ni > 1 || na > 2 ||
        (comb != MPI_COMBINER_DUP && comb != MPI_COMBINER_CONTIGUOUS &&
         comb != MPI_COMBINER_RESIZED)) {
        return 0;
    }
    int ints[1] = {1};
    MPI_Aint aints[2];
    MPI_Datatype old;
    PMPI_Type_get_contents(dt, ni, na, nd, ints, aints, &old);
    ok = smpi_dense_type(old, depth + 1);
    if (ok && comb == MPI_COMBINER_CONTIGUOUS && ints[0] > 1) {
        int osize = 0;
        MPI_Aint olb, oext;
        PMPI_Type_size(old, &osize);
        PMPI_Type_get_extent(old, &olb, &oext);
        ok = oext == (MPI_Aint)osize;
    }
    PMPI_Type_get_envelope(old, &ni, &na, &nd, &comb);
    if (comb != MPI_COMBINER_NAMED) {
        PMPI_Type_free(&old);
    }
    return ok;
}

static int op_of(MPI_Op op)
{
    if (op == MPI_MAX)
        return SHARP_OP_MAX;
    if (op == MPI_MIN)
        return SHARP_OP_MIN;
    if (op == MPI_SUM)
        return SHARP_OP_SUM;
    if (op == MPI_PROD)
        return SHARP_OP_PROD;
    if (op == MPI_LAND)
        return SHARP_OP_LAND;
    if (op == MPI_BAND)
        return SHARP_OP_BAND;
    if (op == MPI_LOR)
        return SHARP_OP_LOR;
    if (op == MPI_BOR)
        return SHARP_OP_BOR;
    if (op == MPI_LXOR)
        return SHARP_OP_LXOR;
    if (op == MPI_BXOR)
        return SHARP_OP_BXOR;
    if (op == MPI_MAXLOC)
        return SHARP_OP_MAXLOC;
    if (op == MPI_MINLOC)
        return SHARP_OP_MINLOC;
    return -1;
}

SMPI_HOT struct sharp_coll_data_desc smpi_desc_of(void *p, size_t len)
{
    struct sharp_coll_data_desc d;
    memset(&d, 0, sizeof(d));
    d.type = SHARP_DATA_BUFFER;
    d.mem_type = SHARP_MEM_TYPE_HOST;
    d.buffer.ptr = p;
    d.buffer.length = len;
    return d;
}

/* (value, index) pairs with a hole (MPI_DOUBLE_INT, MPI_LONG_INT,
 * MPI_SHORT_INT): the wire has them packed.  Unpacking writes the value and
 * the index only, never the hole (MPI forbids touching it). */
void smpi_loc_pack(const void *in, void *out, size_t n, const dt_map_t *m)
{
    const char *s = in;
    char *d = out;
    for (size_t i = 0; i < n; i++, s += m->ext, d += m->vs + 4) {
        memcpy(d, s, m->vs);
        memcpy(d + m->vs, s + m->toff, 4);
    }
}

void smpi_loc_unpack(const void *in, void *out, size_t n, const dt_map_t *m)
{
    const char *s = in;
    char *d = out;
    for (size_t i = 0; i < n; i++, s += m->vs + 4, d += m->ext) {
        memcpy(d, s, m->vs);
        memcpy(d + m->toff, s + m->vs, 4);
    }
}

/* PMPI_Pack (pack) or PMPI_Unpack of count x dt at buf to or from the
 * len bytes at tmp, all of them.  Data at MPI_BOTTOM (absolute addresses)
 * are reached from an address of our own and a struct type displaced back
 * to 0: MPICH 4.0.2 refuses a NULL buffer to pack from or into. */
void smpi_pack_data(int pack, void *buf, int count, MPI_Datatype dt, char *tmp,
                    int len, MPI_Comm comm)
{
    static char anchor;
    MPI_Datatype t = dt;
    int pos = 0, rc;
    if (buf == MPI_BOTTOM) {
        MPI_Aint a;
        PMPI_Get_address(&anchor, &a);
        a = -a;
        PMPI_Type_create_struct(1, &count, &a, &dt, &t);
        PMPI_Type_commit(&t);
        buf = &anchor;
        count = 1;
    }
    rc = pack ? PMPI_Pack(buf, count, t, tmp, len, &pos, comm)
              : PMPI_Unpack(tmp, len, &pos, buf, count, t, comm);
    if (t != dt) {
        PMPI_Type_free(&t);
    }
    if (rc != MPI_SUCCESS || pos != len) {
        smpi_die(comm, pack ? "MPI_Bcast: PMPI_Pack of the root's data"
                            : "MPI_Bcast: PMPI_Unpack of the data");
    }
}

long smpi_bytes_of(int count, MPI_Datatype dt)
{
    int s = 0;
    if (dt == MPI_DATATYPE_NULL || count <= 0 ||
        PMPI_Type_size(dt, &s) != MPI_SUCCESS) {
        return 0;
    }
    return (long)count * s;
}

/* SHARP_MPI_REPRODUCIBLE: is this sum to be exact?  Float and double sums
 * (complex ones too: sums of their parts). */
SMPI_HOT int smpi_exact_wanted(int sop, const dt_map_t *m)
{
    return smpi_cfg.reproducible && sop == SHARP_OP_SUM &&
           (m->sdt == SHARP_DTYPE_FLOAT || m->sdt == SHARP_DTYPE_DOUBLE);
}

/* An exact sum without the network (no group, fallen back, too large):
 * the same arithmetic as the network's (reduce/exact.h) on PMPI: the
 * exponent window agreed with an int64 MAX, the values as 32-bit limbs in
 * int64 lanes summed with an int64 SUM (exact in any order), rounded once
 * at the end.  The same bits as through the network.  1 if done (*ret),
 * 0 if the call is not an exact one. */
int smpi_exact_pmpi(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                    MPI_Op op, int root, MPI_Comm comm, int *ret)
{
    dt_map_t m;
    int sop = op_of(op), rank, inter = 0;
    if (!smpi_cfg.reproducible || count <= 0 || sop < 0 ||
        comm == MPI_COMM_NULL || !map_dtype(dt, &m) ||
        !smpi_exact_wanted(sop, &m) || m.packed ||
        PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
        return 0;
    }
    PMPI_Comm_rank(comm, &rank);
    int keep = root < 0 || root == rank;
    if (sbuf == MPI_IN_PLACE) {
        if (!keep) {
            return 0; /* erroneous: PMPI says so */
        }
        sbuf = rbuf;
    }
    shp_dtype_t sdt = (shp_dtype_t)m.sdt;
    size_t n = (size_t)count * (size_t)m.mult;
    const void *src = sbuf;
    int64_t win[SHP_EXACT_WIN_LANES], agreed[SHP_EXACT_WIN_LANES];
    shp_exact_layout_t lay;
    const char *why = NULL;
    if (shp_exact_window(sdt, &src, 1, n, win) != SHP_OK) {
        return 0;
    }
    PMPI_Allreduce(win, agreed, SHP_EXACT_WIN_LANES, MPI_INT64_T, MPI_MAX,
                   comm);
    if (shp_exact_layout(sdt, agreed, &lay, &why) != SHP_OK) {
        smpi_die(comm, "an exact sum: the agreed window");
    }
    size_t nl = n * lay.lanes;
    int64_t *lanes =
        smpi_xmalloc(sizeof(int64_t) * (nl ? nl : 1), comm, "an exact sum");
    int64_t *sum = keep ? smpi_xmalloc(sizeof(int64_t) * (nl ? nl : 1), comm,
                                       "an exact sum")
                        : NULL;
    if (shp_exact_encode(&lay, &src, 1, n, lanes) != SHP_OK) {
        smpi_die(comm, "an exact sum: encoding");
    }
    /* lanes fit MPI's int count: at most 255 lanes an element, and the
     * caller's count is an int */
    int rc = MPI_SUCCESS;
    for (size_t off = 0; off < nl && rc == MPI_SUCCESS;) {
        int c = nl - off > (size_t)INT_MAX ? INT_MAX : (int)(nl - off);
        rc = root < 0 ? PMPI_Allreduce(lanes + off, sum + off, c, MPI_INT64_T,
                                       MPI_SUM, comm)
                      : PMPI_Reduce(lanes + off, keep ? sum + off : NULL, c,
                                    MPI_INT64_T, MPI_SUM, root, comm);
        off += (size_t)c;
    }
    if (rc == MPI_SUCCESS && keep) {
        shp_exact_decode(&lay, sum, n, rbuf);
    }
    free(lanes);
    free(sum);
    *ret = rc;
    return 1;
}

/* Why a datatype sharp does not carry is not (derived or not) */
static int dtype_why(MPI_Datatype dt)
{
    int ni = 0, na = 0, nd = 0, comb = MPI_COMBINER_NAMED;
    if (dt != MPI_DATATYPE_NULL) {
        PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb);
    }
    return comb == MPI_COMBINER_NAMED ? WHY_DTYPE : WHY_DERIVED;
}

/* May a reduction of count x dt with op go through sharp (`on`: that kind
 * is enabled)?  The rules of the blocking and the non-blocking forms: the
 * type map in *m, sharp's op in *sop, the wire's bytes in *bytes (count x
 * the type's size) and the fold's descriptor in *d.  WHY_OK, or why not. */
SMPI_HOT int smpi_reduce_why(int on, int count, MPI_Datatype dt, MPI_Op op,
                             dt_map_t *m, int *sop, size_t *bytes,
                             shp_reduce_desc_t *d)
{
    *sop = op_of(op);
    if (!on) {
        return WHY_KIND_OFF;
    }
    if (count <= 0) {
        return WHY_COUNT_ZERO;
    }
    if (*sop < 0) {
        return WHY_USER_OP;
    }
    if (!map_dtype(dt, m)) {
        return dtype_why(dt);
    }
    if (!(m->ops & OPB(*sop))) {
        return WHY_OP_DTYPE;
    }
    *bytes = (size_t)count * m->size;
    if (*bytes > INT_MAX) {
        return WHY_OVER_2G;
    }
    if (*bytes > smpi_cfg.max_bytes) {
        return WHY_MAX_BYTES;
    }
    *d = (shp_reduce_desc_t){(shp_dtype_t)m->sdt, (shp_op_t)*sop,
                             (shp_dtype_t)m->tag};
    return shp_reduce_desc_check(d, NULL) == SHP_OK &&
                   shp_reduce_elem_size(d) * (size_t)m->mult == m->size
               ? WHY_OK
               : WHY_DTYPE;
}

/* May a bcast of this many bytes go through sharp (the blocking and the
 * non-blocking forms' rule)?  WHY_OK, or why not. */
int smpi_bcast_why(long bytes)
{
    return !smpi_cfg.bcast                      ? WHY_KIND_OFF
           : bytes <= 0                         ? WHY_COUNT_ZERO
           : bytes > INT_MAX                    ? WHY_OVER_2G
           : (size_t)bytes > smpi_cfg.max_bytes ? WHY_MAX_BYTES
                                                : WHY_OK;
}
