/* sharp_am: options, signals and the event loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "am/am.h"
#include "am/am_admin.h"
#include "am/am_types.h"
#include "am/metrics.h"
#include "core/config.h"
#include "protocol/auth.h"
#include "protocol/ctl.h"
#include "core/log.h"
#include "core/paths.h"

#ifndef SHP_VERSION
#define SHP_VERSION "0.1.0"
#endif

static const shp_config_range_t am_trees_range = {1, SHP_AM_MAX_TREE_ID};
static const shp_config_range_t am_radix_range = {1, 4096};
static const shp_config_range_t am_flat_range = {0, 4096};
static const shp_config_range_t am_count_range = {1, SHP_AM_MAX_JOBS_EVER};
static const shp_config_range_t am_list_range = {1, 1u << 20};
static const shp_config_range_t am_port_range = {1024, 45000};

static const shp_config_opt_t am_opts[] = {
    {"listen", "0.0.0.0:6126", "ip:port for ANs and sharpds",
     offsetof(shp_am_config_t, listen), &shp_cfg_string},
    {"admin_socket", SHP_PATH_AM_SOCK,
     "Unix socket of the admin interface (sharpctl); empty: none",
     offsetof(shp_am_config_t, admin_socket), &shp_cfg_string},
    {"admin_group", "",
     "group whose members may use the admin interface besides root and "
     "the manager's own user",
     offsetof(shp_am_config_t, admin_group), &shp_cfg_string},
    {"topology", SHP_PATH_TOPOLOGY, "fabric topology (ibnetdiscover output)",
     offsetof(shp_am_config_t, topology), &shp_cfg_string},
    {"an_hosts", "",
     "hosts (CA names) that run an AN, comma separated; every switch "
     "hosts one",
     offsetof(shp_am_config_t, an_hosts), &shp_cfg_string},
    {"secret_file", SHP_PATH_SECRET,
     "cluster secret (mode 0600); an AN or sharpd holds its node secret "
     "(--node-secret), or this file",
     offsetof(shp_am_config_t, secret_file), &shp_cfg_string},
    {"log_level", "info", "log level", offsetof(shp_am_config_t, log_level),
     &shp_cfg_loglevel},
    {"max_trees", "8", "aggregation trees to build",
     offsetof(shp_am_config_t, max_trees), &shp_cfg_uint, &am_trees_range},
    {"radix", "64", "AN children per AN in a tree, at most",
     offsetof(shp_am_config_t, radix), &shp_cfg_uint, &am_radix_range},
    {"flat_max", "16",
     "a group of at most this many members is served by its top AN alone, "
     "every member a direct child (0: never)",
     offsetof(shp_am_config_t, flat_max), &shp_cfg_uint, &am_flat_range},
    {"max_jobs", "1024", "jobs admitted at once, at most",
     offsetof(shp_am_config_t, max_jobs), &shp_cfg_uint, &am_count_range},
    {"max_list", "65536",
     "hosts of a job, or members of a group, in one request, at most",
     offsetof(shp_am_config_t, max_list), &shp_cfg_uint, &am_list_range},
    {"uid_max_jobs", "64",
     "jobs of one user at once, at most (root's are not counted)",
     offsetof(shp_am_config_t, uid_max_jobs), &shp_cfg_uint, &am_count_range},
    {"uid_max_groups", "256",
     "groups of one user's jobs together, at most (root's are not counted); "
     "one more is refused",
     offsetof(shp_am_config_t, uid_max_groups), &shp_cfg_uint, &am_count_range},
    {"job_max_groups", "16", "groups per job, at most",
     offsetof(shp_am_config_t, job_max_groups), &shp_cfg_uint, &am_count_range},
    {"group_osts", "16", "outstanding operations per group (quota)",
     offsetof(shp_am_config_t, group_osts), &shp_cfg_uint, &am_count_range},
    {"group_payload", "32k", "payload bytes per operation (quota)",
     offsetof(shp_am_config_t, group_payload), &shp_cfg_size},
    {"dist", "auto",
     "default result distribution: rc, mcast, both or auto (mcast where "
     "every AN of the group speaks tcp and can multicast, else rc)",
     offsetof(shp_am_config_t, dist), &shp_cfg_enum, shp_dist_names},
    {"mcast_prefix", "239.77",
     "first two octets of the groups' multicast addresses",
     offsetof(shp_am_config_t, mcast_prefix), &shp_cfg_string},
    {"mcast_port", "20000", "first UDP port of the groups' multicast",
     offsetof(shp_am_config_t, mcast_port), &shp_cfg_uint, &am_port_range},
    {"max_peers", "65536",
     "authenticated ANs and sharpds at once, at most; one more is refused "
     "(a peer that replaces its own earlier connection is not counted "
     "twice)",
     offsetof(shp_am_config_t, max_peers), &shp_cfg_uint, &am_count_range},
    {"max_unauth", "1024",
     "TCP peers that have not proved the cluster secret and registered, "
     "at once, at most; past it the oldest of them is closed",
     offsetof(shp_am_config_t, max_unauth), &shp_cfg_uint, &am_count_range},
    {"source_max_unauth", "128",
     "TCP peers from one address that have not proved the cluster secret "
     "and registered, at once, at most; one more is refused",
     offsetof(shp_am_config_t, source_max_unauth), &shp_cfg_uint,
     &am_count_range},
    {"keepalive", "2s", "keepalive interval of control connections",
     offsetof(shp_am_config_t, keepalive_ms), &shp_cfg_time},
    {"auth_timeout", "10s",
     "how long a new TCP peer has to prove the cluster secret and register "
     "before it is disconnected",
     offsetof(shp_am_config_t, auth_timeout_ms), &shp_cfg_time},
    {"group_timeout", "10s", "how long ANs have to confirm a new group",
     offsetof(shp_am_config_t, group_timeout_ms), &shp_cfg_time},
    {"tree_settle", "200ms",
     "quiet time after ANs come or go before trees are rebuilt",
     offsetof(shp_am_config_t, tree_settle_ms), &shp_cfg_time},
    {"adopt_timeout", "10s",
     "a restarted manager takes back the jobs and groups the sharpds and "
     "ANs report within this time of its start (what is not complete then "
     "is revoked); new groups wait for every AN of the topology, at most "
     "this long",
     offsetof(shp_am_config_t, adopt_timeout_ms), &shp_cfg_time},
    {"sharpd_grace", "4s",
     "a sharpd lost (keepalives, its connection closed) keeps its host's "
     "share of the jobs this long: one that registers again and reports "
     "them costs its jobs nothing (its processes' groups run on); then "
     "their groups are revoked; 0: at once.  Keep it short: the other "
     "members of a host cut off learn it after 3 keepalives and this",
     offsetof(shp_am_config_t, sharpd_grace_ms), &shp_cfg_time},
    {"stats_interval", "5s",
     "how often ANs are asked for their counters (sharpctl ans: ops/s, "
     "errors); 0: never",
     offsetof(shp_am_config_t, stats_interval_ms), &shp_cfg_time},
    {"metrics_listen", "",
     "ip:port to serve Prometheus metrics on (GET /metrics); empty: off",
     offsetof(shp_am_config_t, metrics_listen), &shp_cfg_string},
    {"state_dir", SHP_PATH_STATE_DIR,
     "directory of the state database am.db (reservations, the topology "
     "in use, the next ids, the epoch; mode 0700, made when missing); "
     "empty: no state kept, a restart forgets it",
     offsetof(shp_am_config_t, state_dir), &shp_cfg_string},
    /* a standby manager (am/am_ha.c) */
    {"address", "",
     "host:port the nodes and the peer managers know this manager by "
     "(empty: listen); needed with peers when listen is a wildcard",
     offsetof(shp_am_config_t, address), &shp_cfg_string},
    {"peers", "",
     "the other managers' addresses (host:port, comma separated; this "
     "manager's own address may be in the list); empty: a single manager, "
     "active at once",
     offsetof(shp_am_config_t, peers), &shp_cfg_string},
    {"standby", "no",
     "with peers: wait takeover_after for an active manager before taking "
     "over (no: take over as soon as every peer was reached or failed and "
     "none is active)",
     offsetof(shp_am_config_t, standby), &shp_cfg_bool},
    {"takeover_after", "1s",
     "with peers: a standby takes over when no peer has been heard active "
     "for this long (it hears the active one every fifth of it)",
     offsetof(shp_am_config_t, takeover_after_ms), &shp_cfg_time},
    {NULL}};

static const shp_config_table_t am_table = {
    "sharp_am", "SHARP_AM_", SHP_CONF_DIR "/sharp_am.conf", am_opts};

/* --node-secret ROLE:NAME (or =ROLE:NAME), taken out of argv: the value,
 * or NULL; and --reset-state (*reset).  They are actions, not settings:
 * no file or variable sets them. */
static const char *take_node_secret(int *argc, char **argv, int *reset)
{
    const char *v = NULL;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        if (!strcmp(argv[i], "--reset-state")) {
            *reset = 1;
        } else if (!strcmp(argv[i], "--node-secret") && i + 1 < *argc) {
            v = argv[++i];
        } else if (!strncmp(argv[i], "--node-secret=", 14)) {
            v = argv[i] + 14;
        } else {
            argv[out++] = argv[i];
        }
    }
    *argc = out;
    argv[out] = NULL;
    return v;
}

/* Prints the node secret of ROLE:NAME (an AN's or a sharpd's secret file)
 * from the cluster secret; the exit status. */
static int print_node_secret(const shp_am_config_t *cfg, const char *which)
{
    shp_auth_key_t key;
    char err[300], out[SHP_AUTH_NODE_SECRET_MAX], role[16];
    const char *colon = strchr(which, ':');
    size_t rl = colon ? (size_t)(colon - which) : 0;
    if (!colon || colon[1] == '\0' || rl >= sizeof(role) ||
        strlen(colon + 1) >= 128) {
        fprintf(stderr,
                "sharp_am: --node-secret wants ROLE:NAME (an:SWITCH "
                "or sharpd:HOST), not \"%s\"\n",
                which);
        return 2;
    }
    memcpy(role, which, rl);
    role[rl] = '\0';
    if (strcmp(role, "an") != 0 && strcmp(role, "sharpd") != 0) {
        fprintf(stderr,
                "sharp_am: --node-secret: role \"%s\" is neither an "
                "nor sharpd\n",
                role);
        return 2;
    }
    if (shp_auth_init() != SHP_OK ||
        shp_auth_key_load(cfg->secret_file, &key, err, sizeof(err)) != SHP_OK) {
        fprintf(stderr, "sharp_am: %s\n", err);
        return 1;
    }
    if (key.node) {
        fprintf(stderr,
                "sharp_am: %s is a node secret (%s %s), not the "
                "cluster secret\n",
                cfg->secret_file, key.role, key.name);
        return 1;
    }
    if (shp_auth_node_secret(&key, role, colon + 1, out) != SHP_OK) {
        fprintf(stderr, "sharp_am: --node-secret: the name is empty, too "
                        "long or has a line break\n");
        return 2;
    }
    printf("%s\n", out);
    return 0;
}

static void am_on_stop(void *arg, int signum)
{
    shp_am_t *am = arg;
    shp_info("signal %d: shutting down", signum);
    ev_break(am->loop, EVBREAK_ALL);
}

static void am_on_reload(void *arg)
{
    shp_am_config_t fresh = {0};
    (void)arg;
    shp_config_reload_log_level(&am_table, &fresh,
                                offsetof(shp_am_config_t, log_level));
}

int main(int argc, char **argv)
{
    static shp_am_t am;
    shp_config_action_t action;
    shp_config_err_t err;
    shp_signals_t sig;
    char msg[600];

    shp_log_set_component("sharp_am");
    shp_log_detect_journal();
    int reset_state = 0;
    const char *node_secret = take_node_secret(&argc, argv, &reset_state);
    if (shp_config_load(
            &am_table, &am.cfg, argc, argv,
            "usage: sharp_am [--config FILE] [--OPTION VALUE ...]\n"
            "       sharp_am [--config FILE] --node-secret "
            "ROLE:NAME\n"
            "           print the secret file of the AN (an:SWITCH) "
            "or sharpd (sharpd:HOST)\n"
            "           NAME, made from secret_file\n"
            "       sharp_am [--config FILE] --reset-state [--OPTION VALUE "
            "...]\n"
            "           move the state database (state_dir/am.db) aside "
            "to\n"
            "           am.db.corrupt-DATE and start with an empty state\n"
            "\n"
            "The aggregation manager of sharp: reads the fabric "
            "topology, builds aggregation\ntrees over the "
            "registered ANs, admits jobs and creates their groups.",
            &action, &err) != SHP_OK) {
        fprintf(stderr, "sharp_am: %s\n", err.msg);
        shp_config_release(&am_table, &am.cfg);
        return 2;
    }
    if (action == SHP_CONFIG_VERSION)
        printf("sharp_am %s\n", SHP_VERSION);
    if (action != SHP_CONFIG_RUN) {
        shp_config_release(&am_table, &am.cfg);
        return 0;
    }
    if (node_secret) {
        int rc = print_node_secret(&am.cfg, node_secret);
        shp_config_release(&am_table, &am.cfg);
        return rc;
    }
    am.cfg.reset_state = reset_state;
    shp_log_set_level(am.cfg.log_level);
    struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
    shp_am_admin_install(&am);
    if (shp_am_start(&am, loop, msg, sizeof(msg)) != SHP_OK) {
        fprintf(stderr, "sharp_am: %s\n", msg);
        shp_config_release(&am_table, &am.cfg);
        return 1;
    }
    static shp_am_metrics_t metrics;
    if (am.cfg.metrics_listen[0] != '\0' &&
        shp_am_metrics_start(&metrics, &am, loop, am.cfg.metrics_listen) !=
            SHP_OK) {
        fprintf(stderr, "sharp_am: cannot serve metrics on %s\n",
                am.cfg.metrics_listen);
        shp_am_stop(&am);
        shp_config_release(&am_table, &am.cfg);
        return 1;
    }
    shp_signals_start(&sig, loop, am_on_stop, am_on_reload, &am);
    printf("sharp_am listening on %s\n", am.listen_addr);
    fflush(stdout);
    ev_run(loop, 0);
    shp_am_metrics_stop(&metrics);
    shp_am_stop(&am);
    shp_signals_stop(&sig, loop);
    shp_config_release(&am_table, &am.cfg);
    shp_info("stopped");
    return 0;
}
