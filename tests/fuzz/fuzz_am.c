/*
 * A real aggregation manager (am/'s core, am/am_admin.c) driven by a sequence
 * of events: control peers (ANs, sharpds, unauthenticated strangers) and
 * sharpctl connecting, sending messages, hanging up; ANs answering what
 * the AM asks them; the settle, stats and group timers firing.  Peers are
 * socketpairs handed to the AM's own accept callbacks (shp_listener_start
 * is wrapped at link time and binds nothing), so every message goes
 * through core/conn.c's framing into the handler the AM runs for a
 * socket.  Everything the AM sends must be a well-formed control frame.
 * Topology files the AM is asked to load are only the harness's own
 * (shp_topo_load is wrapped).  Operations: tests/fuzz/fuzz.h (FZ_AM_*).
 */
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_peer.h"

#include "am/am.h"
#include "am/am_admin.h"
#include "protocol/ctl.h"
#include "core/log.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Link-time wraps ------------------------------------------------------------ */

static char dir[] = "/tmp/sharp-fuzz-am-XXXXXX";
static char topo1[128], topo2[128], secret[128], admin_sock[128];

shp_status_t __wrap_shp_listener_start(shp_listener_t *l, struct ev_loop *lp,
                                       const shp_sockaddr_t *addr,
                                       shp_accept_cb_t on_accept, void *arg);
shp_status_t __wrap_shp_listener_start(shp_listener_t *l, struct ev_loop *lp,
                                       const shp_sockaddr_t *addr,
                                       shp_accept_cb_t on_accept, void *arg)
{
    memset(l, 0, sizeof(*l));
    l->loop = lp;
    l->fd = -1;
    l->on_accept = on_accept;
    l->arg = arg;
    l->addr = *addr;
    return SHP_OK;
}

void __wrap_shp_listener_stop(shp_listener_t *l);
void __wrap_shp_listener_stop(shp_listener_t *l)
{
    l->on_accept = NULL;
}

shp_status_t __real_shp_topo_load(const char *path, shp_topo_t **out, char *err,
                                  size_t errlen);
shp_status_t __wrap_shp_topo_load(const char *path, shp_topo_t **out, char *err,
                                  size_t errlen);
shp_status_t __wrap_shp_topo_load(const char *path, shp_topo_t **out, char *err,
                                  size_t errlen)
{
    size_t n = strlen(path);

    /* "...topo2.ibnd": the second fabric, "...topo.ibnd": the first */
    if (n >= 10 && !strcmp(path + n - 10, "topo2.ibnd")) {
        return __real_shp_topo_load(topo2, out, err, errlen);
    }
    if (n >= 9 && !strcmp(path + n - 9, "topo.ibnd")) {
        return __real_shp_topo_load(topo1, out, err, errlen);
    }
    snprintf(err, errlen, "%s: not a file of the harness", path);
    return SHP_ERR_NOT_FOUND;
}

/* Peers ---------------------------------------------------------------------- */

static shp_am_t am;
static const char *const fz_pend_types[] = {"tree_config", "group_add",
                                            "group_remove", "stats_req", NULL};
static char **switches, **hosts;
static int nswitches, nhosts;

static void write_topology(const char *path, int nh)
{
    shp_fat_tree_spec_t spec = {FZ_AM_LEVELS, FZ_AM_RADIX, nh};
    shp_topo_t *t = NULL;
    char err[256];
    FILE *f;

    FZ_CHECK(shp_topo_fat_tree(&spec, &t, err, sizeof(err)) == SHP_OK);
    f = fopen(path, "w");
    FZ_CHECK(f != NULL);
    shp_topo_write(t, f, 0);
    fclose(f);
    if (switches == NULL) {
        size_t n = shp_topo_count(t);
        switches = calloc(n, sizeof(char *));
        hosts = calloc(n, sizeof(char *));
        FZ_CHECK(switches && hosts);
        for (size_t i = 0; i < n; i++) {
            const shp_topo_node_t *nd = shp_topo_node(t, (int)i);
            if (nd->type == SHP_NODE_SWITCH) {
                switches[nswitches++] = strdup(nd->desc);
            } else if (nd->type == SHP_NODE_CA) {
                hosts[nhosts++] = strdup(nd->host);
            }
        }
    }
    shp_topo_free(t);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    FILE *f;

    (void)argc;
    (void)argv;
    /* SHARP_FUZZ_LOG=debug: the daemon's log, to see what an input does */
    shp_log_set_level(getenv("SHARP_FUZZ_LOG") ? SHP_LOG_DEBUG : SHP_LOG_OFF);
    FZ_CHECK(shp_auth_init() == SHP_OK);
    loop = ev_default_loop(EVFLAG_AUTO);
    FZ_CHECK(loop != NULL && mkdtemp(dir) != NULL);
    snprintf(topo1, sizeof(topo1), "%s/topo.ibnd", dir);
    snprintf(topo2, sizeof(topo2), "%s/topo2.ibnd", dir);
    snprintf(secret, sizeof(secret), "%s/secret", dir);
    snprintf(admin_sock, sizeof(admin_sock), "%s/am.sock", dir);
    write_topology(topo1, FZ_AM_HOSTS);
    write_topology(topo2, 6);
    f = fopen(secret, "w");
    FZ_CHECK(f != NULL);
    fputs("a cluster secret for fuzzing\n", f);
    fclose(f);
    FZ_CHECK(chmod(secret, 0600) == 0);
    for (int i = 0; i < FZ_NPEERS; i++) {
        peers[i].fd = -1;
    }
    return 0;
}

static void op_peer(fz_in_t *in, int admin)
{
    uint8_t mode = admin ? 0 : fz_u8(in) % 3, node = admin ? 0 : fz_u8(in);
    fz_peer_t *fp = free_peer();
    shp_am_peer_t *p;
    int sv[2];

    if (fp == NULL) {
        return;
    }
    FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    if (admin) {
        am.admin.on_accept(&am.admin, sv[0], &am.admin.addr);
    } else {
        am.listener.on_accept(&am.listener, sv[0], &am.listener.addr);
    }
    p = am.peers;
    FZ_CHECK(p != NULL && p->conn.fd == sv[0]);
    fp->fd = sv[1];
    fp->admin = admin;
    if (mode == 1) { /* an AN that proved the secret */
        p->auth.state = 2;
        snprintf(p->auth.role, sizeof(p->auth.role), "an");
        snprintf(p->auth.name, sizeof(p->auth.name), "%s",
                 switches[node % nswitches]);
    } else if (mode == 2) { /* a sharpd that proved it */
        p->auth.state = 2;
        snprintf(p->auth.role, sizeof(p->auth.role), "sharpd");
        snprintf(p->auth.name, sizeof(p->auth.name), "%s",
                 hosts[node % nhosts]);
    }
}

static void op_ack(fz_in_t *in)
{
    fz_peer_t *p = &peers[fz_u8(in) % FZ_NPEERS];
    uint8_t how = fz_u8(in);
    int st = (how & 3) == 0 ? 0 : -(int)(how % 40);

    for (int i = 0; i < p->npend && p->fd >= 0; i++) {
        json_t *m;
        uint8_t *frame;
        size_t len;
        if (!strcmp(p->pend[i].type, "stats_req")) {
            m = json_pack("{s:s, s:I, s:i, s:i, s:i, s:i}", "type", "stats",
                          "id", (json_int_t)p->pend[i].id, "status", st, "ops",
                          how, "err_bad_key", how & 7, "groups", how % 5);
        } else {
            char type[48];
            snprintf(type, sizeof(type), "%s_ack", p->pend[i].type);
            m = shp_ctl_reply(type, p->pend[i].id, (shp_status_t)st,
                              st ? "refused by the fuzzer" : NULL);
        }
        FZ_CHECK(m != NULL && shp_ctl_encode(m, &frame, &len) == SHP_OK);
        peer_send(p, frame, len);
        free(frame);
        json_decref(m);
    }
    p->npend = 0;
    pump();
}

static void op_timers(void)
{
    uint32_t armed[256];
    unsigned n = 0;
    shp_am_group_t *g, *tmp;

    if (ev_is_active(&am.settle)) {
        ev_timer_stop(loop, &am.settle);
        ev_invoke(loop, &am.settle, EV_TIMER);
    }
    if (ev_is_active(&am.stats_timer)) {
        ev_invoke(loop, &am.stats_timer, EV_TIMER);
    }
    HASH_ITER(hh, am.groups, g, tmp)
    {
        if (ev_is_active(&g->timer) && n < 256) {
            armed[n++] = g->id;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        HASH_FIND(hh, am.groups, &armed[i], sizeof(armed[i]), g);
        if (g != NULL && ev_is_active(&g->timer)) {
            ev_timer_stop(loop, &g->timer);
            ev_invoke(loop, &g->timer, EV_TIMER);
        }
    }
    pump();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char listen[] = "127.0.0.1:0", empty[] = "",
                mcast_prefix[] = "239.77";
    fz_in_t in = {data, size};
    char err[512];

    memset(&am, 0, sizeof(am));
    am.cfg.listen = listen;
    am.cfg.admin_socket = admin_sock;
    am.cfg.admin_group = empty;
    am.cfg.topology = strdup(topo1);
    am.cfg.an_hosts = empty;
    am.cfg.secret_file = secret;
    am.cfg.max_trees = 2;
    am.cfg.radix = 4;
    am.cfg.flat_max = 2; /* groups of 1 or 2 hosts: flat; more: trees */
    am.cfg.max_jobs = 3;
    am.cfg.job_max_groups = 3;
    am.cfg.group_osts = 4;
    am.cfg.group_payload = 1024;
    am.cfg.mcast_prefix = mcast_prefix;
    am.cfg.mcast_port = 20000;
    /* timers fire only when the input says so */
    am.cfg.tree_settle_ms = 1000000;
    am.cfg.group_timeout_ms = 1000000;
    am.cfg.stats_interval_ms = 1000000;
    shp_am_admin_install(&am);
    if (shp_am_start(&am, loop, err, sizeof(err)) != SHP_OK) {
        fprintf(stderr, "sharp_am does not start: %s\n", err);
        abort();
    }
    while (fz_more(&in)) {
        fz_peer_t *p;
        switch (fz_u8(&in) % FZ_AM_NOPS) {
        case FZ_AM_PEER: op_peer(&in, 0); break;
        case FZ_AM_ADMIN: op_peer(&in, 1); break;
        case FZ_AM_SEND: op_send(&in, 0); break;
        case FZ_AM_RAW: op_send(&in, 1); break;
        case FZ_AM_CLOSE:
            p = &peers[fz_u8(&in) % FZ_NPEERS];
            if (p->fd >= 0) {
                peer_drop(p);
                pump();
            }
            break;
        case FZ_AM_TIMERS: op_timers(); break;
        case FZ_AM_ACK: op_ack(&in); break;
        }
    }
    shp_am_stop(&am);
    for (int i = 0; i < FZ_NPEERS; i++) {
        peer_drop(&peers[i]);
    }
    FZ_CHECK(am.peers == NULL);
    free(am.cfg.topology);
    return 0;
}
