/*
 * libsharp_mpi: MPI_Allreduce, MPI_Reduce, MPI_Barrier and MPI_Bcast over
 * sharp, through the PMPI profiling interface.  Built once per MPI
 * (Open MPI, MPICH) from this one source; preloaded (LD_PRELOAD) or linked,
 * so neither the program nor the MPI library is rebuilt.
 *
 *   MPI_Init / MPI_Init_thread   sharp_coll_init over MPI_COMM_WORLD, the
 *                                out-of-band collectives written on PMPI
 *   MPI_Finalize                 groups destroyed, job ended, report
 *   collectives                  offloaded when eligible, else PMPI
 *
 * With several ranks per node only one leader per node is a member: the
 * node's data are gathered and folded at the leader (the same reduction
 * engine as the ANs), the leaders go through sharp, the result is
 * broadcast in the node (SHARP_MPI_NODE_AGGR, default on: measured faster).
 *
 * A communicator's sharp group is created lazily, on its first eligible
 * collective (every rank decides alike: the decision depends only on what
 * MPI requires to be equal across ranks), and destroyed when the
 * communicator is freed (an attribute's delete callback), so dup, split,
 * create and free need no wrapper of their own.
 *
 * Failure protocol (docs/mpi.md): creating a group is agreed by all members
 * (the library's comm_init returns one answer everywhere); a communicator
 * whose group cannot be created uses PMPI from then on, everywhere.  A
 * collective that fails after its group was up cannot be completed safely:
 * other ranks may already have returned from it with the result and never
 * call again, so no agreement can be waited for without risking a hang.  The
 * rank that sees the failure aborts the job with a message naming the failed
 * component (the AN, sharpd or manager's reason); no rank hangs and no wrong
 * result is ever returned.
 *
 * Datatypes (docs/mpi.md): a reduction is offloaded for a predefined type
 * and predefined op that MPI defines on it and sharp computes exactly as
 * MPI does (the pair types with a hole are packed to the wire and back,
 * never writing the hole; complex SUM is a sum of twice as many reals); a
 * bcast carries any datatype, named or derived: the decision depends only
 * on count x size, the same on every rank whatever type each passes, and
 * a layout that is not one run of bytes goes through PMPI_Pack/_Unpack.
 *
 * Not offloaded (passed to PMPI unchanged): reductions on derived types or
 * on types sharp cannot carry (long double, 32-byte complex, Fortran
 * LOGICAL, MPI_2REAL, ...), ops MPI does not define on the type (so PMPI
 * reports the error), user ops, count 0, intercommunicators,
 * non-blocking collectives other than MPI_Iallreduce, _Ireduce, _Ibcast and
 * _Ibarrier (those: sharp_mpi_nb.c, one member per process), messages above
 * SHARP_MPI_MAX_BYTES (or 2 GiB) and communicators below
 * SHARP_MPI_MIN_RANKS.
 */
#include <mpi.h>
#include <sharp/api/sharp.h>

#include "common/reduce.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

/* Settings ------------------------------------------------------------------ */

static struct {
    int enable, verbose, min_ranks, node_aggr;
    long max_bytes;
    int allreduce, reduce, barrier, bcast;
} cfg;

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    char *end;
    if (v == NULL || *v == '\0') {
        return dflt;
    }
    long x = strtol(v, &end, 0);
    if (*end == 'k' || *end == 'K') {
        x <<= 10;
        end++;
    } else if (*end == 'm' || *end == 'M') {
        x <<= 20;
        end++;
    }
    if (*end != '\0') {
        fprintf(stderr, "sharp_mpi: ignoring %s=%s (not a number)\n", name, v);
        return dflt;
    }
    return x;
}

static void cfg_load(void)
{
    cfg.enable = (int)env_long("SHARP_MPI_ENABLE", 1);
    cfg.verbose = (int)env_long("SHARP_MPI_VERBOSE", 0);
    cfg.min_ranks = (int)env_long("SHARP_MPI_MIN_RANKS", 2);
    cfg.node_aggr = (int)env_long("SHARP_MPI_NODE_AGGR", 1);
    cfg.max_bytes = env_long("SHARP_MPI_MAX_BYTES", 64L << 20);
    cfg.allreduce = (int)env_long("SHARP_MPI_ALLREDUCE", 1);
    cfg.reduce = (int)env_long("SHARP_MPI_REDUCE", 1);
    cfg.barrier = (int)env_long("SHARP_MPI_BARRIER", 1);
    cfg.bcast = (int)env_long("SHARP_MPI_BCAST", 1);
}

/* State ------------------------------------------------------------------------ */

enum {
    C_ALLREDUCE,
    C_REDUCE,
    C_BARRIER,
    C_BCAST,
    /* non-blocking, and the starts of persistent ones (sharp_mpi_nb.c) */
    C_IALLREDUCE,
    C_IREDUCE,
    C_IBARRIER,
    C_IBCAST,
    C_N
};
static const char *const coll_names[C_N] = {
    "MPI_Allreduce",  "MPI_Reduce",  "MPI_Barrier",  "MPI_Bcast",
    "MPI_Iallreduce", "MPI_Ireduce", "MPI_Ibarrier", "MPI_Ibcast"};

static struct {
    struct sharp_coll_context *ctx;
    MPI_Comm oob_world;
    int have_oob;
    int had_sharp;
    int keyval;
    int rank;
    /* [collective][0 offloaded, 1 fallen back]: calls and bytes */
    unsigned long long calls[C_N][2], bytes[C_N][2];
} g = {.keyval = MPI_KEYVAL_INVALID};

typedef struct comm_state {
    struct sharp_coll_comm *sc; /* this rank's group (hier: leaders only) */
    int use;                    /* offload here (the same on every rank) */
    int hier;                   /* node-local aggregation, one leader a node */
    MPI_Comm oob, node, leaders;
    int rank, size, node_rank, node_size;
    int *node_of;      /* [size] the leader (rank in `leaders`) of each node */
    int *rank_in_node; /* [size] */
    struct comm_state *next, **prev; /* every live state, for finalize */
} comm_state_t;

static comm_state_t *states;

static void note(int verbosity, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(int verbosity, const char *fmt, ...)
{
    va_list ap;
    if (cfg.verbose < verbosity) {
        return;
    }
    va_start(ap, fmt);
    fprintf(stderr, "sharp_mpi[%d]: ", g.rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Out-of-band collectives on PMPI ------------------------------------------ */

static int oob_bcast(void *ctx, void *buf, int len, int root)
{
    return PMPI_Bcast(buf, len, MPI_BYTE, root, *(MPI_Comm *)ctx) == MPI_SUCCESS
               ? 0
               : -1;
}

static int oob_barrier(void *ctx)
{
    return PMPI_Barrier(*(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : -1;
}

static int oob_gather(void *ctx, int root, void *sbuf, void *rbuf, int len)
{
    return PMPI_Gather(sbuf, len, MPI_BYTE, rbuf, len, MPI_BYTE, root,
                       *(MPI_Comm *)ctx) == MPI_SUCCESS
               ? 0
               : -1;
}

/* Init and finalize ------------------------------------------------------------ */

static void nb_drain(comm_state_t *s);

static int comm_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    comm_state_t *s = attr;
    (void)comm;
    (void)keyval;
    (void)extra;
    nb_drain(s); /* its non-blocking operations in flight complete first */
    if (s->sc != NULL) {
        sharp_coll_comm_destroy(s->sc);
    }
    if (s->oob != MPI_COMM_NULL) {
        PMPI_Comm_free(&s->oob);
    }
    if (s->node != MPI_COMM_NULL) {
        PMPI_Comm_free(&s->node);
    }
    if (s->leaders != MPI_COMM_NULL) {
        PMPI_Comm_free(&s->leaders);
    }
    free(s->node_of);
    free(s->rank_in_node);
    if (s->prev != NULL) {
        *s->prev = s->next;
        if (s->next != NULL) {
            s->next->prev = s->prev;
        }
    }
    free(s);
    return MPI_SUCCESS;
}

static void sharp_setup(void)
{
    int size;
    uint64_t job = 0;

    cfg_load();
    PMPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!cfg.enable) {
        note(1, "disabled by SHARP_MPI_ENABLE=0: plain MPI");
        return;
    }
    PMPI_Comm_dup(MPI_COMM_WORLD, &g.oob_world);
    g.have_oob = 1;
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_delete, &g.keyval,
                            NULL);
    /* a job id unique on the fabric: rank 0's host, pid and clock */
    if (g.rank == 0) {
        struct timespec ts;
        char host[64] = "";
        clock_gettime(CLOCK_REALTIME, &ts);
        gethostname(host, sizeof(host) - 1);
        job = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
              ((uint64_t)getpid() << 16);
        for (const char *p = host; *p; p++) {
            job = job * 131 + (unsigned char)*p;
        }
        job &= (1ull << 53) - 1; /* printable as a JSON integer anywhere */
    }
    PMPI_Bcast(&job, 1, MPI_UINT64_T, 0, g.oob_world);

    struct sharp_coll_init_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.job_id = job;
    spec.world_rank = g.rank;
    spec.world_size = size;
    spec.config = sharp_coll_default_config;
    spec.config.flags = cfg.verbose >= 1 ? 0 : SHARP_COLL_HIDE_ERRORS;
    spec.oob_colls.bcast = oob_bcast;
    spec.oob_colls.barrier = oob_barrier;
    spec.oob_colls.gather = oob_gather;
    spec.oob_ctx = &g.oob_world;
    int rc = sharp_coll_init(&spec, &g.ctx);
    if (rc != SHARP_COLL_SUCCESS) {
        g.ctx = NULL;
        if (g.rank == 0) {
            note(1, "sharp unavailable (%s): plain MPI",
                 sharp_coll_strerror(rc));
        }
        return;
    }
    g.had_sharp = 1;
    note(2, "sharp job %llu up", (unsigned long long)job);
}

static void report(void)
{
    unsigned long long c[C_N][2], b[C_N][2];
    PMPI_Reduce(g.calls, c, C_N * 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    PMPI_Reduce(g.bytes, b, C_N * 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    if (g.rank != 0) {
        return;
    }
    fprintf(stderr, "sharp_mpi: report (all ranks)%s\n",
            g.had_sharp ? "" : " - sharp was not available");
    fprintf(stderr, "sharp_mpi: %-14s %12s %14s %12s %14s\n", "collective",
            "offloaded", "bytes", "fallback", "bytes");
    for (int k = 0; k < C_N; k++) {
        fprintf(stderr, "sharp_mpi: %-14s %12llu %14llu %12llu %14llu\n",
                coll_names[k], c[k][0], b[k][0], c[k][1], b[k][1]);
    }
}

API int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) {
        sharp_setup();
    }
    return rc;
}

API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) {
        sharp_setup();
    }
    return rc;
}

API int MPI_Finalize(void)
{
    nb_drain(NULL); /* operations freed by the program while in flight */
    if (g.keyval != MPI_KEYVAL_INVALID) {
        /* destroys the world's group (if it has one) */
        void *s;
        int found = 0;
        PMPI_Comm_get_attr(MPI_COMM_WORLD, g.keyval, &s, &found);
        if (found) {
            PMPI_Comm_delete_attr(MPI_COMM_WORLD, g.keyval);
        }
        PMPI_Comm_free_keyval(&g.keyval);
    }
    /* communicators the program never freed: their groups go with the
     * context; MPI may still call their delete callbacks later */
    for (comm_state_t *s = states; s != NULL; s = s->next) {
        s->sc = NULL;
    }
    if (g.ctx != NULL) {
        sharp_coll_finalize(g.ctx);
        g.ctx = NULL;
    }
    if (cfg.verbose >= 1) {
        report();
    }
    if (g.have_oob) {
        PMPI_Comm_free(&g.oob_world);
        g.have_oob = 0;
    }
    return PMPI_Finalize();
}

/* Eligibility ------------------------------------------------------------------ */

static void fail(MPI_Comm comm, const char *what, int rc);

/* The node this rank runs on, as a communicator: the ranks of one host of
 * the fabric (SHARP_FABRIC_HOST, set by sharp-fabric) or of one shared-
 * memory node. */
static void split_node(comm_state_t *s, MPI_Comm comm)
{
    const char *host = getenv("SHARP_FABRIC_HOST");
    if (host != NULL && *host) {
        unsigned h = 5381;
        for (const char *c = host; *c; c++) {
            h = h * 33 + (unsigned char)*c;
        }
        PMPI_Comm_split(comm, (int)(h & 0x7fffffff), s->rank, &s->node);
    } else {
        PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL,
                             &s->node);
    }
    PMPI_Comm_rank(s->node, &s->node_rank);
    PMPI_Comm_size(s->node, &s->node_size);
}

/* Set up a communicator: one sharp group over every rank, or, with several
 * ranks on a node, over one leader per node (node-local aggregation).  All
 * ranks reach the same answer. */
static void comm_setup(comm_state_t *s, MPI_Comm comm)
{
    int rc, maxn = 1;
    if (cfg.node_aggr) {
        split_node(s, comm);
        PMPI_Allreduce(&s->node_size, &maxn, 1, MPI_INT, MPI_MAX, comm);
    }
    if (maxn <= 1) { /* one rank per node: every rank a member */
        if (s->node != MPI_COMM_NULL) {
            PMPI_Comm_free(&s->node);
        }
        PMPI_Comm_dup(comm, &s->oob);
        struct sharp_coll_comm_init_spec cs = {
            .rank = s->rank, .size = s->size, .oob_ctx = &s->oob};
        rc = sharp_coll_comm_init(g.ctx, &cs, &s->sc);
    } else {
        int me[2], lrank = -1, lsize = 0;
        s->hier = 1;
        PMPI_Comm_split(comm, s->node_rank == 0 ? 0 : MPI_UNDEFINED, s->rank,
                        &s->leaders);
        if (s->leaders != MPI_COMM_NULL) {
            PMPI_Comm_rank(s->leaders, &lrank);
            PMPI_Comm_size(s->leaders, &lsize);
        }
        PMPI_Bcast(&lrank, 1, MPI_INT, 0, s->node);
        me[0] = lrank;
        me[1] = s->node_rank;
        int *all = malloc(sizeof(int) * 2 * (size_t)s->size);
        s->node_of = malloc(sizeof(int) * (size_t)s->size);
        s->rank_in_node = malloc(sizeof(int) * (size_t)s->size);
        if (all == NULL || s->node_of == NULL || s->rank_in_node == NULL) {
            fail(comm, "creating a sharp group", SHARP_COLL_ENOMEM);
        }
        PMPI_Allgather(me, 2, MPI_INT, all, 2, MPI_INT, comm);
        for (int r = 0; r < s->size; r++) {
            s->node_of[r] = all[2 * r];
            s->rank_in_node[r] = all[2 * r + 1];
        }
        free(all);
        rc = SHARP_COLL_SUCCESS;
        if (s->leaders != MPI_COMM_NULL) {
            PMPI_Comm_dup(s->leaders, &s->oob);
            struct sharp_coll_comm_init_spec cs = {
                .rank = lrank, .size = lsize, .oob_ctx = &s->oob};
            rc = lsize >= 2 ? sharp_coll_comm_init(g.ctx, &cs, &s->sc)
                            : SHARP_COLL_ENOT_SUPP; /* one node */
        }
        PMPI_Bcast(&rc, 1, MPI_INT, 0, s->node);
    }
    s->use = rc == SHARP_COLL_SUCCESS;
    if (!s->use) {
        s->sc = NULL;
        if (s->rank == 0) {
            note(1,
                 "no sharp group for a communicator of %d (%s): plain MPI "
                 "there",
                 s->size, sharp_coll_strerror(rc));
        }
    } else if (s->rank == 0) {
        note(2, "sharp group for a communicator of %d%s", s->size,
             s->hier ? " (one member per node)" : "");
    }
}

/* The communicator's state, set up on first use; NULL: use PMPI. */
static comm_state_t *comm_sharp(MPI_Comm comm)
{
    comm_state_t *s;
    int found = 0, inter = 0;

    if (g.ctx == NULL || comm == MPI_COMM_NULL) {
        return NULL;
    }
    PMPI_Comm_get_attr(comm, g.keyval, &s, &found);
    if (found) {
        return s->use ? s : NULL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        /* the other ranks go on to create the group: abort, not hang */
        fail(comm, "creating a sharp group", SHARP_COLL_ENOMEM);
    }
    s->oob = s->node = s->leaders = MPI_COMM_NULL;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_rank(comm, &s->rank);
    PMPI_Comm_size(comm, &s->size);
    if (!inter && s->size >= cfg.min_ranks) {
        comm_setup(s, comm);
    }
    s->next = states;
    s->prev = &states;
    if (states != NULL) {
        states->prev = &s->next;
    }
    states = s;
    PMPI_Comm_set_attr(comm, g.keyval, s);
    return s->use ? s : NULL;
}

/* Datatypes ------------------------------------------------------------------
 *
 * A reduction is offloaded only for a predefined datatype and a predefined
 * op that MPI defines on it (MPI-3.1 5.9.2) and that sharp computes with
 * the same result, bit for bit, as the MPI library would; anything else goes
 * to PMPI unchanged (so an op MPI does not define on a type gets the MPI
 * library's own error).  Every rank passes the same count, datatype and op
 * to a reduction, so this local decision is the same everywhere. */

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

/* how a datatype travels through sharp */
typedef struct dt_map {
    int sdt;         /* sharp dtype of the values */
    int tag;         /* pairs: the index's sharp dtype; else SHARP_DTYPE_NULL */
    unsigned ops;    /* OPB(SHARP_OP_x) that may be offloaded */
    int mult;        /* sharp elements in one MPI element (complex: 2) */
    int packed;      /* pairs with a hole: packed to (value, index) */
    size_t vs, toff; /* pairs: value size, index offset in the element */
    size_t ext, size; /* the MPI element's extent and size */
} dt_map_t;

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
static int map_dtype(MPI_Datatype dt, dt_map_t *m)
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

/* Is the data of one element of dt a single run of bytes at true_lb, in
 * the order the type map lists them?  Named types (not MPI_SHORT_INT: it
 * has a hole), and duplicates, contiguous and resized types of such; any
 * other constructor is answered "no" (the data are packed then), since
 * size == true extent alone does not exclude permuted or overlapping
 * blocks. */
static int dense_type(MPI_Datatype dt, int depth)
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
    ok = dense_type(old, depth + 1);
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

static struct sharp_coll_data_desc desc_of(void *p, size_t len)
{
    struct sharp_coll_data_desc d;
    memset(&d, 0, sizeof(d));
    d.type = SHARP_DATA_BUFFER;
    d.mem_type = SHARP_MEM_TYPE_HOST;
    d.buffer.ptr = p;
    d.buffer.length = len;
    return d;
}

static void fail(MPI_Comm comm, const char *what, int rc)
{
    fprintf(stderr,
            "sharp_mpi[%d]: %s failed in the network (%s); the other ranks "
            "may already have its result, so it cannot be redone with MPI: "
            "aborting (the aggregation node, sharpd and sharp_am logs name "
            "the failed component)\n",
            g.rank, what, sharp_coll_strerror(rc));
    PMPI_Abort(comm, 70);
}

/* a local step that cannot fail on a sane MPI did: the other ranks are in
 * the collective already, so abort rather than diverge */
static void die(MPI_Comm comm, const char *what)
{
    fprintf(stderr, "sharp_mpi[%d]: %s failed: aborting\n", g.rank, what);
    PMPI_Abort(comm, 70);
}

/* (value, index) pairs with a hole (MPI_DOUBLE_INT, MPI_LONG_INT,
 * MPI_SHORT_INT): the wire has them packed.  Unpacking writes the value and
 * the index only, never the hole (MPI forbids touching it). */
static void loc_pack(const void *in, void *out, size_t n, const dt_map_t *m)
{
    const char *s = in;
    char *d = out;
    for (size_t i = 0; i < n; i++, s += m->ext, d += m->vs + 4) {
        memcpy(d, s, m->vs);
        memcpy(d + m->vs, s + m->toff, 4);
    }
}

static void loc_unpack(const void *in, void *out, size_t n, const dt_map_t *m)
{
    const char *s = in;
    char *d = out;
    for (size_t i = 0; i < n; i++, s += m->vs + 4, d += m->ext) {
        memcpy(d, s, m->vs);
        memcpy(d + m->toff, s + m->vs, 4);
    }
}

/* Node-local fold (leaders): every node member's elements (wire layout),
 * in node-rank order, with the same engine the aggregation nodes use, so
 * the result does not depend on the MPI library's own reduction (Open MPI
 * 4.1.4's 8-bit sums are wrong on overflow). */
static void node_fold(comm_state_t *s, const shp_reduce_desc_t *d,
                      const char *all, size_t n, size_t pbytes, char *out,
                      MPI_Comm comm)
{
    const void **srcs = malloc(sizeof(void *) * (size_t)s->node_size);
    if (srcs == NULL) {
        fail(comm, "node-local aggregation", SHARP_COLL_ENOMEM);
    }
    for (int k = 0; k < s->node_size; k++) {
        srcs[k] = all + (size_t)k * pbytes;
    }
    if (shp_reduce_fold(d, out, srcs, (unsigned)s->node_size, n) != SHP_OK) {
        fail(comm, "node-local aggregation", SHARP_COLL_ENOT_SUPP);
    }
    free(srcs);
}

static void *xmalloc(size_t n, MPI_Comm comm, const char *what)
{
    void *p = malloc(n + 1);
    if (p == NULL) {
        /* every rank must take the same path: abort, not diverge */
        fail(comm, what, SHARP_COLL_ENOMEM);
    }
    return p;
}

/* allreduce (root < 0) or reduce; 1 if offloaded */
static int try_reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                      MPI_Op op, int root, MPI_Comm comm, int *ret)
{
    dt_map_t m;
    int sop = op_of(op);
    int kind = root < 0 ? C_ALLREDUCE : C_REDUCE;

    if (!(root < 0 ? cfg.allreduce : cfg.reduce) || count <= 0 || sop < 0 ||
        !map_dtype(dt, &m) || !(m.ops & OPB(sop))) {
        return 0;
    }
    size_t n = (size_t)count, bytes = n * m.size; /* == the wire's bytes */
    if (bytes > (size_t)cfg.max_bytes || bytes > INT_MAX) {
        return 0;
    }
    shp_reduce_desc_t d = {(shp_dtype_t)m.sdt, (shp_op_t)sop,
                           (shp_dtype_t)m.tag};
    if (shp_reduce_desc_check(&d, NULL) != SHP_OK ||
        shp_reduce_elem_size(&d) * (size_t)m.mult != m.size) {
        return 0;
    }
    comm_state_t *st = comm_sharp(comm);
    if (st == NULL || root >= st->size) {
        return 0; /* an invalid root: PMPI says so */
    }
    int keep = root < 0 || root == st->rank;
    if (sbuf == MPI_IN_PLACE) {
        if (!keep) {
            return 0; /* only the root may: PMPI says so */
        }
        sbuf = rbuf;
    }
    size_t ns = n * (size_t)m.mult; /* sharp elements */
    const char *src = sbuf;
    char *ps = NULL, *pr = NULL, *all = NULL;
    struct sharp_coll_reduce_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.dtype = (enum sharp_datatype)m.sdt;
    spec.tag_dtype = (enum sharp_datatype)m.tag;
    spec.op = (enum sharp_reduce_op)sop;
    spec.length = ns;
    int rc = SHARP_COLL_SUCCESS;

    if (m.packed) {
        ps = xmalloc(bytes, comm, coll_names[kind]);
        loc_pack(sbuf, ps, n, &m);
        src = ps;
    }
    if (st->hier) {
        /* members -> node leader (gather, fold), leaders through sharp,
         * leader -> members (bcast; for a reduce, to the root only); a
         * reduce is an allreduce whose result only the root keeps.  Data
         * move in the wire layout, so no hole is ever written. */
        if (st->node_rank == 0) {
            all =
                xmalloc((size_t)st->node_size * bytes, comm, coll_names[kind]);
            pr = xmalloc(bytes, comm, coll_names[kind]);
        }
        PMPI_Gather(src, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0,
                    st->node);
        if (st->node_rank == 0) {
            node_fold(st, &d, all, ns, bytes, pr, comm);
            spec.sbuf_desc = desc_of(pr, bytes);
            spec.rbuf_desc = desc_of(pr, bytes);
            rc = sharp_coll_do_allreduce(st->sc, &spec);
        }
        PMPI_Bcast(&rc, 1, MPI_INT, 0, st->node);
        if (rc != SHARP_COLL_SUCCESS) {
            fail(comm, coll_names[kind], rc);
        }
        /* where the result goes in this node: everyone (allreduce), the
         * root (a reduce rooted here), nobody */
        int to = root < 0 ? -1
                 : st->node_of[root] != st->node_of[st->rank]
                     ? -2
                     : st->rank_in_node[root];
        char *res = pr;
        if (st->node_rank != 0 && (to == -1 || to == st->node_rank)) {
            res =
                m.packed ? (pr = xmalloc(bytes, comm, coll_names[kind])) : rbuf;
        }
        if (to == -1) {
            PMPI_Bcast(res, (int)bytes, MPI_BYTE, 0, st->node);
        } else if (to > 0 && st->node_rank == 0) {
            PMPI_Send(res, (int)bytes, MPI_BYTE, to, 0, st->node);
        } else if (to > 0 && st->node_rank == to) {
            PMPI_Recv(res, (int)bytes, MPI_BYTE, 0, 0, st->node,
                      MPI_STATUS_IGNORE);
        }
        if (keep && res != rbuf) {
            if (m.packed) {
                loc_unpack(res, rbuf, n, &m);
            } else {
                memcpy(rbuf, res, bytes);
            }
        }
    } else {
        void *rp = keep ? rbuf : NULL;
        if (m.packed && keep) {
            rp = pr = xmalloc(bytes, comm, coll_names[kind]);
        }
        spec.root = root < 0 ? 0 : root;
        spec.sbuf_desc = desc_of((void *)src, bytes);
        spec.rbuf_desc = desc_of(rp, bytes);
        rc = root < 0 ? sharp_coll_do_allreduce(st->sc, &spec)
                      : sharp_coll_do_reduce(st->sc, &spec);
        if (rc != SHARP_COLL_SUCCESS) {
            fail(comm, coll_names[kind], rc);
        }
        if (m.packed && keep) {
            loc_unpack(pr, rbuf, n, &m);
        }
    }
    free(ps);
    free(pr);
    free(all);
    g.calls[kind][0]++;
    g.bytes[kind][0] += bytes;
    *ret = MPI_SUCCESS;
    return 1;
}

static void fallback(int kind, long bytes)
{
    g.calls[kind][1]++;
    g.bytes[kind][1] += (unsigned long long)(bytes > 0 ? bytes : 0);
}

static long bytes_of(int count, MPI_Datatype dt)
{
    int s = 0;
    if (dt == MPI_DATATYPE_NULL || count <= 0 ||
        PMPI_Type_size(dt, &s) != MPI_SUCCESS) {
        return 0;
    }
    return (long)count * s;
}

/* The collectives ------------------------------------------------------------ */

API int MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                      MPI_Op op, MPI_Comm comm)
{
    int ret;
    if (try_reduce(sbuf, rbuf, count, dt, op, -1, comm, &ret)) {
        return ret;
    }
    fallback(C_ALLREDUCE, bytes_of(count, dt));
    return PMPI_Allreduce(sbuf, rbuf, count, dt, op, comm);
}

API int MPI_Reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                   MPI_Op op, int root, MPI_Comm comm)
{
    int ret;
    if (root >= 0 && try_reduce(sbuf, rbuf, count, dt, op, root, comm, &ret)) {
        return ret;
    }
    fallback(C_REDUCE, bytes_of(count, dt));
    return PMPI_Reduce(sbuf, rbuf, count, dt, op, root, comm);
}

API int MPI_Barrier(MPI_Comm comm)
{
    comm_state_t *st = cfg.barrier ? comm_sharp(comm) : NULL;
    if (st != NULL) {
        int rc = SHARP_COLL_SUCCESS;
        if (st->hier) { /* the node in, the leaders, the node out */
            PMPI_Barrier(st->node);
            if (st->node_rank == 0) {
                rc = sharp_coll_do_barrier(st->sc);
            }
            PMPI_Bcast(&rc, 1, MPI_INT, 0, st->node);
        } else {
            rc = sharp_coll_do_barrier(st->sc);
        }
        if (rc != SHARP_COLL_SUCCESS) {
            fail(comm, "MPI_Barrier", rc);
        }
        g.calls[C_BARRIER][0]++;
        return MPI_SUCCESS;
    }
    fallback(C_BARRIER, 0);
    return PMPI_Barrier(comm);
}

/* the bytes of a bcast through sharp, from p (len bytes) at the root */
static void bcast_bytes(comm_state_t *st, char *p, int len, int root,
                        MPI_Comm comm)
{
    struct sharp_coll_bcast_spec bs;
    int rc = SHARP_COLL_SUCCESS;
    memset(&bs, 0, sizeof(bs));
    bs.buf_desc = desc_of(p, (size_t)len);
    bs.size = (size_t)len;
    if (st->hier) {
        /* the root's node first, then the leaders, then the other nodes */
        int lroot = st->node_of[root];
        int early =
            st->node_of[st->rank] == lroot && st->rank_in_node[root] != 0;
        if (early) {
            PMPI_Bcast(p, len, MPI_BYTE, st->rank_in_node[root], st->node);
        }
        if (st->node_rank == 0) {
            bs.root = lroot;
            rc = sharp_coll_do_bcast(st->sc, &bs);
        }
        PMPI_Bcast(&rc, 1, MPI_INT, 0, st->node);
        if (rc == SHARP_COLL_SUCCESS && !early) {
            PMPI_Bcast(p, len, MPI_BYTE, 0, st->node);
        }
    } else {
        bs.root = root;
        rc = sharp_coll_do_bcast(st->sc, &bs);
    }
    if (rc != SHARP_COLL_SUCCESS) {
        fail(comm, "MPI_Bcast", rc);
    }
}

/* PMPI_Pack (pack) or PMPI_Unpack of count x dt at buf to or from the
 * len bytes at tmp, all of them.  Data at MPI_BOTTOM (absolute addresses)
 * are reached from an address of our own and a struct type displaced back
 * to 0: MPICH 4.0.2 refuses a NULL buffer to pack from or into. */
static void pack_data(int pack, void *buf, int count, MPI_Datatype dt,
                      char *tmp, int len, MPI_Comm comm)
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
        die(comm, pack ? "MPI_Bcast: PMPI_Pack of the root's data"
                       : "MPI_Bcast: PMPI_Unpack of the data");
    }
}

/* MPI requires only the type signatures to match: the root may send 4
 * MPI_INT that another rank receives as one contiguous type of 4 ints, or
 * as 2 MPI_2INT, and the named pair types have holes.  Whether to offload
 * depends only on count x size (equal on every rank) and the communicator,
 * so every rank takes the same path; the local layout only decides how the
 * bytes get there: straight from / into the buffer when they are one run
 * in type-map order, else through PMPI_Pack / PMPI_Unpack and a buffer of
 * exactly those bytes (the homogeneous packed form is the type map's bytes
 * in order, what a contiguous buffer holds). */
API int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root,
                  MPI_Comm comm)
{
    long bytes = bytes_of(count, dt);
    comm_state_t *st = NULL;

    if (cfg.bcast && bytes > 0 && bytes <= cfg.max_bytes && bytes <= INT_MAX) {
        st = comm_sharp(comm);
    }
    if (st == NULL || root < 0 || root >= st->size) {
        fallback(C_BCAST, bytes);
        return PMPI_Bcast(buf, count, dt, root, comm);
    }
    int len = (int)bytes, size = 0;
    char *p, *tmp = NULL;
    MPI_Aint lb, ext, tlb, text;
    PMPI_Type_size(dt, &size);
    PMPI_Type_get_extent(dt, &lb, &ext);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    if (buf != MPI_BOTTOM && (count == 1 || ext == (MPI_Aint)size) &&
        dense_type(dt, 0)) {
        p = (char *)buf + tlb;
    } else {
        p = tmp = xmalloc((size_t)len, comm, "MPI_Bcast");
        if (st->rank == root) {
            pack_data(1, buf, count, dt, tmp, len, comm);
        }
    }
    bcast_bytes(st, p, len, root, comm);
    if (tmp != NULL && st->rank != root) {
        pack_data(0, buf, count, dt, tmp, len, comm);
    }
    free(tmp);
    g.calls[C_BCAST][0]++;
    g.bytes[C_BCAST][0] += (unsigned long long)bytes;
    return MPI_SUCCESS;
}

/* MPI_Iallreduce, _Ireduce, _Ibcast, _Ibarrier, the persistent forms and
 * the MPI_Wait / MPI_Test family that completes them */
#include "mpi-coll/sharp_mpi_nb.c"
