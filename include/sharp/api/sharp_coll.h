/*
 * sharp: the SHARP collective API (libsharp_coll).
 *
 * Source-compatible with the SHARP collective library: names, members,
 * member order and enumerator values follow the published interface, so
 * existing clients (MPI libraries, UCC, NCCL plugins) build against this
 * header unchanged.  What each call does here is documented in
 * docs/libsharp.md of the sharp source tree.
 */
#ifndef SHARP_API_SHARP_COLL_H
#define SHARP_API_SHARP_COLL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <sharp/api/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARP_COLL_DATA_MAX_IOV 15

enum sharp_datatype {
    SHARP_DTYPE_UNSIGNED,       /* uint32_t */
    SHARP_DTYPE_INT,            /* int32_t */
    SHARP_DTYPE_UNSIGNED_LONG,  /* uint64_t */
    SHARP_DTYPE_LONG,           /* int64_t */
    SHARP_DTYPE_FLOAT,          /* IEEE binary32 */
    SHARP_DTYPE_DOUBLE,         /* IEEE binary64 */
    SHARP_DTYPE_UNSIGNED_SHORT, /* uint16_t */
    SHARP_DTYPE_SHORT,          /* int16_t */
    SHARP_DTYPE_FLOAT_SHORT,    /* IEEE binary16 */
    SHARP_DTYPE_BFLOAT16,       /* bfloat16 */
    SHARP_DTYPE_UINT8,
    SHARP_DTYPE_INT8,
    SHARP_DTYPE_NULL
};

enum sharp_reduce_op {
    SHARP_OP_MAX,
    SHARP_OP_MIN,
    SHARP_OP_SUM,
    SHARP_OP_PROD,
    SHARP_OP_LAND,
    SHARP_OP_BAND,
    SHARP_OP_LOR,
    SHARP_OP_BOR,
    SHARP_OP_LXOR,
    SHARP_OP_BXOR,
    SHARP_OP_MAXLOC,
    SHARP_OP_MINLOC,
    SHARP_OP_NULL,
    /* Extension of this implementation (not in NVIDIA's SHARP; every value
     * above keeps its number): SUM of FLOAT, DOUBLE, FLOAT_SHORT and
     * BFLOAT16 computed exactly and rounded once to nearest-even, so the
     * result depends only on the multiset of values, never on the tree,
     * the number of members, rank order or arrival order.  For allreduce
     * and reduce (and their _nb forms, which complete before returning).
     * Reported in caps.support_mask.reduce_ops.  See docs/reduction.md. */
    SHARP_OP_SUM_EXACT = 13
};
#define SHARP_COLL_HAS_OP_SUM_EXACT 1

enum sharp_error_no {
    SHARP_COLL_SUCCESS = 0,
    SHARP_COLL_ERROR = -1,
    SHARP_COLL_ENOT_SUPP = -2,
    SHARP_COLL_ENOMEM = -3,
    SHARP_COLL_EGROUP_ALLOC = -4,
    SHARP_COLL_ECONN_TREE = -5,
    SHARP_COLL_EGROUP_JOIN = -6,
    SHARP_COLL_EQUOTA = -7,
    SHARP_COLL_ESESS_INIT = -8, /* cannot reach the local daemon */
    SHARP_COLL_EDEV = -9,
    SHARP_COLL_EINVAL = -10,
    SHARP_COLL_EJOB_CREATE = -11,
    SHARP_COLL_ETREE_INFO = -12,
    SHARP_COLL_ENOTREE = -13,
    SHARP_COLL_EGROUP_ID = -14,
    SHARP_COLL_EOOB = -15,
    SHARP_COLL_EGROUP_MCAST = -16,
    SHARP_COLL_EGROUP_TRIM = -17,
    SHARP_COLL_ELOCK_FAILED = -18, /* streaming lock busy, may retry */
    SHARP_COLL_ELOCK_DENIED = -19,
    SHARP_COLL_ENO_RESOURCE = -20
};

enum sharp_job_features {
    SHARP_FEATURE_LLT = 1 << 0,
    SHARP_FEATURE_REPRODUCIBLE = 1 << 1,
    SHARP_FEATURE_SAT = 1 << 2,
    SHARP_FEATURE_SAT_EXCLUSIVE_LOCK = 1 << 3,
    /* this library's own: reductions of mostly-zero buffers go block-sparse
     * (SHARP_COLL_SPARSE_MIN), the result bit for bit the dense one's */
    SHARP_FEATURE_SPARSE = 1 << 16
};

enum sharp_aggregation_mode {
    SHARP_AGGREGATION_NONE = 0, /* the library decides */
    SHARP_AGGREGATION_DATAGRAM,
    SHARP_AGGREGATION_STREAMING
};

enum sharp_data_buffer_type { SHARP_DATA_BUFFER, SHARP_DATA_IOV };

enum sharp_data_memory_type {
    SHARP_MEM_TYPE_HOST,
    SHARP_MEM_TYPE_CUDA,
    SHARP_MEM_TYPE_LAST
};

enum config_print_flags {
    SHARP_COLL_CONFIG_PRINT_CONFIG = 1,
    SHARP_COLL_CONFIG_PRINT_HEADER = 2,
    SHARP_COLL_CONFIG_PRINT_DOC = 4,
    SHARP_COLL_CONFIG_PRINT_HIDDEN = 8
};

/* init flags (sharp_coll_config.flags) */
enum {
    SHARP_COLL_HIDE_ERRORS = 1 << 0,
    SHARP_COLL_DISABLE_LAZY_GROUP_RESOURCE_ALLOC = 1 << 1
};

/* sharp_coll_reg_params.field_mask */
enum {
    SHARP_COLL_REG_FIELD_DMABUF_FD = 1 << 0,
    SHARP_COLL_REG_FIELD_DMABUF_OFFSET = 1 << 1
};

struct sharp_coll_config {
    const char *ib_dev_list; /* "dev:port,..."; tcp: ignored */
    int user_progress_num_polls;
    int coll_timeout; /* ms, -1: wait forever */
    uint32_t flags;   /* init flags */
    int reserved[3];
};

extern const struct sharp_coll_config sharp_coll_default_config;

/* Out-of-band collectives over the job, supplied by the caller. */
struct sharp_coll_out_of_band_colls {
    int (*bcast)(void *context, void *buffer, int len, int root);
    int (*barrier)(void *context);
    int (*gather)(void *context, int root, void *sbuf, void *rbuf, int len);
};

struct sharp_coll_init_spec {
    uint64_t job_id;
    int world_rank;
    int world_size;
    int (*progress_func)(void);
    int group_channel_idx;
    struct sharp_coll_config config;
    struct sharp_coll_out_of_band_colls oob_colls;
    int world_local_rank;
    int enable_thread_support;
    void *oob_ctx;
    int reserved[4];
};

struct sharp_coll_comm_init_spec {
    int rank;
    int size;
    void *oob_ctx;
    const uint32_t *group_world_ranks; /* may be NULL */
    int reserved[2];
};

struct sharp_coll_caps {
    int sharp_pkt_version;
    uint64_t reserved[2];
    struct {
        uint64_t dtypes;     /* 1 << SHARP_DTYPE_x */
        uint64_t tag_dtypes; /* index types of MINLOC/MAXLOC */
        uint64_t reduce_ops; /* 1 << SHARP_OP_x */
        uint64_t feature_mask;
        uint64_t reserved[4];
    } support_mask;
    struct {
        int max_osts;
        int user_data_per_ost;
        int max_groups;
        int max_group_channels;
        int osts_per_group;
    } resources;
};

struct sharp_data_iov {
    void *ptr;
    size_t length;
    void *mem_handle;
};

struct sharp_coll_reg_params {
    uint64_t field_mask;
    int dmabuf_fd;
    size_t dmabuf_offset;
};

struct sharp_coll_data_desc {
    enum sharp_data_buffer_type type;
    enum sharp_data_memory_type mem_type;
    int reserved[2];
    union {
        struct {
            void *ptr;
            size_t length;
            void *mem_handle;
        } buffer;
        struct {
            unsigned count;
            struct sharp_data_iov *vector;
        } iov;
    };
};

struct sharp_coll_reduce_spec {
    int root;
    struct sharp_coll_data_desc sbuf_desc;
    struct sharp_coll_data_desc rbuf_desc;
    enum sharp_datatype dtype;
    size_t length; /* elements */
    enum sharp_reduce_op op;
    enum sharp_datatype tag_dtype;
    enum sharp_aggregation_mode aggr_mode;
    int stream_lock_batch_size;
    size_t offset; /* reduce-scatter: bytes into the vector (a window) */
    int reserved[2];
};

struct sharp_coll_bcast_spec {
    int root;
    struct sharp_coll_data_desc buf_desc;
    size_t size;
    int reserved[4];
};

struct sharp_coll_bcast_spec_v2 {
    int root;
    struct sharp_coll_data_desc sbuf_desc;
    struct sharp_coll_data_desc rbuf_desc;
    size_t size;
    int reserved[4];
};

struct sharp_coll_gather_spec {
    struct sharp_coll_data_desc sbuf_desc;
    struct sharp_coll_data_desc rbuf_desc;
    enum sharp_datatype dtype;
    size_t size;
    size_t offset; /* bytes into the gathered vector (a window) */
    int reserved[4];
};

struct sharp_coll_context;
struct sharp_coll_comm;

int sharp_coll_init(struct sharp_coll_init_spec *sharp_coll_spec,
                    struct sharp_coll_context **sharp_coll_context);
int sharp_coll_finalize(struct sharp_coll_context *context);
int sharp_coll_caps_query(struct sharp_coll_context *context,
                          struct sharp_coll_caps *sharp_caps);
int sharp_coll_progress(struct sharp_coll_context *context);

int sharp_coll_comm_init(struct sharp_coll_context *context,
                         struct sharp_coll_comm_init_spec *spec,
                         struct sharp_coll_comm **sharp_coll_comm);
int sharp_coll_comm_destroy(struct sharp_coll_comm *comm);
/* Extension: a standby for `primary`, over the same members (collective
 * over them, as sharp_coll_comm_init): a group of its own, joined and kept
 * up, which the manager places on the tree that shares the fewest
 * aggregation nodes with primary's (none where the topology allows), so
 * that it can carry the operations if primary's group fails.  It is a
 * communicator like any other, counted in the job's groups. */
int sharp_coll_comm_init_standby(struct sharp_coll_context *context,
                                 struct sharp_coll_comm_init_spec *spec,
                                 struct sharp_coll_comm *primary,
                                 struct sharp_coll_comm **sharp_coll_comm);
/* Extension: how far apart this communicator's members may be.  A bcast
 * of at most *bcast_max bytes (0: none) may complete at a member while
 * another has not called it yet (a free bcast: only its root sends, and
 * the others take the result when it comes, even early); a member
 * completes at most *ops_apart operations that another has not called.
 * Every other operation completes at a member only once every member
 * called it.  (A layer that keeps results for members left behind, as
 * libsharp_mpi's recovery does, needs this.) */
int sharp_coll_comm_window(struct sharp_coll_comm *comm, size_t *bcast_max,
                           unsigned *ops_apart);
/* Extension: give a communicator's operations up, from any thread, even
 * while another thread waits in one of them (e.g. a watchdog).  Soon after,
 * in the thread that progresses the context, every pending and later
 * operation of comm fails and the group fails in the network (every other
 * member's operations fail too).  comm must still exist; it is destroyed
 * as usual afterwards. */
int sharp_coll_comm_cancel(struct sharp_coll_comm *comm);

int sharp_coll_do_barrier(struct sharp_coll_comm *comm);
int sharp_coll_do_barrier_nb(struct sharp_coll_comm *comm, void **handle);
int sharp_coll_do_allreduce(struct sharp_coll_comm *comm,
                            struct sharp_coll_reduce_spec *spec);
int sharp_coll_do_allreduce_nb(struct sharp_coll_comm *comm,
                               struct sharp_coll_reduce_spec *spec,
                               void **handle);
int sharp_coll_do_reduce(struct sharp_coll_comm *comm,
                         struct sharp_coll_reduce_spec *spec);
int sharp_coll_do_reduce_nb(struct sharp_coll_comm *comm,
                            struct sharp_coll_reduce_spec *spec, void **handle);
/* Extension (op SHARP_OP_SUM_EXACT only): an allreduce in which this
 * member contributes `ncontrib` vectors of spec->length elements, back to
 * back in the send buffer, added exactly before anything is rounded (what
 * node-local aggregation needs to stay exact).  ncontrib 1 is
 * sharp_coll_do_allreduce. */
int sharp_coll_do_allreduce_exact_n(struct sharp_coll_comm *comm,
                                    struct sharp_coll_reduce_spec *spec,
                                    int ncontrib);
/*
 * Buffers and lengths (docs/libsharp.md has the whole rule).  Every length
 * given is believed and never exceeded: a buffer too short for the call
 * is SHARP_COLL_EINVAL, before anything is sent.  Send and receive
 * buffers may overlap only in place, where each result element lands on
 * that element's own input (allreduce and reduce: the same pointer);
 * any other overlap is SHARP_COLL_EINVAL.
 *
 * Reduce-scatter: the vector of `size` blocks is reduced, and each member
 * keeps its block.  The form is told from the send length:
 *  - send length >= size x length elements: `length` is the block, the
 *    receive buffer gets the block, offset must be 0;
 *  - in place (send pointer = receive pointer): the buffer holds the whole
 *    vector and the block lands at the member's offset in it; if the
 *    receive length is only `length` elements, `length` counts the whole
 *    vector (as UCC's tl/sharp passes an in-place call) and must divide
 *    by size;
 *  - send length = length elements (< size x length): a window of the
 *    vector, starting `offset` bytes in; the block is the receive length;
 *    the receive buffer gets, from its first byte, the window's part of
 *    the member's block (nothing if they do not meet).  NCCL's CollNet
 *    plugin calls it so.
 */
int sharp_coll_do_reduce_scatter(struct sharp_coll_comm *comm,
                                 struct sharp_coll_reduce_spec *spec);
int sharp_coll_do_reduce_scatter_nb(struct sharp_coll_comm *comm,
                                    struct sharp_coll_reduce_spec *spec,
                                    void **handle);
/*
 * Allgather: the vector is `size` blocks of the send length (spec->size
 * and dtype are not read); the receive buffer gets the window of it that
 * starts `offset` bytes in and is the receive length long (cut where the
 * vector ends: offset 0 and a receive buffer of the whole vector is the
 * plain form).  The send buffer holds, from its first byte, the window's
 * part of the member's block.  In place: the send buffer is the member's
 * block inside the receive buffer.
 */
int sharp_coll_do_allgather(struct sharp_coll_comm *comm,
                            struct sharp_coll_gather_spec *spec);
int sharp_coll_do_allgather_nb(struct sharp_coll_comm *comm,
                               struct sharp_coll_gather_spec *spec,
                               void **handle);
int sharp_coll_do_bcast(struct sharp_coll_comm *comm,
                        struct sharp_coll_bcast_spec *spec);
int sharp_coll_do_bcast_nb(struct sharp_coll_comm *comm,
                           struct sharp_coll_bcast_spec *spec, void **handle);

int sharp_coll_req_test(void *handle);
int sharp_coll_req_wait(void *handle);
int sharp_coll_req_free(void *handle);

int sharp_coll_reg_mr(struct sharp_coll_context *context, void *buf,
                      size_t size, void **mr);
int sharp_coll_reg_mr_v2(struct sharp_coll_context *context, void *buf,
                         size_t size,
                         const struct sharp_coll_reg_params *params, void **mr);
int sharp_coll_dereg_mr(struct sharp_coll_context *context, void *mr);

int sharp_coll_print_config(FILE *stream, enum config_print_flags print_flags,
                            const char *exec_name);
const char *sharp_coll_strerror(int error);
int sharp_coll_dump_stats(struct sharp_coll_context *context);

#ifdef __cplusplus
}
#endif

#endif
