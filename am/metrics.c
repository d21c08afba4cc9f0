/*
 * sharp_am's metrics: the Prometheus text format (version 0.0.4) on
 * GET /metrics, served by libmicrohttpd inside the manager's own event loop
 * (MHD's epoll descriptor watched by libev, MHD_run when it is readable or
 * when MHD's timeout is due), so a scrape reads the manager's state without
 * a lock: there is one thread.  Off unless `metrics_listen` is set.
 */
#include "am/metrics.h"

#include "core/log.h"
#include "core/net.h"
#include "core/time.h"

#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a growing text buffer */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} am_metrics_buf_t;

static void am_metrics_put(am_metrics_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void am_metrics_put(am_metrics_buf_t *b, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !b->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* a label value: \, " and newline escaped */
static const char *am_metrics_label(const char *s, char *out, size_t len)
{
    size_t o = 0;
    for (; *s && o + 3 < len; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n') {
            out[o++] = '\\';
            out[o++] = *s == '\n' ? 'n' : *s;
        } else {
            out[o++] = *s;
        }
    }
    out[o] = '\0';
    return out;
}

static void am_metrics_family(am_metrics_buf_t *b, const char *name,
                              const char *type, const char *help)
{
    am_metrics_put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static uint64_t am_metrics_counter_of(const json_t *counters, const char *key)
{
    json_t *v = counters ? json_object_get(counters, key) : NULL;
    return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

/* The manager's gauges and counters. */
/* The sharpds' counts of their limits reached (their sharpd_stats), summed
 * over those connected. */
static void am_metrics_sharpd_limits(am_metrics_buf_t *b, const shp_am_t *am)
{
    static const char *const sd_names[5] = {
        "sharp_am_sharpd_clients_refused_total",
        "sharp_am_sharpd_frames_timed_out_total",
        "sharp_am_sharpd_jobs_refused_total",
        "sharp_am_sharpd_queue_overflows_total",
        "sharp_am_sharpd_frames_refused_total"};
    static const char *const sd_help[5] = {
        "Local connections the sharpds refused (max_clients, "
        "uid_max_clients), summed over the connected sharpds.",
        "Local clients the sharpds closed in a request (frame_timeout), "
        "summed over the connected sharpds.",
        "Jobs the sharpds refused to a connection (client_max_jobs), "
        "summed over the connected sharpds.",
        "Local clients the sharpds closed for not reading their answers "
        "(client_max_queued), summed over the connected sharpds.",
        "Local clients the sharpds closed for a request too large (before "
        "hello: 4 KiB), summed over the connected sharpds."};
    for (int k = 0; k < 5; k++) {
        unsigned long long sum = 0;
        for (const shp_am_peer_t *p = am->peers; p; p = p->next)
            sum += p->role == AM_PEER_SHARPD ? p->sd_limits[k] : 0;
        am_metrics_family(b, sd_names[k], "counter", sd_help[k]);
        am_metrics_put(b, "%s %llu\n", sd_names[k], sum);
    }
}

/* Connections that proved nothing, and peers that do not read. */
static void am_metrics_unauth(am_metrics_buf_t *b, const shp_am_t *am)
{
    am_metrics_family(b, "sharp_am_unauth_refused_total", "counter",
                      "Connections refused: their address had "
                      "source_max_unauth connections not registered yet.");
    am_metrics_put(b, "sharp_am_unauth_refused_total %llu\n",
                   (unsigned long long)am->stats.unauth_refused);
    am_metrics_family(b, "sharp_am_unauth_evicted_total", "counter",
                      "Connections not registered yet closed to make room "
                      "(max_unauth).");
    am_metrics_put(b, "sharp_am_unauth_evicted_total %llu\n",
                   (unsigned long long)am->stats.unauth_evicted);
    am_metrics_family(b, "sharp_am_queue_overflows_total", "counter",
                      "Peers closed because they did not read what the "
                      "manager sent them.");
    am_metrics_put(b, "sharp_am_queue_overflows_total %llu\n",
                   (unsigned long long)am->stats.queue_overflows);
}

/* groups revoked while up, by what guarded them; standbys remade */
static void am_metrics_standby(am_metrics_buf_t *b, const shp_am_t *am)
{
    static const char *const fam[4][2] = {
        {"sharp_am_standby_takeovers_total",
         "Groups revoked while a standby group of theirs could take over."},
        {"sharp_am_standbys_lost_total",
         "Standby groups revoked while the group they stand by lives on."},
        {"sharp_am_groups_unguarded_lost_total",
         "Groups revoked with no standby to take over: the job goes to "
         "its hosts' own algorithms."},
        {"sharp_am_standbys_remade_total",
         "Standby groups made for a standby group that took over."}};
    const uint64_t v[4] = {am->stats.standby_takeovers, am->stats.standbys_lost,
                           am->stats.groups_unguarded_lost,
                           am->stats.standbys_remade};
    for (int i = 0; i < 4; i++) {
        am_metrics_family(b, fam[i][0], "counter", fam[i][1]);
        am_metrics_put(b, "%s %llu\n", fam[i][0], (unsigned long long)v[i]);
    }
}

static void am_metrics_totals(am_metrics_buf_t *b, const shp_am_t *am)
{
    int njobs = 0, ngroups = 0, nup = 0;
    const shp_am_job_t *j, *jt;
    HASH_ITER(hh, am->jobs, j, jt)
    {
        njobs++;
    }
    const shp_am_group_t *g, *gt;
    HASH_ITER(hh, am->groups, g, gt)
    {
        ngroups++;
    }
    for (int i = 0; i < am->nans; i++) {
        nup += am->ans[i].node >= 0 && am->ans[i].up;
    }

    am_metrics_family(b, "sharp_am_jobs", "gauge",
                      "Jobs admitted and running.");
    am_metrics_put(b, "sharp_am_jobs %d\n", njobs);
    am_metrics_family(b, "sharp_am_groups", "gauge", "Groups of every job.");
    am_metrics_put(b, "sharp_am_groups %d\n", ngroups);
    am_metrics_family(b, "sharp_am_ans_up", "gauge",
                      "Aggregation nodes registered and connected.");
    am_metrics_put(b, "sharp_am_ans_up %d\n", nup);
    am_metrics_family(b, "sharp_am_jobs_begun_total", "counter",
                      "Jobs admitted.");
    am_metrics_put(b, "sharp_am_jobs_begun_total %llu\n",
                   (unsigned long long)am->stats.jobs_begun);
    am_metrics_family(b, "sharp_am_jobs_refused_total", "counter",
                      "Jobs refused.");
    am_metrics_put(b, "sharp_am_jobs_refused_total %llu\n",
                   (unsigned long long)am->stats.jobs_refused);
    am_metrics_family(b, "sharp_am_groups_created_total", "counter",
                      "Groups created.");
    am_metrics_put(b, "sharp_am_groups_created_total %llu\n",
                   (unsigned long long)am->stats.groups_created);
    am_metrics_family(b, "sharp_am_groups_failed_total", "counter",
                      "Groups that failed (an AN or link lost, a refusal).");
    am_metrics_put(b, "sharp_am_groups_failed_total %llu\n",
                   (unsigned long long)am->stats.groups_failed);
    am_metrics_family(b, "sharp_am_revocations_total", "counter",
                      "Groups revoked by the manager.");
    am_metrics_put(b, "sharp_am_revocations_total %llu\n",
                   (unsigned long long)am->stats.groups_revoked);
    am_metrics_family(b, "sharp_am_auth_failures_total", "counter",
                      "Peers that failed the cluster-secret handshake.");
    am_metrics_put(b, "sharp_am_auth_failures_total %llu\n",
                   (unsigned long long)am->stats.auth_failures);
    am_metrics_family(b, "sharp_am_uid_groups_refused_total", "counter",
                      "Groups refused: their user had uid_max_groups.");
    am_metrics_put(b, "sharp_am_uid_groups_refused_total %llu\n",
                   (unsigned long long)am->stats.uid_groups_refused);
    am_metrics_family(b, "sharp_am_peers_refused_total", "counter",
                      "ANs and sharpds refused: max_peers were connected.");
    am_metrics_put(b, "sharp_am_peers_refused_total %llu\n",
                   (unsigned long long)am->stats.peers_refused);
    am_metrics_family(b, "sharp_am_squats_ended_total", "counter",
                      "Users' jobs ended because the scheduler reserved "
                      "their id.");
    am_metrics_put(b, "sharp_am_squats_ended_total %llu\n",
                   (unsigned long long)am->stats.squats_ended);
    am_metrics_unauth(b, am);
    am_metrics_standby(b, am);
    am_metrics_sharpd_limits(b, am);
    am_metrics_family(b, "sharp_am_tree_builds_total", "counter",
                      "Tree (re)builds.");
    am_metrics_put(b, "sharp_am_tree_builds_total %llu\n",
                   (unsigned long long)am->stats.tree_builds);
}

/* Per AN: the counters of its last stats message. */
static void am_metrics_an_counters(am_metrics_buf_t *b, const shp_am_t *am)
{
    char n[300];

    static const struct {
        const char *name, *key, *type, *help;
    } an_metrics[] = {
        {"sharp_an_operations_total", "ops", "counter",
         "Operations folded by the AN."},
        {"sharp_an_results_total", "results", "counter",
         "Results distributed or forwarded by the AN."},
        {"sharp_an_bytes_in_total", "bytes_in", "counter",
         "Data-path bytes received by the AN."},
        {"sharp_an_bytes_out_total", "bytes_out", "counter",
         "Data-path bytes sent by the AN."},
        {"sharp_an_groups_failed_total", "groups_failed", "counter",
         "Groups failed at the AN."},
        {"sharp_an_links_lost_total", "links_lost", "counter",
         "Data links the AN lost."},
        {"sharp_an_sparse_in_total", "sparse_in", "counter",
         "Sparse payloads (blocks that are not all zero, and a bitmap) "
         "folded by the AN."},
        {"sharp_an_sparse_blocks_skipped_total", "sparse_blocks_skipped",
         "counter",
         "Zero blocks the AN's sparse results left out (up or down)."},
        {"sharp_an_pass_fold_bytes_total", "pass_fold", "counter",
         "Payload bytes the AN folded."},
        {"sharp_an_pass_copy_bytes_total", "pass_copy", "counter",
         "Payload bytes the AN copied or expanded into its slots."},
        {"sharp_an_pass_tag_bytes_total", "pass_tag", "counter",
         "Result bytes the AN tagged for multicast."},
        {"sharp_an_malformed_total", "err_malformed", "counter",
         "Malformed data-path messages refused by the AN."},
        {"sharp_an_bad_key_total", "err_bad_key", "counter",
         "Group joins refused for a wrong job key."},
        {"sharp_an_join_deadline_total", "join_deadline", "counter",
         "Children's connections closed: no group joined in join_deadline."},
        {"sharp_an_unjoined_refused_total", "unjoined_refused", "counter",
         "Children's connections refused: their address had "
         "source_max_unjoined connections that joined nothing."},
        {"sharp_an_unjoined_evicted_total", "unjoined_evicted", "counter",
         "Children's connections that joined nothing, closed to make room "
         "(max_unjoined)."},
    };
    for (size_t k = 0; k < sizeof(an_metrics) / sizeof(an_metrics[0]); k++) {
        am_metrics_family(b, an_metrics[k].name, an_metrics[k].type,
                          an_metrics[k].help);
        for (int i = 0; i < am->nans; i++) {
            const shp_am_an_t *an = &am->ans[i];
            if (an->node < 0 || an->counters == NULL) {
                continue;
            }
            am_metrics_put(b, "%s{an=\"%s\"} %llu\n", an_metrics[k].name,
                           am_metrics_label(an->name, n, sizeof(n)),
                           (unsigned long long)am_metrics_counter_of(
                               an->counters, an_metrics[k].key));
        }
    }
}

/* Per AN: what the manager knows of it. */
static void am_metrics_an_state(am_metrics_buf_t *b, const shp_am_t *am,
                                uint64_t now)
{
    char n[300], t[64];

    am_metrics_family(b, "sharp_an_errors_total", "counter",
                      "Errors of every kind at the AN.");
    am_metrics_family(b, "sharp_an_up", "gauge",
                      "1 while the AN is registered and connected.");
    am_metrics_family(b, "sharp_an_trees", "gauge",
                      "Trees the AN takes part in.");
    am_metrics_family(b, "sharp_an_groups", "gauge", "Groups the AN serves.");
    am_metrics_family(b, "sharp_an_registrations_total", "counter",
                      "Times the AN registered with the manager.");
    am_metrics_family(
        b, "sharp_an_stats_age_seconds", "gauge",
        "How old the AN's counters are (polled every stats_interval).");
    for (int i = 0; i < am->nans; i++) {
        const shp_am_an_t *an = &am->ans[i];
        if (an->node < 0) {
            continue;
        }
        am_metrics_label(an->name, n, sizeof(n));
        am_metrics_label(an->transport[0] ? an->transport : "-", t, sizeof(t));
        am_metrics_put(b, "sharp_an_errors_total{an=\"%s\"} %llu\n", n,
                       (unsigned long long)an->errors);
        am_metrics_put(b, "sharp_an_up{an=\"%s\",transport=\"%s\"} %d\n", n, t,
                       an->up);
        am_metrics_put(b, "sharp_an_trees{an=\"%s\"} %d\n", n, an->ntrees);
        am_metrics_put(b, "sharp_an_groups{an=\"%s\"} %d\n", n, an->ngroups);
        am_metrics_put(b, "sharp_an_registrations_total{an=\"%s\"} %llu\n", n,
                       (unsigned long long)an->registrations);
        if (an->stats_ns > 0 && now >= an->stats_ns) {
            am_metrics_put(b, "sharp_an_stats_age_seconds{an=\"%s\"} %.3f\n", n,
                           (double)(now - an->stats_ns) / 1e9);
        }
    }
}

/* Per job: groups and operation slots held. */
static void am_metrics_jobs(am_metrics_buf_t *b, const shp_am_t *am)
{
    const shp_am_job_t *j, *jt;

    am_metrics_family(b, "sharp_job_groups", "gauge", "Groups the job holds.");
    am_metrics_family(
        b, "sharp_job_osts", "gauge",
        "Operation slots the job's groups hold (osts per group).");
    HASH_ITER(hh, am->jobs, j, jt)
    {
        unsigned osts = 0;
        for (const shp_am_group_t *jg = j->groups; jg != NULL; jg = jg->jnext) {
            osts += jg->osts;
        }
        am_metrics_put(b, "sharp_job_groups{job=\"%llu\"} %d\n",
                       (unsigned long long)j->id, j->ngroups);
        am_metrics_put(b, "sharp_job_osts{job=\"%llu\"} %u\n",
                       (unsigned long long)j->id, osts);
    }
}

/* The text of one scrape; NULL if out of memory.  *len its length. */
char *shp_am_metrics_text(const shp_am_t *am, size_t *len)
{
    am_metrics_buf_t b = {malloc(8192), 0, 8192, 0};
    uint64_t now = shp_time_ns();

    if (b.p == NULL) {
        return NULL;
    }
    am_metrics_totals(&b, am);
    am_metrics_an_counters(&b, am);
    am_metrics_an_state(&b, am, now);
    am_metrics_jobs(&b, am);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

static enum MHD_Result
am_metrics_on_request(void *cls, struct MHD_Connection *c, const char *url,
                      const char *method, const char *version,
                      const char *upload, size_t *upload_len, void **con_cls)
{
    shp_am_t *am = cls;
    struct MHD_Response *r;
    enum MHD_Result ret;
    unsigned code = MHD_HTTP_OK;
    size_t len = 0;
    char *text = NULL;

    (void)version;
    (void)upload;
    (void)con_cls;
    if (*upload_len != 0) {
        *upload_len = 0; /* no request bodies here */
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        code = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else if (strcmp(url, "/metrics") != 0) {
        code = MHD_HTTP_NOT_FOUND;
    } else if ((text = shp_am_metrics_text(am, &len)) == NULL) {
        code = MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    if (text != NULL) {
        r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    } else {
        static const char msg[] = "sharp_am serves /metrics only\n";
        r = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg,
                                            MHD_RESPMEM_PERSISTENT);
    }
    if (r == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            code == MHD_HTTP_OK
                                ? "text/plain; version=0.0.4; charset=utf-8"
                                : "text/plain");
    ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static void am_metrics_run(shp_am_metrics_t *m)
{
    MHD_UNSIGNED_LONG_LONG to;

    MHD_run(m->mhd);
    ev_timer_stop(m->loop, &m->timer);
    if (MHD_get_timeout(m->mhd, &to) == MHD_YES) {
        ev_timer_set(&m->timer, (double)to / 1000.0, 0.);
        ev_timer_start(m->loop, &m->timer);
    }
}

static void am_metrics_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    am_metrics_run(w->data);
}

static void am_metrics_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    am_metrics_run(w->data);
}

shp_status_t shp_am_metrics_start(shp_am_metrics_t *m, shp_am_t *am,
                                  struct ev_loop *loop, const char *addr)
{
    shp_sockaddr_t sa;
    shp_status_t st;

    memset(m, 0, sizeof(*m));
    st = shp_sockaddr_parse(addr, 0, &sa);
    if (st != SHP_OK ||
        (sa.ss.ss_family != AF_INET && sa.ss.ss_family != AF_INET6)) {
        shp_error_id("AM0030", "metrics_listen %s: not an ip:port", addr);
        return SHP_ERR_INVALID_PARAM;
    }
    m->loop = loop;
    m->mhd = MHD_start_daemon(
        MHD_USE_EPOLL | (sa.ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
        (uint16_t)shp_sockaddr_port(&sa), NULL, NULL, am_metrics_on_request, am,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa.ss,
        /* 64 at once, at most 4 of one address (idle ones could take
         * every slot from the scraper), each for 5 s without traffic */
        MHD_OPTION_CONNECTION_LIMIT, 64U, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        4U, MHD_OPTION_CONNECTION_TIMEOUT, 5U, MHD_OPTION_END);
    if (m->mhd == NULL) {
        shp_error_id("AM0031", "metrics: cannot listen on %s", addr);
        return SHP_ERR_IO;
    }
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (di == NULL) {
        MHD_stop_daemon(m->mhd);
        m->mhd = NULL;
        return SHP_ERR_IO;
    }
    ev_io_init(&m->io, am_metrics_io_cb, di->epoll_fd, EV_READ);
    m->io.data = m;
    ev_io_start(loop, &m->io);
    ev_timer_init(&m->timer, am_metrics_timer_cb, 0., 0.);
    m->timer.data = m;
    shp_info("metrics on http://%s/metrics", addr);
    return SHP_OK;
}

void shp_am_metrics_stop(shp_am_metrics_t *m)
{
    if (m->mhd == NULL) {
        return;
    }
    ev_io_stop(m->loop, &m->io);
    ev_timer_stop(m->loop, &m->timer);
    MHD_stop_daemon(m->mhd);
    m->mhd = NULL;
}
