/* sharpd: options, signals and the event loop. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/config.h"
#include "core/log.h"
#include "core/paths.h"
#include "sharpd/sharpd.h"

#ifndef SHP_VERSION
#define SHP_VERSION "0.1.0"
#endif

static const shp_config_range_t sd_clients_range = {1, 1000000};

static const shp_config_opt_t sharpd_opts[] = {
    {"socket", SHP_PATH_SHARPD_SOCK, "Unix socket for local processes",
     offsetof(shp_sharpd_config_t, socket), &shp_cfg_string},
    {"am", "127.0.0.1:6126",
     "ip:port of the aggregation manager, or of each manager of an active "
     "and standby set (comma separated): tried in turn, the active one kept",
     offsetof(shp_sharpd_config_t, am), &shp_cfg_string},
    {"host", "",
     "this host's name in the topology (default: the short host name)",
     offsetof(shp_sharpd_config_t, host), &shp_cfg_string},
    {"secret_file", SHP_PATH_SECRET,
     "cluster secret shared with the AM (mode 0600)",
     offsetof(shp_sharpd_config_t, secret_file), &shp_cfg_string},
    {"log_level", "info", "log level", offsetof(shp_sharpd_config_t, log_level),
     &shp_cfg_loglevel},
    {"keepalive", "2s", "keepalive interval of the AM connection",
     offsetof(shp_sharpd_config_t, keepalive_ms), &shp_cfg_time},
    {"uid_max_clients", "1024",
     "local connections of one user at once, at most (root's are not "
     "counted); one more is refused",
     offsetof(shp_sharpd_config_t, uid_max_clients), &shp_cfg_uint,
     &sd_clients_range},
    {"max_clients", "4096",
     "local connections at once, everyone's together, at most; one more "
     "is refused",
     offsetof(shp_sharpd_config_t, max_clients), &shp_cfg_uint,
     &sd_clients_range},
    {"client_max_jobs", "1024",
     "jobs one local connection begins or attaches to, at most; one more "
     "is refused (each is ended or detached when the connection closes)",
     offsetof(shp_sharpd_config_t, client_max_jobs), &shp_cfg_uint,
     &sd_clients_range},
    {"frame_timeout", "10s",
     "a local client that began a request and has not sent all of it "
     "within this time is disconnected (0: never); a client idle between "
     "requests is not",
     offsetof(shp_sharpd_config_t, frame_timeout_ms), &shp_cfg_time},
    {"client_max_queued", "1m",
     "answers waiting for a local client that does not read them, at "
     "most (bytes, beside the one being sent); past it the client is "
     "disconnected",
     offsetof(shp_sharpd_config_t, client_max_queued), &shp_cfg_size},
    {"am_wait", "20s",
     "a request to begin or attach to a job that finds the aggregation "
     "manager unreachable waits this long for it to come back (or for a "
     "restarted one to take the fabric back) before it fails (0: fails at "
     "once); group requests and a job's end never wait",
     offsetof(shp_sharpd_config_t, am_wait_ms), &shp_cfg_time},
    {NULL}};

static const shp_config_table_t sharpd_table = {
    "sharpd", "SHARPD_", SHP_CONF_DIR "/sharpd.conf", sharpd_opts};

static void on_stop(void *arg, int signum)
{
    shp_sharpd_t *sd = arg;
    shp_info("signal %d: shutting down", signum);
    ev_break(sd->loop, EVBREAK_ALL);
}

static void on_reload(void *arg)
{
    shp_sharpd_config_t fresh = {0};
    (void)arg;
    shp_config_reload_log_level(&sharpd_table, &fresh,
                                offsetof(shp_sharpd_config_t, log_level));
}

/* the daemon, started, until a signal stops it */
static int run(shp_sharpd_t *sd)
{
    shp_signals_t sig;
    char msg[600];
    struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);

    if (shp_sharpd_start(sd, loop, msg, sizeof(msg)) != SHP_OK) {
        fprintf(stderr, "sharpd: %s\n", msg);
        return 1;
    }
    shp_signals_start(&sig, loop, on_stop, on_reload, sd);
    printf("sharpd %s listening on %s\n", sd->cfg.host, sd->cfg.socket);
    fflush(stdout);
    ev_run(loop, 0);
    shp_sharpd_stop(sd);
    shp_signals_stop(&sig, loop);
    return 0;
}

int main(int argc, char **argv)
{
    static shp_sharpd_t sd;
    shp_config_action_t action;
    shp_config_err_t err;
    int rc = 0;

    shp_log_set_component("sharpd");
    shp_log_detect_journal();
    if (shp_config_load(&sharpd_table, &sd.cfg, argc, argv,
                        "usage: sharpd [--config FILE] [--OPTION VALUE ...]\n"
                        "\n"
                        "The sharp host daemon: admits local processes "
                        "(identified by SO_PEERCRED)\nto jobs and groups "
                        "through the aggregation manager.",
                        &action, &err) != SHP_OK) {
        fprintf(stderr, "sharpd: %s\n", err.msg);
        rc = 2;
    } else if (action == SHP_CONFIG_VERSION) {
        printf("sharpd %s\n", SHP_VERSION);
    } else if (action == SHP_CONFIG_RUN) {
        shp_log_set_level(sd.cfg.log_level);
        rc = run(&sd);
    }
    shp_config_release(&sharpd_table, &sd.cfg);
    if (rc == 0 && action == SHP_CONFIG_RUN)
        shp_info("stopped");
    return rc;
}
