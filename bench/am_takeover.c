/*
 * bench_am_takeover: the time from kill -9 of the active manager to the
 * first group created through the new one (docs/am.md, "A standby
 * manager").
 *
 * Two sharp_am on 127.45.0.1 and 127.45.0.2 (peers, takeover_after 1 s,
 * the default, every other option at its default too), a sharp_an per
 * switch of a 2-level fat-tree (2 spines, 4 leaves) and two sharpds, every
 * node given both managers.  Each round: a group is created through the
 * active manager, the active one is killed (-9) and a client of a sharpd
 * asks again and again (every 5 ms) for a new job and a group of the two
 * hosts until it gets one; the time from the kill to that answer is the
 * round's.  The killed manager is started again (it comes back as standby)
 * and the next round kills the other one.  It includes takeover_after:
 * the standby waits that long for the active to come back before it takes
 * over, then the nodes register with it and it builds trees
 * (tree_settle).
 *
 * Last line: RESULT am_takeover_ms=<median> (min, max after it).
 */
#include "protocol/ctl.h"
#include "core/net.h"
#include "core/time.h"
#include "tests/support/ctl_client.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 7
#define NSW 6

static const char *sw[NSW] = {"spine01", "spine02", "leaf01",
                              "leaf02",  "leaf03",  "leaf04"};
static const char *hosts[2] = {"n00001", "n00003"};
static const char *am_addr[2] = {"127.45.0.1:6126", "127.45.0.2:6126"};
static const char *pair = "127.45.0.1:6126,127.45.0.2:6126";
static char bin[400], dir[64], secret[128], topo[128];
static pid_t am_pid[2], an_pid[NSW], sd_pid[2];

static pid_t spawn(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void start_am(int i)
{
    char exe[500], sock[128], log[128], state[128];
    snprintf(exe, sizeof(exe), "%s/sharp_am", bin);
    snprintf(sock, sizeof(sock), "%s/am-%d.sock", dir, i);
    snprintf(log, sizeof(log), "%s/am-%d.log", dir, i);
    /* each manager its own state database (as on its own host) */
    snprintf(state, sizeof(state), "%s/am-%d.state", dir, i);
    char *argv[] = {exe,
                    "--state-dir",
                    state,
                    "--topology",
                    topo,
                    "--listen",
                    (char *)am_addr[i],
                    "--admin-socket",
                    sock,
                    "--secret-file",
                    secret,
                    "--peers",
                    (char *)pair,
                    "--standby",
                    i ? "yes" : "no",
                    NULL};
    am_pid[i] = spawn(argv, log);
}

static void stop(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
}

static void cleanup(void)
{
    for (int i = 0; i < 2; i++) {
        stop(sd_pid[i]);
        stop(am_pid[i]);
    }
    for (int i = 0; i < NSW; i++)
        stop(an_pid[i]);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

/* manager i's role: 1 active, 0 standby, -1 no answer */
static int active(int i)
{
    char sock[128];
    snprintf(sock, sizeof(sock), "%s/am-%d.sock", dir, i);
    int fd = shp_unix_connect(sock);
    if (fd < 0)
        return -1;
    json_t *r = call(fd, json_pack("{s:s}", "type", "status"));
    close(fd);
    int a =
        r ? !strcmp(shp_json_opt_str(json_object_get(r, "manager"), "role", ""),
                    "active")
          : -1;
    json_decref(r);
    return a;
}

/* a job and a group of both hosts through the sharpd at fd: 0 or the
 * failing status */
static int job_and_group(int fd, uint64_t job)
{
    json_t *h = json_pack("[s, s]", hosts[0], hosts[1]);
    json_t *r = call(fd, json_pack("{s:s, s:o, s:O}", "type", "job_begin",
                                   "job_id", shp_json_u64(job), "hosts", h));
    int st = status_of(r);
    json_decref(r);
    if (st == 0) {
        r = call(fd, json_pack("{s:s, s:o, s:O, s:s}", "type", "group_create",
                               "job_id", shp_json_u64(job), "members", h,
                               "dist", "rc"));
        st = status_of(r);
        json_decref(r);
    }
    json_decref(h);
    return st;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    char self[300], cmd[1200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(bin, sizeof(bin), "%s", self);
    snprintf(dir, sizeof(dir), "/tmp/sharp-bench-takeover.%d", (int)getpid());
    if (mkdir(dir, 0700) != 0) {
        perror(dir);
        return 1;
    }
    atexit(cleanup);
    signal(SIGPIPE, SIG_IGN);
    snprintf(secret, sizeof(secret), "%s/secret", dir);
    snprintf(topo, sizeof(topo), "%s/topo.ibnd", dir);
    snprintf(cmd, sizeof(cmd),
             "head -c 32 /dev/urandom | base64 > %s && chmod 600 %s && "
             "%s/sharp-topo fat-tree --levels 2 --radix 4 --hosts 8 > %s",
             secret, secret, bin, topo);
    if (system(cmd) != 0)
        return 1;
    start_am(0);
    start_am(1);
    for (int i = 0; i < NSW; i++) {
        char exe[500], listen[64], log[128];
        snprintf(exe, sizeof(exe), "%s/sharp_an", bin);
        snprintf(listen, sizeof(listen), "127.45.1.%d:0", i + 1);
        snprintf(log, sizeof(log), "%s/an-%s.log", dir, sw[i]);
        char *argv[] = {exe,    "--name", (char *)sw[i], "--listen",
                        listen, "--am",   (char *)pair,  "--secret-file",
                        secret, NULL};
        an_pid[i] = spawn(argv, log);
    }
    char sock[2][128];
    for (int i = 0; i < 2; i++) {
        char exe[500], log[128];
        snprintf(exe, sizeof(exe), "%s/sharpd", bin);
        snprintf(sock[i], sizeof(sock[i]), "%s/sd-%d.sock", dir, i);
        snprintf(log, sizeof(log), "%s/sd-%d.log", dir, i);
        char *argv[] = {exe,     "--host", (char *)hosts[i], "--socket",
                        sock[i], "--am",   (char *)pair,     "--secret-file",
                        secret,  NULL};
        sd_pid[i] = spawn(argv, log);
    }
    int fd = -1;
    for (int t = 0; t < 500 && fd < 0; t++) {
        fd = shp_unix_connect(sock[0]);
        if (fd < 0)
            usleep(10000);
    }
    if (fd < 0) {
        fprintf(stderr, "sharpd did not start (see %s)\n", dir);
        return 1;
    }
    double ms[ROUNDS];
    uint64_t job = 1;
    int act = 0;
    for (int r = 0; r < ROUNDS; r++) {
        /* the fabric serves through the active one */
        int st = -1;
        for (int t = 0; t < 2000 && st != 0; t++) {
            st = job_and_group(fd, job++);
            if (st != 0)
                usleep(5000);
        }
        if (st != 0 || active(act) != 1 || active(1 - act) != 0) {
            fprintf(stderr, "round %d: no group through manager %d (see %s)\n",
                    r, act, dir);
            return 1;
        }
        uint64_t t0 = shp_time_ns();
        kill(am_pid[act], SIGKILL);
        waitpid(am_pid[act], NULL, 0);
        for (st = -1; st != 0 && shp_time_ns() - t0 < 30000000000ull;) {
            st = job_and_group(fd, job++);
            if (st != 0)
                usleep(5000);
        }
        ms[r] = (double)(shp_time_ns() - t0) / 1e6;
        if (st != 0 || active(1 - act) != 1) {
            fprintf(stderr, "round %d: no takeover (see %s)\n", r, dir);
            return 1;
        }
        printf("round %d: kill -9 of %s, first group through %s after "
               "%.0f ms\n",
               r, am_addr[act], am_addr[1 - act], ms[r]);
        fflush(stdout);
        start_am(act); /* back as standby */
        for (int t = 0; t < 500 && active(act) != 0; t++)
            usleep(10000);
        act = 1 - act;
    }
    close(fd);
    qsort(ms, ROUNDS, sizeof(ms[0]), cmp);
    printf("takeover_after 1 s (default), tree_settle 200 ms (default), "
           "%d rounds\n",
           ROUNDS);
    printf("RESULT am_takeover_ms=%.0f min=%.0f max=%.0f\n", ms[ROUNDS / 2],
           ms[0], ms[ROUNDS - 1]);
    return 0;
}
