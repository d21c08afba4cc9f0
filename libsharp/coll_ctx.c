/*
 * libsharp_coll: the context, the library's lower layer, and its
 * progress.  Configuration from SHARP_COLL_* variables, the lock, the
 * loop's turns (sleeping, spinning on shm, or polling the sockets), the
 * link to the local sharpd and its requests, the out-of-band helpers.  The
 * job is created on it (coll_job.c), the small information calls read it
 * (coll_info.c).  Communicators are built on it
 * (coll_comm.h); it knows them only as the members of its list, and calls
 * them through their callbacks (coll_member_ops_t) on the retransmit tick,
 * on a failure that sharpd reports, on a cancel and at finalize.
 */
#include "reduce/sparse.h"
#include "libsharp/coll_int.h"

#include "core/config.h"
#include "protocol/ctl.h"
#include "core/log.h"
#include "core/paths.h"
#include "core/time.h"
#include "reduce/reduce.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

_Static_assert((int)SHARP_DTYPE_NULL == (int)SHP_DTYPE_NULL &&
                   (int)SHARP_DTYPE_INT8 == (int)SHP_DTYPE_I8 &&
                   (int)SHARP_DTYPE_FLOAT_SHORT == (int)SHP_DTYPE_F16,
               "the wire's dtype values are the API's");
_Static_assert((int)SHARP_OP_NULL == (int)SHP_OP_NULL &&
                   (int)SHARP_OP_MINLOC == (int)SHP_OP_MINLOC,
               "the wire's op values are the API's");

SHP_API const struct sharp_coll_config sharp_coll_default_config = {
    .ib_dev_list = NULL,
    .user_progress_num_polls = 128,
    .coll_timeout = -1,
    .flags = 0,
};

static const shp_config_range_t r_level = {0, 5};
static const shp_config_range_t r_osts = {0, 4096};
static const shp_config_range_t r_groups = {0, 1 << 16};
static const shp_config_range_t r_batch = {1, 1 << 20};
static const shp_config_range_t r_spin = {0, 10000};
static const shp_config_range_t r_stripes = {1, COLL_MAX_STRIPES};
static const shp_config_range_t r_percent = {0, 100};

static const shp_config_opt_t coll_opts[] = {
    {"log_level", "2",
     "0 fatal, 1 error, 2 warning, 3 info, 4 debug, 5 trace (to stderr)",
     offsetof(coll_cfg_t, log_level), &shp_cfg_int, &r_level},
    {"sharpd_socket", SHP_PATH_SHARPD_SOCK, "Unix socket of this host's sharpd",
     offsetof(coll_cfg_t, sharpd_socket), &shp_cfg_string},
    {"local_ip", "",
     "source address of data connections and multicast (empty: any)",
     offsetof(coll_cfg_t, local_ip), &shp_cfg_string},
    {"job_quota_osts", "0",
     "outstanding operations per group to ask for (0: the manager's default)",
     offsetof(coll_cfg_t, quota_osts), &shp_cfg_uint, &r_osts},
    {"job_quota_payload_per_ost", "0",
     "payload bytes per operation to ask for (0: the manager's default)",
     offsetof(coll_cfg_t, quota_payload), &shp_cfg_size},
    {"job_quota_max_groups", "0",
     "groups (communicators) to ask for (0: the manager's default)",
     offsetof(coll_cfg_t, quota_groups), &shp_cfg_uint, &r_groups},
    {"pipeline_depth", "0",
     "fragments in flight per communicator (0: the group's OST quota)",
     offsetof(coll_cfg_t, pipeline_depth), &shp_cfg_uint, &r_osts},
    {"stripes", "1",
     "groups per communicator, each on another tree where the manager has "
     "one apart: an operation of stripe_min bytes or more is cut into a "
     "part per group, reduced at once (1: one group)",
     offsetof(coll_cfg_t, stripes), &shp_cfg_uint, &r_stripes},
    {"stripe_min", "256k",
     "bytes from which an operation is striped over the stripes",
     offsetof(coll_cfg_t, stripe_min), &shp_cfg_size},
    {"tree_bcast", "1",
     "a bcast goes up the tree as the root's data alone, the others send "
     "a header, no AN folds (0: as a reduction of the root's data and "
     "everyone else's zeros); every member of a job must say the same",
     offsetof(coll_cfg_t, tree_bcast), &shp_cfg_bool},
    {"free_bcast_max", "4k",
     "a bcast of at most this many bytes (and one fragment) goes without "
     "the other members' messages: only its root sends, and a member "
     "takes its result even before it calls it (every 8th operation "
     "excepted, which every member sends: no root gets further ahead); "
     "0: never, at most 4k; with tree_bcast only; every member of a job "
     "must say the same",
     offsetof(coll_cfg_t, free_bcast_max), &shp_cfg_size},
    {"enable_mcast_target", "1",
     "take results by multicast when the manager offers it",
     offsetof(coll_cfg_t, enable_mcast_target), &shp_cfg_bool},
    {"group_is_target", "0",
     "ask for results by multicast only (lost ones recovered over RC)",
     offsetof(coll_cfg_t, group_is_target), &shp_cfg_bool},
    {"enable_sat", "0",
     "accepted for compatibility: large messages are always pipelined "
     "(SAT is always reported)",
     offsetof(coll_cfg_t, enable_sat), &shp_cfg_bool},
    {"lock_on_comm_init", "0",
     "accepted for compatibility: there is no streaming lock to take",
     offsetof(coll_cfg_t, lock_on_comm_init), &shp_cfg_bool},
    {"polling", "0",
     "spin while waiting instead of sleeping on the sockets (dedicated cores)",
     offsetof(coll_cfg_t, polling), &shp_cfg_bool},
    {"spin_us", "200",
     "shm transport: before sleeping in a wait, look for the answer this "
     "many microseconds, yielding the core between looks (0: sleep at once)",
     offsetof(coll_cfg_t, spin_us), &shp_cfg_uint, &r_spin},
    {"sock_spin_us", "200",
     "tcp, udp and verbs: before sleeping in a wait, poll the sockets for "
     "this many microseconds after the last message in or out, yielding "
     "the core between polls (0: sleep at once)",
     offsetof(coll_cfg_t, sock_spin_us), &shp_cfg_uint, &r_spin},
    {"poll_batch", "16",
     "most loop turns per sharp_coll_progress() call (it stops at the "
     "first turn that brought no message)",
     offsetof(coll_cfg_t, poll_batch), &shp_cfg_uint, &r_batch},
    {"retrans_timeout", "20ms",
     "ask the leaf AN for a multicast result not received after this "
     "(again after twice as long, and so on)",
     offsetof(coll_cfg_t, retrans_ms), &shp_cfg_time},
    {"coll_timeout", "-1",
     "fail an operation without progress for this long (-1: the init "
     "spec's coll_timeout, or forever)",
     offsetof(coll_cfg_t, coll_timeout_ms), &shp_cfg_time},
    {"ctl_timeout", "30s", "longest wait for an answer from sharpd",
     offsetof(coll_cfg_t, ctl_timeout_ms), &shp_cfg_time},
    {"connect_timeout", "5s",
     "longest wait to reach sharpd or to join at the leaf AN",
     offsetof(coll_cfg_t, connect_timeout_ms), &shp_cfg_time},
    {"exact_one_pass_max", "8k",
     "SHARP_OP_SUM_EXACT: carry the type's whole range in one pass when "
     "that payload is at most this many bytes, else agree on the "
     "exponent window first (two passes); the result is the same",
     offsetof(coll_cfg_t, exact_one_pass_max), &shp_cfg_size},
    {"sparse_min", "16k",
     "a fragment of a sum, BOR, BXOR or LOR of at least this many bytes "
     "(a group's payload per operation at most) goes as the bitmap of its "
     "blocks that are not all zero and those blocks only, if they are few "
     "enough (sparse_density); the result is the same bit for bit "
     "(0: never)",
     offsetof(coll_cfg_t, sparse_min), &shp_cfg_size},
    {"sparse_block", "1k",
     "the blocks of a sparse fragment: a multiple of the element's size, "
     "8 bytes to 64k",
     offsetof(coll_cfg_t, sparse_block), &shp_cfg_size},
    {"sparse_density", "50",
     "a fragment goes sparse when its non-zero blocks (with the bitmap) "
     "come to at most this percent of its bytes",
     offsetof(coll_cfg_t, sparse_density), &shp_cfg_uint, &r_percent},
    {"job_id", "",
     "a job the scheduler reserved (the sharp SPANK plugin sets Slurm's job "
     "id): every rank attaches to it, none begins or ends a job; empty: "
     "rank 0 begins the init spec's job_id",
     offsetof(coll_cfg_t, job_id), &shp_cfg_string},
    {NULL}};

static const shp_config_table_t coll_table = {"sharp_coll", "SHARP_COLL_", NULL,
                                              coll_opts};

const shp_config_table_t *shp_coll_config_table(void)
{
    return &coll_table;
}

/* Configuration ---------------------------------------------------------- */

int coll_cfg_load(coll_cfg_t *cfg)
{
    shp_config_err_t err;

    memset(cfg, 0, sizeof(*cfg));
    if (shp_config_defaults(&coll_table, cfg) != SHP_OK) {
        return SHARP_COLL_ENOMEM;
    }
    /* the level first, so that warnings about other variables obey it */
    const char *lvl = getenv("SHARP_COLL_LOG_LEVEL");
    if (lvl != NULL && shp_config_set(&coll_table, cfg, "log_level", lvl,
                                      "SHARP_COLL_LOG_LEVEL", &err) != SHP_OK) {
        cfg->log_level = SHP_LOG_WARN;
    }
    shp_log_set_component("sharp_coll");
    shp_log_set_level(cfg->log_level);
    if (shp_config_load_env(&coll_table, cfg, NULL, &err) != SHP_OK) {
        shp_error("%s", err.msg);
        shp_config_release(&coll_table, cfg);
        return SHARP_COLL_EINVAL;
    }
    if (cfg->sparse_block < SHP_SPARSE_BLOCK_MIN ||
        cfg->sparse_block > SHP_SPARSE_BLOCK_MAX) {
        shp_error("SHARP_COLL_SPARSE_BLOCK: %zu bytes; from %d to %d",
                  cfg->sparse_block, SHP_SPARSE_BLOCK_MIN,
                  SHP_SPARSE_BLOCK_MAX);
        shp_config_release(&coll_table, cfg);
        return SHARP_COLL_EINVAL;
    }
    shp_log_set_level(cfg->log_level);
    return SHARP_COLL_SUCCESS;
}

/* Locking and progress ------------------------------------------------------ */

/*
 * Every call that touches the context takes its lock, with or without
 * thread support: the event loop must never run in two threads at once
 * (libev aborts), and an uncontended lock costs little next to a loop turn.
 * Thread support (ctx->mt) changes only how waiting is done: short sleeps,
 * and the lock let go between turns for as short a time as it is held.
 */
void coll_lock(coll_ctx_t *ctx)
{
    if (pthread_mutex_trylock(&ctx->lock) != 0) {
        atomic_fetch_add(&ctx->lock_waiters, 1);
        pthread_mutex_lock(&ctx->lock);
        atomic_fetch_sub(&ctx->lock_waiters, 1);
    }
}

void coll_unlock(coll_ctx_t *ctx)
{
    pthread_mutex_unlock(&ctx->lock);
}

static void wake_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

/* How long the shm transport looks for an answer before the loop sleeps
 * (tp->shm.spin_ns): set for a turn that may sleep, 0 at every other time. */
static void set_spin(coll_ctx_t *ctx, uint64_t ns)
{
    for (int i = 0; i < COLL_NTP; i++) {
        ctx->tps[i].shm.spin_ns = ns;
        ctx->tps[i].shm.spin_break =
            ns > 0; /* the wait looks after each turn */
    }
}

/* Messages in and out of every transport: a wait's socket spin runs while
 * this moves (an operation's post counts). */
static uint64_t msgs_io(const coll_ctx_t *ctx)
{
    uint64_t n = 0;
    for (int i = 0; i < COLL_NTP; i++) {
        n += ctx->tps[i].stats.msgs_in + ctx->tps[i].stats.msgs_out;
    }
    return n;
}

/* A turn of a blocking wait that polls the sockets without sleeping, with
 * the core yielded when it brought nothing: 1 if it ran (the wait spins),
 * 0 if the wait should sleep.  It spins sock_spin_us after the last
 * message in or out over a socket transport (tcp, udp, verbs; shm looks at
 * its rings in its own spin, without system calls).  On cores shared by
 * more processes than cores, a sleeping member lets its core go idle and
 * its wake-up is the costly part (a virtual CPU halted and woken); a
 * spinner that yields hands its core to whoever has work. */
static int sock_spin_turn(coll_ctx_t *ctx)
{
    if (ctx->cfg.sock_spin_us == 0 || ctx->mt ||
        !(ctx->tps_up[0] || ctx->tps_up[1] || ctx->tps_up[2])) {
        return 0;
    }
    uint64_t n = msgs_io(ctx), now = shp_time_ns();
    if (n != ctx->spin_msgs) {
        ctx->spin_msgs = n;
        ctx->spin_from_ns = now;
    }
    if (now - ctx->spin_from_ns >= (uint64_t)ctx->cfg.sock_spin_us * 1000) {
        return 0;
    }
    ev_run(ctx->loop, EVRUN_NOWAIT);
    if (msgs_io(ctx) == n) {
        sched_yield();
    }
    return 1;
}

void coll_progress_once(coll_ctx_t *ctx, int may_block)
{
    if (!may_block || ctx->cfg.polling) {
        ev_run(ctx->loop, EVRUN_NOWAIT);
    } else if (!sock_spin_turn(ctx)) {
        /* sleep on the sockets, but not for long: callers check deadlines
         * between turns, and the caller's progress function (or other
         * threads) must not wait on us for more than a millisecond */
        ev_timer wake;
        double s = ctx->spec.progress_func != NULL || ctx->mt ? 0.001 : 0.05;
        ev_timer_init(&wake, wake_cb, s, 0.);
        ev_timer_start(ctx->loop, &wake);
        /* not while other threads may wait for the lock this one holds */
        set_spin(ctx, ctx->mt ? 0 : (uint64_t)ctx->cfg.spin_us * 1000);
        ev_run(ctx->loop, EVRUN_ONCE);
        set_spin(ctx, 0);
        ev_timer_stop(ctx->loop, &wake);
    }
    if (ctx->spec.progress_func != NULL) {
        ctx->spec.progress_func();
    }
}

static void tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    coll_ctx_t *ctx = w->data;
    uint64_t now = shp_time_ns();
    int busy = 0;

    (void)revents;
    for (coll_member_t *m = ctx->members; m != NULL; m = m->next) {
        busy |= m->ops->tick(m, now);
    }
    if (!busy) {
        ev_timer_stop(loop, w);
    }
}

/* in the loop: the communicators canceled from other threads fail */
static void cancel_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    coll_ctx_t *ctx = w->data;

    (void)loop;
    (void)revents;
    for (coll_member_t *m = ctx->members; m != NULL; m = m->next) {
        if (atomic_exchange(&m->cancel, 0)) {
            m->ops->fail(m, SHP_ERR_CANCELED,
                         "the program gave its operations up");
        }
    }
}

/* Any thread, at any time while m is in the list, even while another
 * thread waits in the loop: no lock (the waiter holds it), an atomic flag
 * and a wake-up of the loop (ev_async_send is thread-safe); the loop's
 * thread fails the member (cancel_cb). */
void coll_member_cancel(coll_ctx_t *ctx, coll_member_t *m)
{
    atomic_store(&m->cancel, 1);
    ev_async_send(ctx->loop, &ctx->cancel_w);
}

void coll_member_add(coll_ctx_t *ctx, coll_member_t *m)
{
    m->next = ctx->members;
    ctx->members = m;
}

void coll_member_remove(coll_ctx_t *ctx, coll_member_t *m)
{
    for (coll_member_t **pp = &ctx->members; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
}

/* every member (gid: of that group only; 0: all) fails */
static void fail_members(coll_ctx_t *ctx, int all, uint64_t gid,
                         shp_status_t st, const char *why)
{
    for (coll_member_t *m = ctx->members; m != NULL; m = m->next) {
        if (all || m->group_id == gid) {
            m->ops->fail(m, st, why);
        }
    }
}

void coll_arm_tick(coll_ctx_t *ctx)
{
    if (!ev_is_active(&ctx->tick)) {
        double iv = (double)ctx->cfg.retrans_ms / 2000.0;
        ev_timer_set(&ctx->tick, iv, iv);
        ev_timer_start(ctx->loop, &ctx->tick);
    }
}

/* The link to sharpd -------------------------------------------------------- */

static void coll_sd_frame(shp_conn_t *conn, const void *frame, size_t len)
{
    coll_ctx_t *ctx = conn->arg;
    const char *why;
    json_t *msg = shp_ctl_recv(conn, frame, len, &why);

    if (msg == NULL) {
        return;
    }
    const char *type = shp_ctl_type(msg);
    uint64_t jid = 0, gid = 0;
    if (!strcmp(type, "group_revoked")) {
        int all = json_is_true(json_object_get(msg, "all"));
        if (shp_json_get_u64(msg, "job_id", &jid, NULL) == SHP_OK &&
            (all || shp_json_get_u64(msg, "group_id", &gid, NULL) == SHP_OK) &&
            jid == ctx->job_id) {
            fail_members(ctx, all, gid, SHP_ERR_GROUP_REVOKED,
                         shp_json_opt_str(msg, "reason", "revoked"));
        }
    } else if (!strcmp(type, "job_killed")) {
        if (shp_json_get_u64(msg, "job_id", &jid, NULL) == SHP_OK &&
            jid == ctx->job_id) {
            shp_error("job %llu was ended by the manager: %s",
                      (unsigned long long)jid,
                      shp_json_opt_str(msg, "reason", "?"));
            ctx->job_failed = SHP_ERR_JOB_KILLED;
            fail_members(ctx, 1, 0, SHP_ERR_JOB_KILLED, "the job was killed");
        }
    } else if (shp_json_opt_int(msg, "id", 0, INT64_MAX, -1) == ctx->want_id &&
               ctx->reply == NULL) {
        ctx->reply = json_incref(msg);
    }
    json_decref(msg);
}

static void coll_sd_connected(shp_conn_t *conn)
{
    coll_ctx_t *ctx = conn->arg;
    struct ucred cr;
    socklen_t cl = sizeof(cr);

    ctx->sd_connected = 1;
    /* the user sharpd runs as, from the kernel: an shm listener running as
     * it (or root, or us) is taken for an AN (transport/shm/shm.c) */
    if (getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) {
        ctx->sd_uid = cr.uid;
    }
}

static void coll_sd_closed(shp_conn_t *conn, shp_status_t reason)
{
    coll_ctx_t *ctx = conn->arg;
    if (ctx->sd_up && ctx->job_ok) {
        shp_error("lost the local sharpd (%s): %s", ctx->cfg.sharpd_socket,
                  shp_status_str(reason));
        ctx->job_failed = SHP_ERR_UNREACHABLE;
        fail_members(ctx, 1, 0, SHP_ERR_UNREACHABLE, "lost the local sharpd");
    }
    ctx->sd_up = 0;
}

static const shp_conn_ops_t coll_sd_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = coll_sd_frame,
    .on_connect = coll_sd_connected,
    .on_close = coll_sd_closed,
};

static shp_status_t coll_sd_connect(coll_ctx_t *ctx)
{
    shp_sockaddr_t addr;
    uint64_t deadline =
        shp_time_ns() + (uint64_t)ctx->cfg.connect_timeout_ms * 1000000u;

    if (shp_sockaddr_parse(ctx->cfg.sharpd_socket, 0, &addr) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    shp_conn_init(&ctx->sd, ctx->loop, &coll_sd_ops, ctx, SHP_CTL_MAX_FRAME);
    ctx->sd_up = 1;
    if (shp_conn_connect(&ctx->sd, &addr, NULL) != SHP_OK) {
        ctx->sd_up = 0;
        return SHP_ERR_CONN_REFUSED;
    }
    while (ctx->sd_up && !ctx->sd_connected && shp_time_ns() < deadline) {
        coll_progress_once(ctx, 1);
    }
    if (!ctx->sd_connected) {
        if (ctx->sd_up) {
            shp_conn_close(&ctx->sd, SHP_ERR_TIMED_OUT);
        }
        return SHP_ERR_CONN_REFUSED;
    }
    return SHP_OK;
}

static void call_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    *(int *)w->data = 1;
}

json_t *coll_sd_call(coll_ctx_t *ctx, json_t *msg, shp_status_t *st)
{
    ev_timer t;
    int expired = 0;

    *st = SHP_OK;
    if (!ctx->sd_up) {
        json_decref(msg);
        *st = SHP_ERR_UNREACHABLE;
        return NULL;
    }
    ctx->want_id = ++ctx->next_id;
    json_object_set_new(msg, "id", json_integer(ctx->want_id));
    json_decref(ctx->reply);
    ctx->reply = NULL;
    if (shp_ctl_send(&ctx->sd, msg) != SHP_OK) {
        json_decref(msg);
        *st = SHP_ERR_UNREACHABLE;
        return NULL;
    }
    json_decref(msg);
    ev_timer_init(&t, call_timeout_cb, (double)ctx->cfg.ctl_timeout_ms / 1e3,
                  0.);
    t.data = &expired;
    ev_timer_start(ctx->loop, &t);
    while (ctx->reply == NULL && ctx->sd_up && !expired) {
        coll_progress_once(ctx, 1);
    }
    ev_timer_stop(ctx->loop, &t);
    json_t *r = ctx->reply;
    ctx->reply = NULL;
    ctx->want_id = -1;
    if (r == NULL) {
        *st = expired ? SHP_ERR_TIMED_OUT : SHP_ERR_UNREACHABLE;
        return NULL;
    }
    *st = (shp_status_t)shp_json_opt_int(r, "status", -32768, 32767,
                                         SHP_ERR_PROTO);
    if (*st != SHP_OK) {
        shp_debug("sharpd: %s: %s", shp_ctl_type(r),
                  shp_json_opt_str(r, "error", "?"));
    }
    return r;
}

void coll_sd_job_request(coll_ctx_t *ctx, const char *type, json_t *extra)
{
    shp_status_t st;
    json_t *msg = json_pack("{s:s, s:o}", "type", type, "job_id",
                            shp_json_u64(ctx->job_id));
    if (extra != NULL) {
        json_object_update(msg, extra);
        json_decref(extra);
    }
    json_decref(coll_sd_call(ctx, msg, &st));
}

/* Out-of-band helpers ------------------------------------------------------- */

int coll_oob_gather(coll_ctx_t *ctx, void *oob, int root, void *sbuf,
                    void *rbuf, int len)
{
    return ctx->spec.oob_colls.gather(oob, root, sbuf, rbuf, len) == 0
               ? SHARP_COLL_SUCCESS
               : SHARP_COLL_EOOB;
}

int coll_oob_bcast(coll_ctx_t *ctx, void *oob, void *buf, int len, int root)
{
    return ctx->spec.oob_colls.bcast(oob, buf, len, root) == 0
               ? SHARP_COLL_SUCCESS
               : SHARP_COLL_EOOB;
}

int coll_agree(coll_ctx_t *ctx, void *oob, int rank, int size, int status)
{
    int32_t mine = status, worst = 0;
    int32_t *all = rank == 0 ? calloc((size_t)size, sizeof(*all)) : NULL;

    if (rank == 0 && all == NULL) {
        mine = SHARP_COLL_ENOMEM; /* still take part */
    }
    if (coll_oob_gather(ctx, oob, 0, &mine, all ? all : &worst, sizeof(mine)) !=
        SHARP_COLL_SUCCESS) {
        free(all);
        return SHARP_COLL_EOOB;
    }
    if (rank == 0) {
        worst = mine;
        for (int i = 0; all != NULL && i < size; i++) {
            if (all[i] != 0 && (worst == 0 || all[i] < worst)) {
                worst = all[i];
            }
        }
    }
    free(all);
    if (coll_oob_bcast(ctx, oob, &worst, sizeof(worst), 0) !=
        SHARP_COLL_SUCCESS) {
        return SHARP_COLL_EOOB;
    }
    return worst;
}

int coll_status_to_sharp(shp_status_t st, int dflt)
{
    switch (st) {
    case SHP_OK: return SHARP_COLL_SUCCESS;
    case SHP_ERR_NO_MEMORY: return SHARP_COLL_ENOMEM;
    case SHP_ERR_INVALID_PARAM: return SHARP_COLL_EINVAL;
    case SHP_ERR_UNSUPPORTED: return SHARP_COLL_ENOT_SUPP;
    case SHP_ERR_NO_TREE: return SHARP_COLL_ENOTREE;
    case SHP_ERR_QUOTA: return SHARP_COLL_EQUOTA;
    case SHP_ERR_NO_RESOURCE: return SHARP_COLL_ENO_RESOURCE;
    case SHP_ERR_JOB_REFUSED:
    case SHP_ERR_JOB_UNKNOWN:
    case SHP_ERR_JOB_KILLED: return SHARP_COLL_EJOB_CREATE;
    default: return dflt;
    }
}

static int coll_sd_hello(coll_ctx_t *ctx)
{
    shp_status_t st = coll_sd_connect(ctx);
    if (st != SHP_OK) {
        shp_error("cannot reach sharpd at %s: %s", ctx->cfg.sharpd_socket,
                  shp_status_str(st));
        return SHARP_COLL_ESESS_INIT;
    }
    json_t *r = coll_sd_call(ctx, json_pack("{s:s}", "type", "hello"), &st);
    const char *host = NULL;
    if (r == NULL || st != SHP_OK ||
        shp_json_get_str(r, "host", &host, NULL) != SHP_OK ||
        strlen(host) >= SHP_HOST_MAX) {
        shp_error("sharpd at %s does not answer: %s", ctx->cfg.sharpd_socket,
                  shp_status_str(st));
        json_decref(r);
        return SHARP_COLL_ESESS_INIT;
    }
    snprintf(ctx->host, sizeof(ctx->host), "%s", host);
    json_decref(r);
    return SHARP_COLL_SUCCESS;
}

/* whatever coll_ctx_new and coll_ctx_setup made, undone (the one cleanup path) */
void coll_ctx_free(coll_ctx_t *ctx)
{
    if (ctx->loop != NULL) {
        if (ctx->sd_up) {
            shp_conn_close(&ctx->sd, SHP_OK);
        }
        ev_timer_stop(ctx->loop, &ctx->tick);
        ev_async_stop(ctx->loop, &ctx->cancel_w);
        for (int i = 0; i < COLL_NTP; i++) {
            if (ctx->tps_up[i]) {
                shp_tp_cleanup(&ctx->tps[i]);
            }
        }
        /* let closes complete (on_close callbacks run from the loop) */
        ev_run(ctx->loop, EVRUN_NOWAIT);
    }
    json_decref(ctx->reply);
    if (ctx->loop != NULL) {
        ev_loop_destroy(ctx->loop);
    }
    pthread_mutex_destroy(&ctx->lock);
    shp_config_release(&coll_table, &ctx->cfg);
    free(ctx);
}

/* a context that nothing has been asked of yet (NULL: no memory) */
coll_ctx_t *coll_ctx_new(const struct sharp_coll_init_spec *spec)
{
    coll_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        return NULL;
    }
    ctx->spec = *spec;
    ctx->sd_uid = (uid_t)-1;
    ctx->job_id = spec->job_id;
    ctx->want_id = -1;
    ctx->mt = spec->enable_thread_support != 0;
    /* recursive: a progress function may call back into the library */
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&ctx->lock, &a);
    pthread_mutexattr_destroy(&a);
    return ctx;
}

/* SHARP_COLL_JOB_ID: a job the scheduler reserved, to attach to */
static int cfg_job_id(coll_ctx_t *ctx)
{
    char *end;
    if (ctx->cfg.job_id[0] == '\0') {
        return SHARP_COLL_SUCCESS;
    }
    errno = 0;
    unsigned long long v = strtoull(ctx->cfg.job_id, &end, 10);
    if (errno != 0 || *end != '\0' || ctx->cfg.job_id[0] == '-') {
        shp_error("SHARP_COLL_JOB_ID=%s: not a job id (a decimal number)",
                  ctx->cfg.job_id);
        return SHARP_COLL_EINVAL;
    }
    ctx->job_id = v;
    ctx->reserved = 1;
    return SHARP_COLL_SUCCESS;
}

/* This rank's own part, before the others are asked: configuration, the
 * loop and its watchers, the link to sharpd and this host's name. */
int coll_ctx_setup(coll_ctx_t *ctx)
{
    int rc = coll_cfg_load(&ctx->cfg);
    if (rc != SHARP_COLL_SUCCESS ||
        (rc = cfg_job_id(ctx)) != SHARP_COLL_SUCCESS) {
        return rc;
    }
    if (ctx->cfg.coll_timeout_ms < 0 && ctx->spec.config.coll_timeout > 0) {
        ctx->cfg.coll_timeout_ms = ctx->spec.config.coll_timeout;
    }
    if (ctx->cfg.retrans_ms <= 0) {
        ctx->cfg.retrans_ms = 20;
    }
    ctx->loop = ev_loop_new(EVFLAG_AUTO);
    if (ctx->loop == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    ev_init(&ctx->tick, tick_cb);
    ctx->tick.data = ctx;
    ev_async_init(&ctx->cancel_w, cancel_cb);
    ctx->cancel_w.data = ctx;
    ev_async_start(ctx->loop, &ctx->cancel_w);
    return coll_sd_hello(ctx);
}

static uint64_t msgs_in(const coll_ctx_t *ctx)
{
    uint64_t n = 0;
    for (int i = 0; i < COLL_NTP; i++) {
        n += ctx->tps[i].stats.msgs_in;
    }
    return n;
}

SHP_API int sharp_coll_progress(struct sharp_coll_context *ctx)
{
    if (ctx == NULL) {
        return SHARP_COLL_EINVAL;
    }
    coll_lock(ctx);
    /* turn while turns bring messages: a turn costs a poll (a system
     * call), and a program that calls this in a loop would otherwise pay
     * poll_batch of them each time for nothing */
    for (unsigned i = 0; i < ctx->cfg.poll_batch; i++) {
        uint64_t before = msgs_in(ctx);
        ev_run(ctx->loop, EVRUN_NOWAIT);
        if (msgs_in(ctx) == before) {
            break;
        }
    }
    coll_unlock(ctx);
    return SHARP_COLL_SUCCESS;
}
