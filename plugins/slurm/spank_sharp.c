/*
 * spank_sharp: a Slurm SPANK plugin that gives every job its sharp
 * resources for as long as Slurm runs it.
 *
 *   job_prolog (slurmd, as root, on each node of the job): job_reserve
 *     {job_id: Slurm's job id, owner: the job's uid, req: the quotas} to
 *     the node's sharpd, which relays it to the manager: the first node
 *     admits the job (groups, OSTs, payload, a fresh job key), the others
 *     add their host to it.
 *   task_init (each task, as the user): SHARP_COLL_JOB_ID=<job id> (and
 *     SHARP_COLL_SHARPD_SOCKET when the plugin is given one), so that
 *     libsharp_coll attaches every rank to the reserved job.
 *   job_epilog (slurmd, as root, on each node, however the job ended):
 *     job_release; the first ends the job at the manager with its groups,
 *     the others find it gone.
 *
 * plugstack.conf arguments: sharpd_socket=PATH, max_groups=N, osts=N,
 * payload=BYTES (each 0 or absent: the manager's default), timeout=SECONDS
 * (an answer from sharpd, default 10), required=1 (a failed reservation
 * fails the prolog: Slurm then drains the node; default: the job runs and
 * its ranks fall back to their MPI's own collectives).
 *
 * It speaks the control protocol to sharpd itself (protocol/ctl.h: an 8-byte
 * header, then a JSON object): it is loaded into slurmd and slurmstepd and
 * links nothing of sharp's.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "shp_paths.h" /* the install's RUNSTATEDIR */

SPANK_PLUGIN(sharp, 1);

#define CTL_MAGIC 0x5348u
#define CTL_VERSION 1
#define CTL_MSG 1
#define CTL_PING 2
#define CTL_PONG 3
#define CTL_MAX (4u * 1024 * 1024)

typedef struct args {
    char sharpd_socket[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int sharpd_socket_given;
    long long max_groups, osts, payload;
    int timeout_s;
    int required;
} args_t;

static int parse_args(int ac, char **av, args_t *a)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->sharpd_socket, sizeof(a->sharpd_socket), "%s",
             SHP_RUNSTATEDIR "/sharp/sharpd.sock");
    a->timeout_s = 10;
    for (int i = 0; i < ac; i++) {
        const char *eq = strchr(av[i], '=');
        char *end;
        if (eq == NULL) {
            slurm_error("spank_sharp: argument \"%s\" is not NAME=VALUE",
                        av[i]);
            return -1;
        }
        size_t n = (size_t)(eq - av[i]);
        const char *v = eq + 1;
        if (n == 13 && !strncmp(av[i], "sharpd_socket", n)) {
            if (strlen(v) >= sizeof(a->sharpd_socket) || v[0] != '/') {
                slurm_error("spank_sharp: sharpd_socket=%s: not an absolute "
                            "path of at most %zu bytes",
                            v, sizeof(a->sharpd_socket) - 1);
                return -1;
            }
            snprintf(a->sharpd_socket, sizeof(a->sharpd_socket), "%s", v);
            a->sharpd_socket_given = 1;
            continue;
        }
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno != 0 || end == v || *end != '\0' || x < 0 || x > INT32_MAX) {
            slurm_error("spank_sharp: %s: not a number from 0 to %d", av[i],
                        INT32_MAX);
            return -1;
        }
        if (n == 10 && !strncmp(av[i], "max_groups", n)) {
            a->max_groups = x;
        } else if (n == 4 && !strncmp(av[i], "osts", n)) {
            a->osts = x;
        } else if (n == 7 && !strncmp(av[i], "payload", n)) {
            a->payload = x;
        } else if (n == 7 && !strncmp(av[i], "timeout", n) && x > 0) {
            a->timeout_s = (int)x;
        } else if (n == 8 && !strncmp(av[i], "required", n)) {
            a->required = x != 0;
        } else {
            slurm_error("spank_sharp: unknown argument \"%s\" (sharpd_socket, "
                        "max_groups, osts, payload, timeout, required)",
                        av[i]);
            return -1;
        }
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* all of buf, or -1; reads wait at most until `deadline` */
static int io_full(int fd, void *buf, size_t len, int out, double deadline)
{
    char *p = buf;
    while (len > 0) {
        double left = deadline - now_s();
        struct pollfd pfd = {fd, out ? POLLOUT : POLLIN, 0};
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        int r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            errno = r == 0 ? ETIMEDOUT : errno;
            return -1;
        }
        ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            errno = n == 0 ? ECONNRESET : errno;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void hdr_pack(uint8_t *h, uint8_t type, uint32_t len)
{
    uint16_t m = htobe16(CTL_MAGIC);
    uint32_t l = htobe32(len);
    memcpy(h, &m, 2);
    h[2] = CTL_VERSION;
    h[3] = type;
    memcpy(h + 4, &l, 4);
}

/* One request to sharpd and its answer (a new reference), or NULL with
 * `err` filled in. */
static json_t *sharpd_call(const args_t *a, json_t *req, char *err,
                           size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    double deadline = now_s() + a->timeout_s;
    json_t *answer = NULL;
    char *body = json_dumps(req, JSON_COMPACT);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", a->sharpd_socket);
    if (body == NULL || fd < 0) {
        snprintf(err, errlen, "out of resources");
        goto out;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        snprintf(err, errlen, "cannot reach sharpd at %s: %s", a->sharpd_socket,
                 strerror(errno));
        goto out;
    }
    uint8_t h[8];
    hdr_pack(h, CTL_MSG, (uint32_t)strlen(body));
    if (io_full(fd, h, 8, 1, deadline) != 0 ||
        io_full(fd, body, strlen(body), 1, deadline) != 0) {
        snprintf(err, errlen, "cannot send to sharpd at %s: %s",
                 a->sharpd_socket, strerror(errno));
        goto out;
    }
    for (;;) {
        uint16_t m;
        uint32_t len;
        if (io_full(fd, h, 8, 0, deadline) != 0) {
            snprintf(err, errlen, "no answer from sharpd at %s: %s",
                     a->sharpd_socket, strerror(errno));
            goto out;
        }
        memcpy(&m, h, 2);
        memcpy(&len, h + 4, 4);
        len = be32toh(len);
        if (be16toh(m) != CTL_MAGIC || h[2] != CTL_VERSION || len > CTL_MAX) {
            snprintf(err, errlen, "%s does not speak sharp's protocol",
                     a->sharpd_socket);
            goto out;
        }
        char *buf = malloc((size_t)len + 1);
        if (buf == NULL || io_full(fd, buf, len, 0, deadline) != 0) {
            free(buf);
            snprintf(err, errlen, "the answer of sharpd was cut short");
            goto out;
        }
        buf[len] = '\0';
        if (h[3] == CTL_PING) {
            hdr_pack(h, CTL_PONG, 0);
            (void)io_full(fd, h, 8, 1, deadline);
        }
        if (h[3] != CTL_MSG) {
            free(buf);
            continue;
        }
        json_t *msg = json_loadb(buf, len, 0, NULL);
        free(buf);
        json_t *id = json_object_get(msg, "id");
        if (json_is_integer(id) && json_integer_value(id) == 1) {
            answer = msg;
            break;
        }
        json_decref(msg); /* not ours */
    }
out:
    if (fd >= 0)
        close(fd);
    free(body);
    json_decref(req);
    return answer;
}

/* The answer's status (0 ok), its error text in err. */
static int answer_status(json_t *r, char *err, size_t errlen)
{
    json_t *st = json_object_get(r, "status");
    const char *e = json_string_value(json_object_get(r, "error"));
    int s = json_is_integer(st) ? (int)json_integer_value(st) : -1;
    if (s != 0)
        snprintf(err, errlen, "%s (status %d)", e ? e : "refused", s);
    return s;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
    args_t a;
    uint32_t job_id;
    uid_t uid;
    char err[512];
    if (parse_args(ac, av, &a) != 0)
        return -1;
    if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
        slurm_error("spank_sharp: prolog: cannot read the job id and uid");
        return a.required ? -1 : 0;
    }
    json_t *req = json_object();
    if (a.max_groups)
        json_object_set_new(req, "max_groups", json_integer(a.max_groups));
    if (a.osts)
        json_object_set_new(req, "osts", json_integer(a.osts));
    if (a.payload)
        json_object_set_new(req, "payload", json_integer(a.payload));
    json_t *r = sharpd_call(&a,
                            json_pack("{s:s, s:i, s:I, s:I, s:o}", "type",
                                      "job_reserve", "id", 1, "job_id",
                                      (json_int_t)job_id, "owner",
                                      (json_int_t)uid, "req", req),
                            err, sizeof(err));
    if (r == NULL || answer_status(r, err, sizeof(err)) != 0) {
        json_decref(r);
        slurm_error("spank_sharp: job %u: no sharp resources: %s%s", job_id,
                    err, a.required ? "" : " (the job runs without them)");
        return a.required ? -1 : 0;
    }
    slurm_info(
        "spank_sharp: job %u (uid %u): sharp resources reserved: %" PRId64
        " groups, %" PRId64 " OSTs, %" PRId64 " bytes",
        job_id, (unsigned)uid,
        (int64_t)json_integer_value(json_object_get(r, "max_groups")),
        (int64_t)json_integer_value(json_object_get(r, "osts")),
        (int64_t)json_integer_value(json_object_get(r, "payload")));
    json_decref(r);
    return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    args_t a;
    uint32_t job_id;
    char err[512];
    if (parse_args(ac, av, &a) != 0)
        return -1;
    if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
        slurm_error("spank_sharp: epilog: cannot read the job id");
        return 0;
    }
    json_t *r = sharpd_call(&a,
                            json_pack("{s:s, s:i, s:I}", "type", "job_release",
                                      "id", 1, "job_id", (json_int_t)job_id),
                            err, sizeof(err));
    /* never fail an epilog (Slurm would drain the node): if this host's
     * sharpd is gone, the manager drops its hold when it loses it */
    if (r == NULL || answer_status(r, err, sizeof(err)) != 0)
        slurm_error("spank_sharp: job %u: cannot release its sharp "
                    "resources: %s",
                    job_id, err);
    else
        slurm_info("spank_sharp: job %u: sharp resources %s", job_id,
                   json_is_true(json_object_get(r, "released"))
                       ? "released"
                       : "already released");
    json_decref(r);
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    args_t a;
    uint32_t job_id;
    char id[16];
    if (parse_args(ac, av, &a) != 0)
        return -1;
    if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS)
        return 0;
    snprintf(id, sizeof(id), "%u", job_id);
    /* what the user set stays */
    (void)spank_setenv(sp, "SHARP_COLL_JOB_ID", id, 0);
    if (a.sharpd_socket_given)
        (void)spank_setenv(sp, "SHARP_COLL_SHARPD_SOCKET", a.sharpd_socket, 0);
    return 0;
}
