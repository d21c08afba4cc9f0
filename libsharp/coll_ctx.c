/*
 * libsharp_coll: the context, the library's lower layer.  Configuration
 * from SHARP_COLL_* variables, the link to the local sharpd, job creation
 * over the caller's out-of-band collectives, progress, capabilities,
 * statistics and the small calls.  Communicators are built on it
 * (coll_comm.h); it knows them only as the members of its list, and calls
 * them through their callbacks (coll_member_ops_t) on the retransmit tick,
 * on a failure that sharpd reports, on a cancel and at finalize.
 */
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

static int cfg_load(coll_cfg_t *cfg)
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

static void sd_frame(shp_conn_t *conn, const void *frame, size_t len)
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

static void sd_connected(shp_conn_t *conn)
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

static void sd_closed(shp_conn_t *conn, shp_status_t reason)
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

static const shp_conn_ops_t sd_ops = {
    .frame_len = shp_ctl_frame_len,
    .on_frame = sd_frame,
    .on_connect = sd_connected,
    .on_close = sd_closed,
};

static shp_status_t sd_connect(coll_ctx_t *ctx)
{
    shp_sockaddr_t addr;
    uint64_t deadline =
        shp_time_ns() + (uint64_t)ctx->cfg.connect_timeout_ms * 1000000u;

    if (shp_sockaddr_parse(ctx->cfg.sharpd_socket, 0, &addr) != SHP_OK) {
        return SHP_ERR_INVALID_PARAM;
    }
    shp_conn_init(&ctx->sd, ctx->loop, &sd_ops, ctx, SHP_CTL_MAX_FRAME);
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

/* Init and finalize --------------------------------------------------------- */

/* what rank 0 tells everyone after job_begin */
typedef struct job_info {
    int32_t status;
    uint32_t osts, payload, max_groups;
} job_info_t;

/* what every rank tells rank 0 */
typedef struct rank_info {
    int32_t status;
    char host[SHP_HOST_MAX];
} rank_info_t;

static int sd_hello(coll_ctx_t *ctx)
{
    shp_status_t st = sd_connect(ctx);
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

/* rank 0: begin the job over the distinct hosts of every rank */
static void job_begin(coll_ctx_t *ctx, const rank_info_t *all, int n,
                      job_info_t *ji)
{
    json_t *hosts = json_array();
    shp_status_t st;

    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) {
            seen = !strncmp(all[k].host, all[i].host, SHP_HOST_MAX);
        }
        if (!seen) {
            json_array_append_new(
                hosts,
                json_stringn(all[i].host, strnlen(all[i].host, SHP_HOST_MAX)));
        }
    }
    json_t *req = json_object();
    if (ctx->cfg.quota_osts) {
        json_object_set_new(req, "osts", json_integer(ctx->cfg.quota_osts));
    }
    if (ctx->cfg.quota_payload) {
        json_object_set_new(req, "payload",
                            json_integer((json_int_t)ctx->cfg.quota_payload));
    }
    if (ctx->cfg.quota_groups) {
        json_object_set_new(req, "max_groups",
                            json_integer(ctx->cfg.quota_groups));
    }
    json_t *r = coll_sd_call(
        ctx,
        json_pack("{s:s, s:o, s:o, s:o}", "type", "job_begin", "job_id",
                  shp_json_u64(ctx->job_id), "hosts", hosts, "req", req),
        &st);
    if (r == NULL || st != SHP_OK) {
        if (!(ctx->spec.config.flags & SHARP_COLL_HIDE_ERRORS)) {
            shp_error("job %llu refused: %s", (unsigned long long)ctx->job_id,
                      r ? shp_json_opt_str(r, "error", shp_status_str(st))
                        : shp_status_str(st));
        }
        ji->status = r == NULL && st == SHP_ERR_UNREACHABLE
                         ? SHARP_COLL_ESESS_INIT
                         : coll_status_to_sharp(st, SHARP_COLL_EJOB_CREATE);
        json_decref(r);
        return;
    }
    int64_t osts = shp_json_opt_int(r, "osts", 1, 1 << 20, 0);
    int64_t payload = shp_json_opt_int(r, "payload", 1, 1 << 30, 0);
    int64_t groups = shp_json_opt_int(r, "max_groups", 1, 1 << 20, 0);
    if (!osts || !payload || !groups ||
        shp_json_get_hex(r, "job_key", ctx->job_key, 32, NULL) != SHP_OK) {
        ji->status = SHARP_COLL_EJOB_CREATE;
    } else {
        ji->status = SHARP_COLL_SUCCESS;
        ji->osts = (uint32_t)osts;
        ji->payload = (uint32_t)payload;
        ji->max_groups = (uint32_t)groups;
    }
    json_decref(r);
}

/* ji: where a reserved job's quotas go (rank 0), or NULL */
static int job_attach(coll_ctx_t *ctx, job_info_t *ji)
{
    shp_status_t st;
    json_t *r = coll_sd_call(ctx,
                             json_pack("{s:s, s:o}", "type", "job_attach",
                                       "job_id", shp_json_u64(ctx->job_id)),
                             &st);
    int rc = SHARP_COLL_SUCCESS;
    if (r == NULL || st != SHP_OK ||
        shp_json_get_hex(r, "job_key", ctx->job_key, 32, NULL) != SHP_OK) {
        if (!(ctx->spec.config.flags & SHARP_COLL_HIDE_ERRORS)) {
            shp_error("cannot attach to job %llu: %s",
                      (unsigned long long)ctx->job_id, shp_status_str(st));
        }
        rc = coll_status_to_sharp(st, SHARP_COLL_EJOB_CREATE);
    } else if (ji != NULL) {
        int64_t osts = shp_json_opt_int(r, "osts", 1, 1 << 20, 0);
        int64_t payload = shp_json_opt_int(r, "payload", 1, 1 << 30, 0);
        int64_t groups = shp_json_opt_int(r, "max_groups", 1, 1 << 20, 0);
        if (!osts || !payload || !groups) {
            rc = SHARP_COLL_EJOB_CREATE;
        } else {
            ji->osts = (uint32_t)osts;
            ji->payload = (uint32_t)payload;
            ji->max_groups = (uint32_t)groups;
        }
    }
    json_decref(r);
    return rc;
}

/* Rank 0: every rank's status and host in all (NULL: no memory, mine
 * says so) -> the job begun (or the reserved one attached) and its quotas
 * in *ji, or why not. */
static void job_decide(coll_ctx_t *ctx, const rank_info_t *all,
                       const rank_info_t *mine, job_info_t *ji)
{
    for (int i = 0; all && i < ctx->spec.world_size; i++) {
        if (all[i].status != SHARP_COLL_SUCCESS) {
            ji->status = all[i].status;
        }
    }
    if (mine->status != SHARP_COLL_SUCCESS) {
        ji->status = mine->status;
    }
    if (ji->status == SHARP_COLL_SUCCESS && ctx->reserved) {
        ji->status = job_attach(ctx, ji);
    } else if (ji->status == SHARP_COLL_SUCCESS) {
        job_begin(ctx, all, ctx->spec.world_size, ji);
    }
}

/* everyone's host (and whether it reached its sharpd: status) to rank 0,
 * which decides; its answer to all */
static job_info_t job_info_share(coll_ctx_t *ctx, int status)
{
    const struct sharp_coll_init_spec *spec = &ctx->spec;
    rank_info_t mine = {.status = status};
    rank_info_t *all = NULL;
    job_info_t ji = {.status = SHARP_COLL_SUCCESS};

    snprintf(mine.host, sizeof(mine.host), "%s", ctx->host);
    if (spec->world_rank == 0) {
        all = calloc((size_t)spec->world_size, sizeof(*all));
        if (all == NULL) {
            mine.status = SHARP_COLL_ENOMEM;
        }
    }
    if (coll_oob_gather(ctx, spec->oob_ctx, 0, &mine, all ? all : &mine,
                        sizeof(mine)) != SHARP_COLL_SUCCESS) {
        ji.status = SHARP_COLL_EOOB;
    }
    if (spec->world_rank == 0 && ji.status == SHARP_COLL_SUCCESS) {
        job_decide(ctx, all, &mine, &ji);
    }
    free(all);
    if (coll_oob_bcast(ctx, spec->oob_ctx, &ji, sizeof(ji), 0) !=
        SHARP_COLL_SUCCESS) {
        ji.status = SHARP_COLL_EOOB;
    }
    return ji;
}

/* The job, agreed by every rank: collective over the out-of-band hooks,
 * whatever this rank's status so far (so that every rank returns the same
 * code).  Rank 0 begins it, the others attach. */
static int job_setup(coll_ctx_t *ctx, int status)
{
    const struct sharp_coll_init_spec *spec = &ctx->spec;
    job_info_t ji = job_info_share(ctx, status);
    int rc = ji.status;

    if (rc != SHARP_COLL_SUCCESS) {
        return rc;
    }
    ctx->osts = ji.osts;
    ctx->payload = ji.payload;
    ctx->max_groups = ji.max_groups;
    if (spec->world_rank != 0) {
        rc = job_attach(ctx, NULL);
    }
    rc = coll_agree(ctx, spec->oob_ctx, spec->world_rank, spec->world_size, rc);
    if (rc != SHARP_COLL_SUCCESS && spec->world_rank == 0 &&
        rc != SHARP_COLL_EOOB && !ctx->reserved) {
        coll_sd_job_request(ctx, "job_end", NULL);
    }
    return rc;
}

/* whatever ctx_new and ctx_setup made, undone (the one cleanup path) */
static void ctx_free(coll_ctx_t *ctx)
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
static coll_ctx_t *ctx_new(const struct sharp_coll_init_spec *spec)
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
static int ctx_setup(coll_ctx_t *ctx)
{
    int rc = cfg_load(&ctx->cfg);
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
    return sd_hello(ctx);
}

/* Steps: the context (ctx_new), this rank's part (ctx_setup), the job,
 * agreed by all ranks whatever this one's part gave (job_setup); on any
 * failure one cleanup (ctx_free). */
SHP_API int sharp_coll_init(struct sharp_coll_init_spec *spec,
                            struct sharp_coll_context **context)
{
    if (spec == NULL || context == NULL || spec->world_size <= 0 ||
        spec->world_rank < 0 || spec->world_rank >= spec->world_size ||
        spec->oob_colls.bcast == NULL || spec->oob_colls.gather == NULL) {
        return SHARP_COLL_EINVAL;
    }
    *context = NULL;
    coll_ctx_t *ctx = ctx_new(spec);
    if (ctx == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    int rc = job_setup(ctx, ctx_setup(ctx));
    if (rc != SHARP_COLL_SUCCESS) {
        ctx_free(ctx);
        return rc;
    }
    ctx->job_ok = 1;
    shp_info("job %llu: rank %d of %d on host %s, %u OSTs x %zu bytes, %u "
             "groups",
             (unsigned long long)ctx->job_id, spec->world_rank,
             spec->world_size, ctx->host, ctx->osts, ctx->payload,
             ctx->max_groups);
    *context = ctx;
    return SHARP_COLL_SUCCESS;
}

SHP_API int sharp_coll_finalize(struct sharp_coll_context *ctx)
{
    if (ctx == NULL) {
        return SHARP_COLL_EINVAL;
    }
    while (ctx->members != NULL) {
        ctx->members->ops->destroy(ctx->members);
    }
    /* every rank is done with its groups before the job ends, so that no
     * process exit looks like a failure to the manager */
    if (ctx->spec.oob_colls.barrier != NULL) {
        (void)ctx->spec.oob_colls.barrier(ctx->spec.oob_ctx);
    }
    /* a reserved job is the scheduler's to end */
    if (ctx->spec.world_rank == 0 && ctx->sd_up && !ctx->job_failed &&
        !ctx->reserved) {
        coll_sd_job_request(ctx, "job_end", NULL);
    }
    ctx->job_ok = 0;
    ctx_free(ctx);
    return SHARP_COLL_SUCCESS;
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

/* Capabilities, registration, printing ------------------------------------- */

SHP_API int sharp_coll_caps_query(struct sharp_coll_context *ctx,
                                  struct sharp_coll_caps *caps)
{
    if (ctx == NULL || caps == NULL) {
        return SHARP_COLL_EINVAL;
    }
    memset(caps, 0, sizeof(*caps));
    caps->sharp_pkt_version = 1; /* SHP_WIRE_VERSION */
    for (int dt = 0; dt < SHARP_DTYPE_NULL; dt++) {
        caps->support_mask.dtypes |= 1ull << dt;
    }
    /* integer tags of MINLOC/MAXLOC pairs, as the engine accepts them */
    for (int dt = 0; dt < SHARP_DTYPE_NULL; dt++) {
        shp_reduce_desc_t d = {SHP_DTYPE_F32, SHP_OP_MINLOC, (shp_dtype_t)dt};
        if (shp_reduce_desc_check(&d, NULL) == SHP_OK) {
            caps->support_mask.tag_dtypes |= 1ull << dt;
        }
    }
    for (int op = 0; op < SHARP_OP_NULL; op++) {
        caps->support_mask.reduce_ops |= 1ull << op;
    }
    caps->support_mask.reduce_ops |= 1ull << SHARP_OP_SUM_EXACT;
    /* LLT: small operations, one fragment each.  REPRODUCIBLE: every AN
     * folds its children in a fixed order.  SAT (streaming aggregation):
     * messages of any size, in every aggregation mode, for allreduce,
     * reduce-scatter and allgather and every type above, are cut into
     * fragments and pipelined (clients such as UCC use reduce-scatter and
     * allgather only when SAT is set).  Not SAT_EXCLUSIVE_LOCK: there is no
     * streaming lock to take (lock_on_comm_init is accepted and ignored). */
    caps->support_mask.feature_mask =
        SHARP_FEATURE_LLT | SHARP_FEATURE_REPRODUCIBLE | SHARP_FEATURE_SAT;
    caps->resources.max_osts = (int)ctx->osts;
    caps->resources.user_data_per_ost = (int)ctx->payload;
    caps->resources.max_groups = (int)ctx->max_groups;
    caps->resources.max_group_channels = 1;
    caps->resources.osts_per_group = (int)ctx->osts;
    return SHARP_COLL_SUCCESS;
}

/* a registration: tcp needs none, but the handle is real and checked */
typedef struct coll_mr {
    uint32_t magic;
    void *buf;
    size_t size;
} coll_mr_t;
#define COLL_MR_MAGIC 0x53484d52u

SHP_API int sharp_coll_reg_mr_v2(struct sharp_coll_context *ctx, void *buf,
                                 size_t size,
                                 const struct sharp_coll_reg_params *params,
                                 void **mr)
{
    (void)params;
    if (ctx == NULL || mr == NULL || (buf == NULL && size > 0)) {
        return SHARP_COLL_EINVAL;
    }
    coll_mr_t *m = malloc(sizeof(*m));
    if (m == NULL) {
        return SHARP_COLL_ENOMEM;
    }
    *m = (coll_mr_t){COLL_MR_MAGIC, buf, size};
    *mr = m;
    return SHARP_COLL_SUCCESS;
}

SHP_API int sharp_coll_reg_mr(struct sharp_coll_context *ctx, void *buf,
                              size_t size, void **mr)
{
    return sharp_coll_reg_mr_v2(ctx, buf, size, NULL, mr);
}

SHP_API int sharp_coll_dereg_mr(struct sharp_coll_context *ctx, void *mr)
{
    coll_mr_t *m = mr;
    if (ctx == NULL || m == NULL || m->magic != COLL_MR_MAGIC) {
        return SHARP_COLL_EINVAL;
    }
    m->magic = 0;
    free(m);
    return SHARP_COLL_SUCCESS;
}

SHP_API int sharp_coll_print_config(FILE *stream, enum config_print_flags flags,
                                    const char *exec_name)
{
    coll_cfg_t cfg;
    unsigned f = SHP_CONFIG_DUMP_ENV;

    if (stream == NULL) {
        return SHARP_COLL_EINVAL;
    }
    if (cfg_load(&cfg) != SHARP_COLL_SUCCESS &&
        shp_config_defaults(&coll_table, &cfg) != SHP_OK) {
        return SHARP_COLL_ENOMEM;
    }
    if (flags & SHARP_COLL_CONFIG_PRINT_HEADER) {
        fprintf(stream, "#\n# sharp_coll configuration%s%s\n#\n",
                exec_name ? " of " : "", exec_name ? exec_name : "");
    }
    if (flags & SHARP_COLL_CONFIG_PRINT_DOC) {
        f |= SHP_CONFIG_DUMP_DOC;
    }
    if (flags & SHARP_COLL_CONFIG_PRINT_HIDDEN) {
        f |= SHP_CONFIG_DUMP_HIDDEN;
    }
    if (flags &
        (SHARP_COLL_CONFIG_PRINT_CONFIG | SHARP_COLL_CONFIG_PRINT_DOC)) {
        shp_config_dump(&coll_table, &cfg, stream, f);
    }
    shp_config_release(&coll_table, &cfg);
    return SHARP_COLL_SUCCESS;
}

SHP_API const char *sharp_coll_strerror(int error)
{
    switch (error) {
    case SHARP_COLL_SUCCESS: return "Success";
    case SHARP_COLL_ERROR: return "Error";
    case SHARP_COLL_ENOT_SUPP: return "Operation not supported";
    case SHARP_COLL_ENOMEM: return "Out of memory";
    case SHARP_COLL_EGROUP_ALLOC: return "Cannot allocate a group";
    case SHARP_COLL_ECONN_TREE: return "Cannot connect to the aggregation tree";
    case SHARP_COLL_EGROUP_JOIN: return "Cannot join the group";
    case SHARP_COLL_EQUOTA: return "Job quota exhausted";
    case SHARP_COLL_ESESS_INIT: return "Cannot reach the local sharpd";
    case SHARP_COLL_EDEV: return "Device error";
    case SHARP_COLL_EINVAL: return "Invalid argument";
    case SHARP_COLL_EJOB_CREATE: return "Cannot create the job";
    case SHARP_COLL_ETREE_INFO: return "Cannot get tree information";
    case SHARP_COLL_ENOTREE: return "No tree spans the members";
    case SHARP_COLL_EGROUP_ID: return "Bad group id";
    case SHARP_COLL_EOOB: return "Out-of-band collective failed";
    case SHARP_COLL_EGROUP_MCAST: return "Cannot join the group's multicast";
    case SHARP_COLL_EGROUP_TRIM: return "Cannot trim the group";
    case SHARP_COLL_ELOCK_FAILED: return "Streaming lock busy";
    case SHARP_COLL_ELOCK_DENIED: return "Streaming lock denied";
    case SHARP_COLL_ENO_RESOURCE: return "No resource";
    default: return "Unknown error";
    }
}

SHP_API int sharp_coll_dump_stats(struct sharp_coll_context *ctx)
{
    if (ctx == NULL) {
        return SHARP_COLL_EINVAL;
    }
    const coll_stats_t *s = &ctx->stats;
    fprintf(stderr,
            "sharp_coll: job %llu rank %d host %s: operations %llu bytes "
            "%llu fragments %llu retransmits %llu errors %llu results by "
            "multicast %llu by RC %llu forged datagrams dropped %llu\n",
            (unsigned long long)ctx->job_id, ctx->spec.world_rank, ctx->host,
            (unsigned long long)s->ops, (unsigned long long)s->bytes,
            (unsigned long long)s->frags, (unsigned long long)s->retrans,
            (unsigned long long)s->errors, (unsigned long long)s->mcast_results,
            (unsigned long long)s->rc_results,
            (unsigned long long)s->mcast_rejected);
    return SHARP_COLL_SUCCESS;
}
