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
 * Not offloaded (passed to PMPI unchanged): derived datatypes, user ops,
 * intercommunicators, MPI_Iallreduce and other non-blocking collectives
 * (they could only complete through MPI's own request machinery), messages
 * above SHARP_MPI_MAX_BYTES and communicators below SHARP_MPI_MIN_RANKS.
 */
#include <mpi.h>
#include <sharp/api/sharp.h>

#include "common/reduce.h"

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

enum { C_ALLREDUCE, C_REDUCE, C_BARRIER, C_BCAST, C_N };
static const char *const coll_names[C_N] = {"MPI_Allreduce", "MPI_Reduce",
                                            "MPI_Barrier", "MPI_Bcast"};

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

static int comm_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    comm_state_t *s = attr;
    (void)comm;
    (void)keyval;
    (void)extra;
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

/* predefined datatype -> sharp dtype (-1: not offloaded); *loc: a MINLOC /
 * MAXLOC pair type, *padded: the C struct has padding the wire has not */
static int dtype_of(MPI_Datatype dt, enum sharp_datatype *tag, int *padded)
{
    *tag = SHARP_DTYPE_NULL;
    *padded = 0;
    if (dt == MPI_INT || dt == MPI_INT32_T)
        return SHARP_DTYPE_INT;
    if (dt == MPI_UNSIGNED || dt == MPI_UINT32_T)
        return SHARP_DTYPE_UNSIGNED;
    if (dt == MPI_LONG || dt == MPI_LONG_LONG || dt == MPI_LONG_LONG_INT ||
        dt == MPI_INT64_T)
        return sizeof(long) == 8 || dt != MPI_LONG ? SHARP_DTYPE_LONG : -1;
    if (dt == MPI_UNSIGNED_LONG || dt == MPI_UNSIGNED_LONG_LONG ||
        dt == MPI_UINT64_T)
        return SHARP_DTYPE_UNSIGNED_LONG;
    if (dt == MPI_FLOAT)
        return SHARP_DTYPE_FLOAT;
    if (dt == MPI_DOUBLE)
        return SHARP_DTYPE_DOUBLE;
    if (dt == MPI_SHORT || dt == MPI_INT16_T)
        return SHARP_DTYPE_SHORT;
    if (dt == MPI_UNSIGNED_SHORT || dt == MPI_UINT16_T)
        return SHARP_DTYPE_UNSIGNED_SHORT;
    if (dt == MPI_SIGNED_CHAR || dt == MPI_INT8_T)
        return SHARP_DTYPE_INT8;
    if (dt == MPI_UNSIGNED_CHAR || dt == MPI_UINT8_T || dt == MPI_BYTE)
        return SHARP_DTYPE_UINT8;
    *tag = SHARP_DTYPE_INT;
    if (dt == MPI_2INT)
        return SHARP_DTYPE_INT;
    if (dt == MPI_FLOAT_INT)
        return SHARP_DTYPE_FLOAT;
    *padded = 1;
    if (dt == MPI_DOUBLE_INT)
        return SHARP_DTYPE_DOUBLE;
    if (dt == MPI_LONG_INT && sizeof(long) == 8)
        return SHARP_DTYPE_LONG;
    *tag = SHARP_DTYPE_NULL;
    *padded = 0;
    return -1;
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

/* (value, int) pairs: the C struct is padded, the wire is packed */
static void loc_pack(const void *in, void *out, size_t n, size_t vs,
                     size_t stride)
{
    for (size_t i = 0; i < n; i++) {
        memcpy((char *)out + i * (vs + 4), (const char *)in + i * stride,
               vs + 4);
    }
}

static void loc_unpack(const void *in, void *out, size_t n, size_t vs,
                       size_t stride)
{
    for (size_t i = 0; i < n; i++) {
        memcpy((char *)out + i * stride, (const char *)in + i * (vs + 4),
               vs + 4);
    }
}

/* Node-local fold (leaders): every node member's elements, in node-rank
 * order, with the same engine the aggregation nodes use, so the result
 * does not depend on the MPI library's own reduction (Open MPI 4.1.4's
 * 8-bit sums are wrong on overflow). */
static void node_fold(comm_state_t *s, const shp_reduce_desc_t *d,
                      const char *all, size_t stride, size_t n, size_t vs,
                      int padded, char *out, MPI_Comm comm)
{
    size_t es = shp_reduce_elem_size(d), ext = padded ? stride : es;
    const void **srcs = malloc(sizeof(void *) * (size_t)s->node_size);
    char *packed = padded ? malloc((size_t)s->node_size * n * es + 1) : NULL;
    if (srcs == NULL || (padded && packed == NULL)) {
        fail(comm, "node-local aggregation", SHARP_COLL_ENOMEM);
    }
    for (int k = 0; k < s->node_size; k++) {
        const char *in = all + (size_t)k * n * ext;
        if (padded) {
            loc_pack(in, packed + (size_t)k * n * es, n, vs, stride);
            srcs[k] = packed + (size_t)k * n * es;
        } else {
            srcs[k] = in;
        }
    }
    if (shp_reduce_fold(d, out, srcs, (unsigned)s->node_size, n) != SHP_OK) {
        fail(comm, "node-local aggregation", SHARP_COLL_ENOT_SUPP);
    }
    free(srcs);
    free(packed);
}

/* allreduce (root < 0) or reduce; 1 if offloaded */
static int try_reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                      MPI_Op op, int root, MPI_Comm comm, int *ret)
{
    enum sharp_datatype tag;
    int padded, tsize, sdt = dtype_of(dt, &tag, &padded), sop = op_of(op);
    int loc = sop == SHARP_OP_MAXLOC || sop == SHARP_OP_MINLOC;
    int kind = root < 0 ? C_ALLREDUCE : C_REDUCE;

    if (!(root < 0 ? cfg.allreduce : cfg.reduce) || sdt < 0 || sop < 0 ||
        count <= 0 || loc != (tag != SHARP_DTYPE_NULL)) {
        return 0;
    }
    PMPI_Type_size(dt, &tsize);
    if ((long)count * tsize > cfg.max_bytes) {
        return 0;
    }
    comm_state_t *st = comm_sharp(comm);
    if (st == NULL) {
        return 0;
    }
    shp_reduce_desc_t d = {(shp_dtype_t)sdt, (shp_op_t)sop, (shp_dtype_t)tag};
    if (shp_reduce_desc_check(&d, NULL) != SHP_OK) {
        return 0; /* e.g. a bitwise op on floats: MPI says it is an error */
    }
    int keep = root < 0 || root == st->rank;
    if (sbuf == MPI_IN_PLACE) {
        sbuf = rbuf;
    }
    MPI_Aint lb, extent;
    PMPI_Type_get_extent(dt, &lb, &extent);
    size_t n = (size_t)count, bytes = n * (size_t)tsize;
    size_t stride = (size_t)extent, ubytes = n * stride; /* user layout */
    size_t vs =
        padded ? (sdt == SHARP_DTYPE_DOUBLE ? sizeof(double) : sizeof(long))
               : 0;
    size_t pbytes = n * shp_reduce_elem_size(&d); /* wire layout */
    char *ps = NULL, *pr = NULL, *all = NULL, *tmp = NULL;
    struct sharp_coll_reduce_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.dtype = (enum sharp_datatype)sdt;
    spec.tag_dtype = tag;
    spec.op = (enum sharp_reduce_op)sop;
    spec.length = n;
    int rc = SHARP_COLL_SUCCESS;

    if (st->hier) {
        /* members -> node leader (gather, fold), leaders through sharp,
         * leader -> members (bcast); a reduce is an allreduce whose result
         * only the root keeps */
        if (st->node_rank == 0) {
            all = malloc((size_t)st->node_size * ubytes);
            pr = malloc(pbytes + 1);
            if (all == NULL || pr == NULL) {
                fail(comm, coll_names[kind], SHARP_COLL_ENOMEM);
            }
        }
        PMPI_Gather(sbuf, (int)ubytes, MPI_BYTE, all, (int)ubytes, MPI_BYTE, 0,
                    st->node);
        if (st->node_rank == 0) {
            node_fold(st, &d, all, stride, n, vs, padded, pr, comm);
            spec.sbuf_desc = desc_of(pr, pbytes);
            spec.rbuf_desc = desc_of(pr, pbytes);
            rc = sharp_coll_do_allreduce(st->sc, &spec);
        }
        PMPI_Bcast(&rc, 1, MPI_INT, 0, st->node);
        if (rc != SHARP_COLL_SUCCESS) {
            fail(comm, coll_names[kind], rc);
        }
        char *out = keep ? rbuf : (tmp = malloc(ubytes + 1));
        if (out == NULL) {
            fail(comm, coll_names[kind], SHARP_COLL_ENOMEM);
        }
        if (st->node_rank == 0) {
            if (padded) {
                loc_unpack(pr, out, n, vs, stride);
            } else {
                memcpy(out, pr, bytes);
            }
        }
        PMPI_Bcast(out, (int)ubytes, MPI_BYTE, 0, st->node);
    } else {
        void *sp = (void *)sbuf, *rp = keep ? rbuf : NULL;
        if (padded) {
            ps = malloc(pbytes + 1);
            pr = malloc(pbytes + 1);
            if (ps == NULL || pr == NULL) {
                /* every rank must take the same path: abort, not diverge */
                fail(comm, coll_names[kind], SHARP_COLL_ENOMEM);
            }
            loc_pack(sbuf, ps, n, vs, stride);
            sp = ps;
            rp = pr;
        }
        spec.root = root < 0 ? 0 : root;
        spec.sbuf_desc = desc_of(sp, pbytes);
        spec.rbuf_desc = desc_of(rp, pbytes);
        rc = root < 0 ? sharp_coll_do_allreduce(st->sc, &spec)
                      : sharp_coll_do_reduce(st->sc, &spec);
        if (rc != SHARP_COLL_SUCCESS) {
            fail(comm, coll_names[kind], rc);
        }
        if (padded && keep) {
            loc_unpack(pr, rbuf, n, vs, stride);
        }
    }
    free(ps);
    free(pr);
    free(all);
    free(tmp);
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
    PMPI_Type_size(dt, &s);
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

API int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root,
                  MPI_Comm comm)
{
    int ni, na, nd, comb;
    long bytes = bytes_of(count, dt);

    /* any predefined (named) type is contiguous bytes */
    PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb);
    if (cfg.bcast && comb == MPI_COMBINER_NAMED && count > 0 &&
        bytes <= cfg.max_bytes) {
        comm_state_t *st = comm_sharp(comm);
        if (st != NULL) {
            struct sharp_coll_bcast_spec bs;
            int rc = SHARP_COLL_SUCCESS;
            memset(&bs, 0, sizeof(bs));
            bs.buf_desc = desc_of(buf, (size_t)bytes);
            bs.size = (size_t)bytes;
            if (st->hier) {
                /* the root's node first, then the leaders, then the other
                 * nodes */
                int lroot = st->node_of[root];
                int in_root_node = st->node_of[st->rank] == lroot;
                if (in_root_node && st->rank_in_node[root] != 0) {
                    PMPI_Bcast(buf, (int)bytes, MPI_BYTE,
                               st->rank_in_node[root], st->node);
                }
                if (st->node_rank == 0) {
                    bs.root = lroot;
                    rc = sharp_coll_do_bcast(st->sc, &bs);
                }
                PMPI_Bcast(&rc, 1, MPI_INT, 0, st->node);
                if (rc == SHARP_COLL_SUCCESS &&
                    !(in_root_node && st->rank_in_node[root] != 0)) {
                    PMPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, st->node);
                }
            } else {
                bs.root = root;
                rc = sharp_coll_do_bcast(st->sc, &bs);
            }
            if (rc != SHARP_COLL_SUCCESS) {
                fail(comm, "MPI_Bcast", rc);
            }
            g.calls[C_BCAST][0]++;
            g.bytes[C_BCAST][0] += (unsigned long long)bytes;
            return MPI_SUCCESS;
        }
    }
    fallback(C_BCAST, bytes);
    return PMPI_Bcast(buf, count, dt, root, comm);
}
