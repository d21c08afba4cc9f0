/* sharp_an: the aggregation node daemon. */
#include "an/an.h"

#include "core/config.h"
#include "core/log.h"
#include "core/paths.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SHP_VERSION
#define SHP_VERSION "0.1.0"
#endif

static const char *const an_scheds[] = {"batch", "other", NULL};

static const shp_config_range_t an_spin_range = {0, 10000};

static const shp_config_range_t an_trees_range = {1, SHP_AN_MAX_TREES};
static const shp_config_range_t an_groups_range = {1, 100000};
static const shp_config_range_t an_unjoined_range = {1, 1000000};
static const shp_config_range_t an_osts_range = {1, 65536};

static const shp_config_opt_t an_opts[] = {
    {"name", "an0",
     "name of this aggregation node (the switch or host it "
     "stands for, as the AM knows it)",
     offsetof(shp_an_config_t, name), &shp_cfg_string},
    {"listen", "127.0.0.1:0", "ip:port children connect to (port 0: any)",
     offsetof(shp_an_config_t, listen), &shp_cfg_string},
    {"am", "",
     "ip:port of the aggregation manager, or of each manager of an active "
     "and standby set (comma separated): tried in turn, the active one kept",
     offsetof(shp_an_config_t, am), &shp_cfg_string},
    {"transport", "tcp", "data transport", offsetof(shp_an_config_t, transport),
     &shp_cfg_enum, shp_an_transports},
    {"log_level", "info", "log level", offsetof(shp_an_config_t, log_level),
     &shp_cfg_loglevel},
    {"max_trees", "64", "trees this AN takes part in, at most",
     offsetof(shp_an_config_t, max_trees), &shp_cfg_uint, &an_trees_range},
    {"max_groups", "1000", "groups this AN serves, at most",
     offsetof(shp_an_config_t, max_groups), &shp_cfg_uint, &an_groups_range},
    {"max_osts", "256", "outstanding operations per group, at most",
     offsetof(shp_an_config_t, max_osts), &shp_cfg_uint, &an_osts_range},
    {"max_payload", "64k", "payload bytes per operation, at most",
     offsetof(shp_an_config_t, max_payload), &shp_cfg_size},
    {"am_keepalive", "2s", "keepalive interval of the AM connection",
     offsetof(shp_an_config_t, am_keepalive_ms), &shp_cfg_time},
    {"join_timeout", "5s",
     "how long to retry joining a parent AN that does "
     "not know a group yet",
     offsetof(shp_an_config_t, join_timeout_ms), &shp_cfg_time},
    {"join_deadline", "10s",
     "how long a child's connection may stay without joining a group "
     "before it is closed (0: no limit)",
     offsetof(shp_an_config_t, join_deadline_ms), &shp_cfg_time},
    {"max_unjoined", "1024",
     "children's connections that joined no group yet, at most (past it "
     "the oldest is closed)",
     offsetof(shp_an_config_t, max_unjoined), &shp_cfg_uint,
     &an_unjoined_range},
    {"source_max_unjoined", "256",
     "children's connections from one address that joined no group yet, "
     "at most (past it a new one is refused)",
     offsetof(shp_an_config_t, source_max_unjoined), &shp_cfg_uint,
     &an_unjoined_range},
    {"advertise", "",
     "address children and the AM are told to use (default: the listen "
     "address; required when listening on 0.0.0.0)",
     offsetof(shp_an_config_t, advertise), &shp_cfg_string},
    {"secret_file", SHP_PATH_SECRET,
     "cluster secret shared with the AM (mode 0600)",
     offsetof(shp_an_config_t, secret_file), &shp_cfg_string},
    {"sched", "batch",
     "CPU policy: batch (a child's message never preempts its sender; the AN "
     "folds all that waits) or other",
     offsetof(shp_an_config_t, sched), &shp_cfg_enum, an_scheds},
    {"spin_us", "50",
     "shm transport: before sleeping, look at the rings this many "
     "microseconds, yielding the core between looks (0: sleep at once)",
     offsetof(shp_an_config_t, spin_us), &shp_cfg_uint, &an_spin_range},
    {"spin_many", "0",
     "shm transport: spin (spin_us) also while waiting for several "
     "children's data, not only for the last (hosts where a process switch "
     "is cheap); 0: sleep until the last one rings",
     offsetof(shp_an_config_t, spin_many), &shp_cfg_bool},
    {"sock_spin_us", "200",
     "tcp: after a message in or out, poll the sockets this many "
     "microseconds, yielding the core between polls, while no more "
     "processes are runnable than there are cores; then sleep (0: sleep "
     "at once)",
     offsetof(shp_an_config_t, sock_spin_us), &shp_cfg_uint, &an_spin_range},
    {"quiet_links", "1",
     "tcp: while the AN sleeps, only one child that still owes the oldest "
     "operation wakes it, the others' messages wait in their sockets and "
     "are read then (one wake-up an operation, not one a child); up to 64 "
     "groups; 0: every message wakes it",
     offsetof(shp_an_config_t, quiet_links), &shp_cfg_bool},
    {NULL}};

static const shp_config_table_t an_table = {
    "sharp_an", "SHARP_AN_", SHP_CONF_DIR "/sharp_an.conf", an_opts};

static void an_on_stop(void *arg, int signum)
{
    shp_an_t *an = arg;

    shp_info("signal %d: shutting down", signum);
    shp_an_quit(an);
}

static void an_on_reload(void *arg)
{
    shp_an_config_t fresh = {0};

    (void)arg;
    /* SIGHUP re-reads the log level from the file and environment */
    shp_config_reload_log_level(&an_table, &fresh,
                                offsetof(shp_an_config_t, log_level));
}

static void an_on_usr1(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop;
    (void)revents;
    shp_an_dump(w->data);
}

/* The cluster secret the AM connection proves */
static shp_status_t an_load_key(shp_an_t *an)
{
    char kerr[512];

    if (shp_auth_init() != SHP_OK ||
        shp_auth_key_load(an->cfg.secret_file, &an->key, kerr, sizeof(kerr)) !=
            SHP_OK) {
        fprintf(stderr, "sharp_an: %s\n", kerr);
        return SHP_ERR_INVALID_PARAM;
    }
    return SHP_OK;
}

/* An operation completes only when its last child's data is in, so waking
 * the AN for each child as it sends (preempting the sender on a shared
 * core) buys nothing and costs a context switch each; batch lets it run
 * when a core is free and fold what is there. */
static void an_sched_batch(void)
{
    struct sched_param sp = {0};

    if (sched_setscheduler(0, SCHED_BATCH, &sp) != 0) {
        shp_warn_id("AN0011",
                    "sched batch: %s (running with the default policy)",
                    strerror(errno));
    }
}

int main(int argc, char **argv)
{
    ev_signal usr1;
    static shp_an_t an;
    shp_config_action_t action;
    shp_config_err_t err;
    shp_signals_t sig;
    struct ev_loop *loop;
    int rc = 0;

    shp_log_set_component("sharp_an");
    shp_log_detect_journal();
    if (shp_config_load(&an_table, &an.cfg, argc, argv,
                        "usage: sharp_an [--config FILE] [--OPTION VALUE ...]\n"
                        "\n"
                        "The aggregation node of sharp: reduces its children's "
                        "data in a fixed order and\npasses it up the tree, or "
                        "distributes results at the top of a group.\n"
                        "SIGHUP re-reads the log level; SIGUSR1 logs every "
                        "group's and connection's state.",
                        &action, &err) != SHP_OK) {
        fprintf(stderr, "sharp_an: %s\n", err.msg);
        shp_config_release(&an_table, &an.cfg);
        return 2;
    }
    if (action == SHP_CONFIG_VERSION) {
        printf("sharp_an %s\n", SHP_VERSION);
    }
    if (action != SHP_CONFIG_RUN) {
        shp_config_release(&an_table, &an.cfg);
        return 0;
    }
    shp_log_set_level(an.cfg.log_level);

    if (an.cfg.am[0] != '\0' && an_load_key(&an) != SHP_OK) {
        shp_config_release(&an_table, &an.cfg);
        return 1;
    }
    if (an.cfg.sched == 0) {
        an_sched_batch();
    }

    loop = ev_default_loop(EVFLAG_AUTO);
    if (shp_an_start(&an, loop) != SHP_OK) {
        shp_config_release(&an_table, &an.cfg);
        return 1;
    }
    shp_signals_start(&sig, loop, an_on_stop, an_on_reload, &an);
    ev_signal_init(&usr1, an_on_usr1, SIGUSR1);
    usr1.data = &an;
    ev_signal_start(loop, &usr1);
    shp_an_ctl_start(&an);
    /* the address children use, for scripts and tests */
    printf("sharp_an %s listening on %s\n", an.cfg.name, an.data_addr);
    fflush(stdout);

    shp_an_run(&an);

    an.stopping = 1;
    ev_signal_stop(loop, &usr1);
    shp_an_ctl_stop(&an);
    shp_an_stop(&an);
    shp_signals_stop(&sig, loop);
    shp_config_release(&an_table, &an.cfg);
    shp_info("stopped");
    return rc;
}
