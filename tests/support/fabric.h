/*
 * A fabric of real daemons for the benchmarks: sharp_am on a topology,
 * one sharp_an per switch, one sharpd (host n00001) that the benchmark
 * talks to, all on loopback addresses NET.x.y; and a job over the first
 * hosts.  Header-only (bench_util.h spawns and stops the processes).
 */
#ifndef SHP_BENCH_FABRIC_H
#define SHP_BENCH_FABRIC_H

#include "topology/topo.h"
#include "bench/bench_util.h"
#include "bench/ctl_client.h"

#include <stdlib.h>

/* A cluster secret (mode 0600) at DIR/secret; the path in out. */
static inline int bench_secret(const char *dir, char *out, size_t len)
{
    char cmd[600];
    snprintf(out, len, "%s/secret", dir);
    snprintf(cmd, sizeof(cmd),
             "umask 077 && head -c 32 /dev/urandom | base64 > %s", out);
    return system(cmd) == 0 ? 0 : -1;
}

/* Start the daemons of `topo` (file `topo_path`): the manager at
 * NET.0.1:6126 (`osts`: its group_osts, "" for its default), an AN per
 * switch at NET.(1+k/250).(1+k%250), sharpd's socket at sd_sock.  Logs in
 * DIR/{am,an,sd}.log. */
static inline void bench_fabric_up(const char *bindir, const char *dir,
                                   const char *secret, const shp_topo_t *topo,
                                   const char *topo_path, const char *net,
                                   const char *osts, const char *sd_sock)
{
    char exe[600], log[600], amaddr[64];
    snprintf(amaddr, sizeof(amaddr), "%s.0.1:6126", net);
    snprintf(exe, sizeof(exe), "%s/sharp_am", bindir);
    snprintf(log, sizeof(log), "%s/am.log", dir);
    char *am_argv[] = {exe,
                       "--topology",
                       (char *)topo_path,
                       "--listen",
                       amaddr,
                       "--admin-socket",
                       "",
                       "--secret-file",
                       (char *)secret,
                       "--log-level",
                       "warn",
                       "--tree-settle",
                       "100ms",
                       "--group-osts",
                       (char *)osts,
                       NULL};
    if (osts[0] == '\0') {
        am_argv[13] = NULL; /* the manager's default quota */
    }
    bench_spawn(am_argv, log);
    usleep(300000);
    snprintf(exe, sizeof(exe), "%s/sharp_an", bindir);
    snprintf(log, sizeof(log), "%s/an.log", dir);
    int k = 0;
    for (size_t i = 0; i < shp_topo_count(topo); i++) {
        const shp_topo_node_t *nd = shp_topo_node(topo, (int)i);
        if (nd->type != SHP_NODE_SWITCH) {
            continue;
        }
        char listen[64];
        snprintf(listen, sizeof(listen), "%s.%d.%d:0", net, 1 + k / 250,
                 1 + k % 250);
        k++;
        char *an_argv[] = {exe,           "--name",        nd->desc,
                           "--listen",    listen,          "--am",
                           amaddr,        "--secret-file", (char *)secret,
                           "--log-level", "warn",          NULL};
        bench_spawn(an_argv, log);
    }
    snprintf(exe, sizeof(exe), "%s/sharpd", bindir);
    snprintf(log, sizeof(log), "%s/sd.log", dir);
    char *sd_argv[] = {exe,           "--host",        "n00001",
                       "--socket",    (char *)sd_sock, "--am",
                       amaddr,        "--secret-file", (char *)secret,
                       "--log-level", "warn",          NULL};
    bench_spawn(sd_argv, log);
}

/* Hosts n00001 .. n<n> as a JSON array (a new reference). */
static inline json_t *bench_hosts(int n)
{
    json_t *hosts = json_array();
    for (int h = 0; h < n; h++) {
        char name[16];
        snprintf(name, sizeof(name), "n%05d", h + 1);
        json_array_append_new(hosts, json_string(name));
    }
    return hosts;
}

/* Job 1 over `hosts` through sharpd at sd_sock, retried (every 100 ms, for
 * up to 30 s) while the daemons come up and the trees settle: the
 * connection to sharpd, or -1. */
static inline int bench_job_begin(const char *sd_sock, json_t *hosts)
{
    int fd = -1;
    for (int tries = 0; tries < 300; tries++) {
        usleep(100000);
        if (fd < 0) {
            fd = shp_unix_connect(sd_sock);
            continue;
        }
        json_t *r =
            call(fd, json_pack("{s:s, s:o, s:O}", "type", "job_begin", "job_id",
                               shp_json_u64(1), "hosts", hosts));
        int ok = status_of(r) == 0;
        json_decref(r);
        if (ok) {
            return fd;
        }
    }
    if (fd >= 0) {
        close(fd);
    }
    return -1;
}

#endif
