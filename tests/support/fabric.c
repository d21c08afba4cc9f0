/* A local fabric of real daemons for the tests and the benchmarks
 * (tests/support/fabric.h). */
#include "tests/support/fabric.h"

#include "tests/support/ctl_client.h"
#include "tests/support/test_util.h"

#include "core/net.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int test_fabric_init(test_fabric_t *f, const char *to_bin, const char *dir)
{
    char self[400];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

    memset(f, 0, sizeof(*f));
    if (n <= 0) {
        return -1;
    }
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(f->bin, sizeof(f->bin), "%s%s", self, to_bin);
    snprintf(f->dir, sizeof(f->dir), "%s", dir);
    return 0;
}

static int vsh(const char *fmt, va_list ap)
{
    char cmd[2048];

    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    return system(cmd);
}

int test_fabric_sh(const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vsh(fmt, ap);
    va_end(ap);
    return rc;
}

int test_fabric_topo(const test_fabric_t *f, const char *args, const char *out)
{
    return test_fabric_sh("%s/sharp-topo %s > %s", f->bin, args, out);
}

/* DIR/netns: the prefix of the namespaces sharp-fabric made */
static int read_netns(test_fabric_t *f)
{
    char path[600];
    FILE *in;
    int ok;

    snprintf(path, sizeof(path), "%s/netns", f->dir);
    in = fopen(path, "r");
    if (in == NULL) {
        return -1;
    }
    ok = fscanf(in, "%31s", f->netns) == 1;
    fclose(in);
    return ok ? 0 : -1;
}

int test_fabric_up(test_fabric_t *f, const char *env, const char *topo,
                   const char *net, const char *redir)
{
    char where[64];

    f->netns[0] = '\0';
    snprintf(f->net, sizeof(f->net), "%s", net != NULL ? net : "10.77");
    if (net != NULL) {
        snprintf(where, sizeof(where), "--net %s", net);
    } else {
        snprintf(where, sizeof(where), "--netns");
    }
    if (test_fabric_sh("%s%s%s/sharp-fabric --dir %s up %s %s %s", env,
                       env[0] ? " " : "", f->bin, f->dir, topo, where,
                       redir) != 0) {
        return -1;
    }
    return net == NULL ? read_netns(f) : 0;
}

static void vcmd(const test_fabric_t *f, char *out, size_t len, const char *fmt,
                 va_list ap)
{
    int n = snprintf(out, len, "%s/sharp-fabric --dir %s ", f->bin, f->dir);

    if (n >= 0 && (size_t)n < len) {
        vsnprintf(out + n, len - (size_t)n, fmt, ap);
    }
}

void test_fabric_cmd(const test_fabric_t *f, char *out, size_t len,
                     const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vcmd(f, out, len, fmt, ap);
    va_end(ap);
}

int test_fabric_do(const test_fabric_t *f, const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;

    va_start(ap, fmt);
    vcmd(f, cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

int test_fabric_down(const test_fabric_t *f, const char *redir)
{
    return test_fabric_do(f, "down %s", redir) == 0 ? 0 : -1;
}

void test_fabric_host_sock(const test_fabric_t *f, int host, char *out,
                           size_t len)
{
    snprintf(out, len, "%s/hosts/n%05d.sock", f->dir, host + 1);
}

void test_fabric_become_host(const test_fabric_t *f, int host)
{
    char v[600];

    test_fabric_host_sock(f, host, v, sizeof(v));
    setenv("SHARP_COLL_SHARPD_SOCKET", v, 1);
    snprintf(v, sizeof(v), "%s.64.%d", f->net, host + 1);
    setenv("SHARP_COLL_LOCAL_IP", v, 1);
    if (f->netns[0] != '\0') { /* this process moves into the host's */
        snprintf(v, sizeof(v), "/var/run/netns/%s-n%05d", f->netns, host + 1);
        int fd = open(v, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
            fprintf(stderr, "%s: cannot enter %s\n",
                    program_invocation_short_name, v);
            _exit(2);
        }
        close(fd);
    }
}

/* Daemons started directly ------------------------------------------------ */

int test_fabric_secret(const test_fabric_t *f, char *out, size_t len)
{
    snprintf(out, len, "%s/secret", f->dir);
    return test_fabric_sh("umask 077 && head -c 32 /dev/urandom | base64 > %s",
                          out) == 0
               ? 0
               : -1;
}

pid_t test_fabric_spawn(test_fabric_t *f, char *const argv[], const char *log)
{
    pid_t p = test_start(argv, log);

    if (p > 0 && f->npids < TEST_FABRIC_MAX_PIDS) {
        f->pids[f->npids++] = p;
    }
    return p;
}

void test_fabric_stop(test_fabric_t *f)
{
    for (int i = 0; i < f->npids; i++) {
        kill(f->pids[i], SIGTERM);
    }
    for (int i = 0; i < f->npids; i++) {
        waitpid(f->pids[i], NULL, 0);
    }
    f->npids = 0;
}

/* the manager at amaddr (osts: its group_osts, "" its default) */
static void spawn_am(test_fabric_t *f, const char *secret,
                     const char *topo_path, const char *amaddr,
                     const char *osts)
{
    char exe[600], log[600], state[600];

    snprintf(exe, sizeof(exe), "%s/sharp_am", f->bin);
    snprintf(log, sizeof(log), "%s/am.log", f->dir);
    snprintf(state, sizeof(state), "%s/am-state", f->dir);
    char *argv[] = {exe,
                    "--topology",
                    (char *)topo_path,
                    "--listen",
                    (char *)amaddr,
                    "--admin-socket",
                    "",
                    "--secret-file",
                    (char *)secret,
                    "--state-dir",
                    state,
                    "--log-level",
                    "warn",
                    "--tree-settle",
                    "100ms",
                    "--group-osts",
                    (char *)osts,
                    NULL};
    if (osts[0] == '\0') {
        argv[15] = NULL; /* the manager's default quota */
    }
    test_fabric_spawn(f, argv, log);
}

/* an AN per switch of topo, at NET.(1+k/250).(1+k%250) */
static void spawn_ans(test_fabric_t *f, const char *secret,
                      const shp_topo_t *topo, const char *net,
                      const char *amaddr)
{
    char exe[600], log[600];
    int k = 0;

    snprintf(exe, sizeof(exe), "%s/sharp_an", f->bin);
    snprintf(log, sizeof(log), "%s/an.log", f->dir);
    for (size_t i = 0; i < shp_topo_count(topo); i++) {
        const shp_topo_node_t *nd = shp_topo_node(topo, (int)i);
        if (nd->type != SHP_NODE_SWITCH) {
            continue;
        }
        char listen[64];
        snprintf(listen, sizeof(listen), "%s.%d.%d:0", net, 1 + k / 250,
                 1 + k % 250);
        k++;
        char *argv[] = {exe,
                        "--name",
                        nd->desc,
                        "--listen",
                        listen,
                        "--am",
                        (char *)amaddr,
                        "--secret-file",
                        (char *)secret,
                        "--log-level",
                        "warn",
                        NULL};
        test_fabric_spawn(f, argv, log);
    }
}

void test_fabric_spawn_daemons(test_fabric_t *f, const char *secret,
                               const shp_topo_t *topo, const char *topo_path,
                               const char *net, const char *osts,
                               const char *sd_sock)
{
    char exe[600], log[600], amaddr[64];

    snprintf(amaddr, sizeof(amaddr), "%s.0.1:6126", net);
    /* a new fabric: no state of an earlier one in the directory */
    test_fabric_sh("rm -rf '%s/am-state'", f->dir);
    spawn_am(f, secret, topo_path, amaddr, osts);
    usleep(300000);
    spawn_ans(f, secret, topo, net, amaddr);
    snprintf(exe, sizeof(exe), "%s/sharpd", f->bin);
    snprintf(log, sizeof(log), "%s/sd.log", f->dir);
    char *argv[] = {exe,           "--host",        "n00001",
                    "--socket",    (char *)sd_sock, "--am",
                    amaddr,        "--secret-file", (char *)secret,
                    "--log-level", "warn",          NULL};
    test_fabric_spawn(f, argv, log);
}

json_t *test_fabric_hosts(int n)
{
    json_t *hosts = json_array();

    for (int h = 0; h < n; h++) {
        char name[16];
        snprintf(name, sizeof(name), "n%05d", h + 1);
        json_array_append_new(hosts, json_string(name));
    }
    return hosts;
}

int test_fabric_job_begin(const char *sd_sock, json_t *hosts)
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
