/*
 * Reservations: a scheduler's prolog reserves a job host by host, before
 * any of its processes start (job_reserve, root only, through each host's
 * sharpd), and its epilog releases it (job_release).  The first host's
 * reservation admits the job for its owner, within max_jobs, with the
 * job's quotas; each further host must be spanned by some tree with the
 * others.  A reserved job outlives its processes until released; the
 * loss of a holding sharpd drops that host's hold (am_jobs.c).
 *
 * The scheduler's job ids are the scheduler's: a user's ordinary job (not
 * root's, not reserved) that holds the id a reservation asks for is a
 * squat (a user can guess the next Slurm job id and begin it first, which
 * made the prolog's reservation fail and, with required=1, drained the
 * node).  The reservation ends that job (its processes are told) and
 * goes on.
 *
 * A reservation is written to the state database (am_persist.c) before
 * its answer, and loaded back when the manager starts again
 * (shp_am_reserve_restore): a job's next step attaches after a restart.
 */
#include "am/am_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ctl.h"
#include "core/log.h"

/* A job_reserve on its way. */
typedef struct {
    uint64_t job_id, owner;
    int node;          /* the asking host's */
    shp_am_job_t *job; /* NULL: a new job */
    int k;             /* the host's index among the job's; -1: not one */
    char why[300];
} am_reserve_t;

/* A user's ordinary job holds the id the scheduler reserves: it ends,
 * its processes told why, and the reservation goes on as for a new job. */
static void am_reserve_evict(shp_am_t *am, shp_am_peer_t *p, am_reserve_t *r)
{
    shp_am_job_t *j = r->job;
    char why[200];
    if (!j || j->reserved || j->uid == 0)
        return;
    am->stats.squats_ended++;
    shp_warn_id("AM0404",
                "job %" PRIu64 " of uid %u ended: the scheduler reserves "
                "its id (from %s)",
                j->id, (unsigned)j->uid, p->host);
    snprintf(why, sizeof(why),
             "job id %" PRIu64 " is reserved by the scheduler", j->id);
    shp_am_job_end(am, j, SHP_ERR_JOB_KILLED, why);
    r->job = NULL;
}

/* Whether the host may reserve its share of the job. */
static shp_status_t am_reserve_check(shp_am_t *am, shp_am_peer_t *p,
                                     am_reserve_t *r)
{
    shp_am_job_t *j = r->job;
    if (r->node < 0 || am->leaf[r->node] < 0) {
        snprintf(r->why, sizeof(r->why),
                 "host %s reaches no live aggregation node", p->host);
        return SHP_ERR_NO_TREE;
    }
    if (j && !j->reserved) { /* root's: a squat is evicted before */
        snprintf(r->why, sizeof(r->why),
                 "job %" PRIu64 " exists (not reserved, root's)", r->job_id);
        return SHP_ERR_EXISTS;
    }
    if (j && j->uid != (uid_t)r->owner) {
        snprintf(r->why, sizeof(r->why),
                 "job %" PRIu64 " is reserved for uid %u", r->job_id,
                 (unsigned)j->uid);
        return SHP_ERR_PERM;
    }
    if (!j && HASH_COUNT(am->jobs) >= am->cfg.max_jobs) {
        snprintf(r->why, sizeof(r->why),
                 "the fabric runs its maximum of %u jobs", am->cfg.max_jobs);
        return SHP_ERR_QUOTA;
    }
    return SHP_OK;
}

/* The host joins the job's hosts (the first one: the job is admitted for
 * `owner`); some tree must span it with the others.  On SHP_ERR_NO_MEMORY
 * nothing changed. */
static shp_status_t am_reserve_host(shp_am_t *am, shp_am_peer_t *p,
                                    const json_t *msg, am_reserve_t *r)
{
    shp_am_job_t *j = r->job;
    int n = j ? j->nhosts : 0;
    int *nodes = malloc(sizeof(int) * (size_t)(n + 1));
    uint8_t *att = calloc((size_t)n + 1, 1), *held = calloc((size_t)n + 1, 1);
    shp_status_t st = SHP_ERR_NO_MEMORY;
    if (!nodes || !att || !held)
        goto out;
    if (j) {
        memcpy(nodes, j->hosts, sizeof(int) * (size_t)n);
        memcpy(att, j->attached, (size_t)n);
        memcpy(held, j->held, (size_t)n);
    }
    nodes[n] = r->node;
    if (!shp_am_hosts_spanned(am, nodes, n + 1)) {
        snprintf(r->why, sizeof(r->why),
                 "no aggregation tree spans host %s with the job's %d "
                 "other hosts",
                 p->host, n);
        st = SHP_ERR_NO_TREE;
        goto out;
    }
    if (!j) {
        if (!(j = shp_am_job_add(am, r->job_id, (uid_t)r->owner, msg)))
            goto out;
        j->reserved = 1;
        shp_info("job %" PRIu64 " (uid %u) reserved from %s: %u "
                 "groups, %u osts, %u bytes",
                 j->id, (unsigned)j->uid, p->host, j->max_groups, j->osts,
                 j->payload);
        r->job = j;
    }
    free(j->hosts);
    free(j->attached);
    free(j->held);
    j->hosts = nodes;
    j->attached = att;
    j->held = held;
    nodes = NULL;
    att = held = NULL;
    r->k = j->nhosts++;
    st = SHP_OK;
out:
    free(nodes);
    free(att);
    free(held);
    return st;
}

/* job_reserve {job_id, owner, req?} from root on a host (a scheduler's
 * prolog through that host's sharpd): the job is admitted for uid `owner`
 * with the host as one of its hosts, or the host is added to the job a
 * prolog on another host reserved.  A reserved job outlives its processes
 * (steps come and go) until job_release. */
void shp_am_job_reserve(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                        int64_t id)
{
    static const char *ack = "job_reserve_ack";
    am_reserve_t r = {.k = -1};
    uint64_t uid;
    const char *w;
    if (shp_json_get_u64(msg, "job_id", &r.job_id, &w) ||
        shp_json_get_u64(msg, "uid", &uid, &w) ||
        shp_json_get_u64(msg, "owner", &r.owner, &w) || r.owner > UINT32_MAX) {
        shp_am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PROTO,
                                     "job_id, uid and owner required"));
        return;
    }
    if (uid != 0) {
        snprintf(r.why, sizeof(r.why),
                 "only root reserves jobs (uid %" PRIu64 ")", uid);
        shp_warn_id("AM0403", "job %" PRIu64 " on %s: %s", r.job_id, p->host,
                    r.why);
        shp_am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PERM, r.why));
        return;
    }
    r.node = shp_topo_find(am->topo, p->host);
    r.job = shp_am_job_find(am, r.job_id);
    if (r.node >= 0 && am->leaf[r.node] >= 0)
        am_reserve_evict(am, p, &r);
    shp_status_t st = am_reserve_check(am, p, &r);
    for (int h = 0; r.job && h < r.job->nhosts && r.k < 0; h++)
        if (r.job->hosts[h] == r.node)
            r.k = h;
    if (st == SHP_OK && r.k < 0)
        st = am_reserve_host(am, p, msg, &r);
    if (st == SHP_ERR_NO_MEMORY) {
        shp_am_send(p, shp_ctl_reply(ack, id, SHP_ERR_NO_MEMORY, "no memory"));
        return;
    }
    if (st != SHP_OK) {
        am->stats.jobs_refused++;
        shp_warn_id("AM0401", "job %" PRIu64 " reservation refused: %s",
                    r.job_id, r.why);
        shp_am_send(p, shp_ctl_reply(ack, id, SHP_ERR_JOB_REFUSED, r.why));
        return;
    }
    int was_held = r.job->held[r.k];
    r.job->held[r.k] = 1;
    /* the reservation is on disk before the scheduler hears of it */
    if (shp_am_persist_job(am, r.job) != SHP_OK) {
        r.job->held[r.k] = (uint8_t)was_held;
        snprintf(r.why, sizeof(r.why),
                 "the manager cannot write its state database: %s",
                 shp_am_store_error(am->store));
        int none = 1;
        for (int h = 0; h < r.job->nhosts; h++)
            none &= !r.job->held[h] && !r.job->attached[h];
        if (none && !r.job->ngroups)
            shp_am_job_free(am, r.job); /* a new job: never told anyone */
        shp_am_send(p, shp_ctl_reply(ack, id, SHP_ERR_IO, r.why));
        return;
    }
    shp_am_send(p, shp_am_job_quota_reply(ack, id, r.job));
}

/* job_release {job_id} from root on one of the job's hosts (a scheduler's
 * epilog): the job ends with its groups, whatever its other hosts hold.
 * Releasing a job that is not there (ended already, by another host's
 * epilog) succeeds: the answer says so. */
void shp_am_job_release(shp_am_t *am, shp_am_peer_t *p, const json_t *msg,
                        int64_t id)
{
    static const char *ack = "job_release_ack";
    uint64_t job_id, uid;
    const char *w;
    if (shp_json_get_u64(msg, "job_id", &job_id, &w) ||
        shp_json_get_u64(msg, "uid", &uid, &w)) {
        shp_am_send(p, shp_ctl_reply(ack, id, SHP_ERR_PROTO,
                                     "job_id and uid required"));
        return;
    }
    if (uid != 0) {
        shp_am_send(
            p, shp_ctl_reply(ack, id, SHP_ERR_PERM, "only root releases jobs"));
        return;
    }
    shp_am_job_t *j = shp_am_job_find(am, job_id);
    if (j && !j->reserved) {
        shp_am_send(p, shp_ctl_reply(ack, id, SHP_ERR_INVALID_PARAM,
                                     "the job was not reserved"));
        return;
    }
    json_t *m = shp_ctl_reply(ack, id, SHP_OK, NULL);
    json_object_set_new(m, "released", json_boolean(j != NULL));
    if (j) {
        int busy = j->ngroups > 0;
        for (int h = 0; h < j->nhosts; h++)
            busy |= j->attached[h];
        char why[200];
        snprintf(why, sizeof(why), "released by the scheduler on %s", p->host);
        /* processes still there are told (their operations fail) */
        shp_am_job_end(am, j, busy ? SHP_ERR_JOB_KILLED : SHP_OK, why);
    }
    shp_am_send(p, m);
}

/* A stored reservation back in the job table (hosts the topology no
 * longer has are dropped). */
typedef struct {
    shp_am_t *am;
    shp_status_t st;
    unsigned n;
} am_restore_t;

static void am_reserve_restore_one(void *arg, const shp_am_store_job_t *sj)
{
    am_restore_t *rs = arg;
    shp_am_t *am = rs->am;
    if (rs->st != SHP_OK)
        return;
    shp_am_job_t *j = calloc(1, sizeof(*j));
    if (!j || !(j->hosts = malloc(sizeof(int) * ((size_t)sj->nhosts + 1))) ||
        !(j->attached = calloc((size_t)sj->nhosts + 1, 1)) ||
        !(j->held = calloc((size_t)sj->nhosts + 1, 1))) {
        if (j) {
            free(j->hosts);
            free(j->attached);
        }
        free(j);
        rs->st = SHP_ERR_NO_MEMORY;
        return;
    }
    j->id = sj->job_id;
    j->uid = (uid_t)sj->uid;
    memcpy(j->key, sj->key, sizeof(j->key));
    j->max_groups = sj->max_groups;
    j->osts = sj->osts;
    j->payload = sj->payload;
    j->reserved = 1;
    for (int h = 0; h < sj->nhosts; h++) {
        int node = shp_topo_find(am->topo, sj->hosts[h]);
        if (node < 0 || shp_topo_node(am->topo, node)->type != SHP_NODE_CA) {
            shp_warn("job %" PRIu64 ": host %s of its reservation is not in "
                     "the topology: dropped",
                     sj->job_id, sj->hosts[h]);
            continue;
        }
        j->hosts[j->nhosts] = node;
        j->held[j->nhosts++] = sj->held[h];
    }
    if (j->nhosts == 0) {
        shp_warn("job %" PRIu64 ": no host of its reservation is in the "
                 "topology: dropped",
                 sj->job_id);
        free(j->hosts);
        free(j->attached);
        free(j->held);
        free(j);
        return;
    }
    HASH_ADD(hh, am->jobs, id, sizeof(j->id), j);
    rs->n++;
}

/* The reservations of the state database, back in the job table before
 * any peer is heard; err says why not. */
shp_status_t shp_am_reserve_restore(shp_am_t *am, char *err, size_t errlen)
{
    am_restore_t rs = {am, SHP_OK, 0};
    if (!am->store)
        return SHP_OK;
    /* what this manager could have written: each host of the topology
     * once per job; jobs within the largest max_jobs (a max_jobs lowered
     * since keeps them, and refuses new ones until they are fewer) */
    shp_status_t st = shp_am_store_jobs(am->store, SHP_AM_MAX_JOBS_EVER,
                                        (unsigned)shp_topo_count(am->topo),
                                        am_reserve_restore_one, &rs);
    if (st == SHP_OK)
        st = rs.st;
    if (st != SHP_OK) {
        snprintf(err, errlen, "%s",
                 st == SHP_ERR_NO_MEMORY ? "no memory"
                                         : shp_am_store_error(am->store));
        return st;
    }
    if (rs.n)
        shp_info("%u reservation%s restored from %s", rs.n,
                 rs.n == 1 ? "" : "s", shp_am_store_path(am->store));
    if (rs.n > am->cfg.max_jobs)
        shp_warn("%u reservations restored, more than max_jobs %u: no new "
                 "job until they are fewer",
                 rs.n, am->cfg.max_jobs);
    return SHP_OK;
}
