/*
 * Why a call went to MPI (libsharp_mpi; docs/mpi.md, "Why a call went to
 * MPI").  Every place that sends a collective to PMPI names one reason of
 * one enumeration (WHY_*, sharp_mpi_int.h): its row here has the reason's
 * name, what it means and the setting or change that would offload the
 * call.  The
 * status codes of libsharp_coll (job and group creation) map to reasons
 * too (smpi_why_of_status), so nothing is reported as a bare
 * "unavailable".
 *
 * Counted always (per reason: calls and bytes, and the communicators that
 * had it); with SHARP_MPI_VERBOSE >= 1 each communicator that is not
 * offloaded is reported once by its rank 0 with its reason, each class of
 * call (collective x reason) that goes to MPI on a communicator once, and
 * MPI_Finalize's report ends with the "not offloaded, because" table.
 * What the notes need of a communicator (its number, which reasons it
 * has shown) hangs on it as an attribute of its own, made on its first
 * call that went to MPI; the world is communicator 0.
 */
#include "mpi-coll/sharp_mpi_int.h"

#include "core/paths.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the table: name, what it means, what would change it.  A %s or %ld in
 * the text is filled by why_text (the setting's value). */
enum { S_JOB, S_COMM, S_CALL }; /* what a reason is about */
static const struct {
    int scope;
    const char *name, *expl, *remedy;
} why_tab[WHY_N] = {
    [WHY_OK] = {S_CALL, "ok", "offloaded", ""},
    [WHY_DISABLED] = {S_JOB, "disabled", "SHARP_MPI_ENABLE=0",
                      "unset SHARP_MPI_ENABLE (or set it to 1)"},
    [WHY_THREAD_MULTIPLE] =
        {S_JOB, "thread_multiple",
         "a rank runs at MPI_THREAD_MULTIPLE and SHARP_MPI_THREAD_MULTIPLE=0 "
         "keeps such jobs on MPI",
         "unset SHARP_MPI_THREAD_MULTIPLE (the layer takes its lock then)"},
    [WHY_SHARPD] =
        {S_JOB, "sharpd_unreachable", "sharpd unreachable at %s",
         "start sharpd on every host, or set SHARP_COLL_SHARPD_SOCKET "
         "to its socket"},
    [WHY_JOB_REFUSED] =
        {S_JOB, "job_refused",
         "the manager refused the job (a host it does not know, "
         "the manager unreachable from sharpd, the job ended)",
         "see sharpd's and sharp_am's logs "
         "(SHARP_COLL_LOG_LEVEL=info says more here)"},
    [WHY_QUOTA] =
        {S_JOB, "quota",
         "group creation refused by the manager: quota (uid_max_jobs, "
         "the job's max_groups or OSTs)",
         "end other jobs of this user, ask for less "
         "(SHARP_COLL_JOB_QUOTA_*), or raise sharp_am's limits"},
    [WHY_NO_RESOURCE] = {S_JOB, "no_resource",
                         "the manager has no resources left (OSTs, groups, "
                         "aggregation nodes)",
                         "retry when other jobs ended, or ask for less "
                         "(SHARP_COLL_JOB_QUOTA_*)"},
    [WHY_NO_TREE] = {S_JOB, "no_tree",
                     "no aggregation tree spans the communicator's hosts",
                     "check the fabric (sharpctl ans, sharpctl trees): an "
                     "aggregation node down, or hosts outside the topology"},
    [WHY_GROUP_ALLOC] = {S_COMM, "group_alloc",
                         "the manager could not make the group (no group id, "
                         "no room on the tree)",
                         "free communicators that are no longer used; see "
                         "sharp_am's log"},
    [WHY_GROUP_JOIN] =
        {S_COMM, "group_join",
         "joining the group's aggregation nodes failed (a "
         "connection, the join, multicast)",
         "check the data network between the hosts and the "
         "aggregation nodes (SHARP_COLL_LOCAL_IP) and their logs"},
    [WHY_DEVICE] = {S_JOB, "device", "no usable device or transport",
                    "check the host's interfaces and SHARP_COLL_LOCAL_IP"},
    [WHY_OOB] = {S_COMM, "oob",
                 "an out-of-band collective of libsharp_coll (on MPI) failed",
                 "see the MPI library's errors"},
    [WHY_NOMEM] = {S_COMM, "no_memory", "out of memory", "more memory"},
    [WHY_INVALID] =
        {S_JOB, "invalid_setting",
         "libsharp_coll refused its settings or the call",
         "check the SHARP_COLL_* settings (SHARP_COLL_LOG_LEVEL=info "
         "names the one)"},
    [WHY_NOT_SUPP] = {S_COMM, "not_supported",
                      "sharp does not support this configuration",
                      "see libsharp_coll's log (SHARP_COLL_LOG_LEVEL=info)"},
    [WHY_LOCK] = {S_COMM, "lock", "the streaming lock is taken or denied",
                  "retry later"},
    [WHY_SHARP_ERROR] = {S_JOB, "sharp_error",
                         "libsharp_coll failed (an error it names in its log)",
                         "SHARP_COLL_LOG_LEVEL=info, and sharpd's log"},
    [WHY_INTERCOMM] = {S_COMM, "intercomm", "an intercommunicator",
                       "none: sharp reduces within one group of processes"},
    [WHY_MIN_RANKS] = {S_COMM, "min_ranks",
                       "fewer ranks than SHARP_MPI_MIN_RANKS=%s",
                       "set SHARP_MPI_MIN_RANKS=%s"},
    [WHY_ONE_RANK] = {S_COMM, "one_rank", "a communicator of one rank",
                      "none needed (nothing to combine)"},
    [WHY_ONE_NODE] =
        {S_COMM, "one_node",
         "all its ranks on one node: with node-local aggregation "
         "(SHARP_MPI_NODE_AGGR=1) the group would have one member",
         "none needed (MPI's shared memory is faster on one node); "
         "SHARP_MPI_NODE_AGGR=0 makes every process a member"},
    [WHY_FELL] = {S_CALL, "fell_back",
                  "the communicator's sharp group failed in the network; the "
                  "job goes on, on MPI",
                  "SHARP_MPI_REGROUP_CALLS tries a new group; the logs of "
                  "sharp_an, sharpd and sharp_am name the failure"},
    [WHY_NO_GROUP_YET] =
        {S_CALL, "no_group_yet",
         "a non-blocking or persistent collective on a communicator that has "
         "no sharp group yet (made by MPI_Comm_idup, or SHARP_MPI_GROUP_AT="
         "first): making one would wait for the other ranks",
         "a blocking collective on the communicator first makes its group"},
    [WHY_KIND_OFF] = {S_CALL, "switched_off", "switched off by SHARP_MPI_%s=0",
                      "set SHARP_MPI_%s=1"},
    [WHY_COUNT_ZERO] = {S_CALL, "no_data", "no data (count 0)", "none needed"},
    [WHY_USER_OP] = {S_CALL, "user_op",
                     "a user-defined op (or MPI_REPLACE, MPI_NO_OP)",
                     "a predefined op (MPI_SUM, MPI_MAX, ...)"},
    [WHY_DERIVED] = {S_CALL, "derived_datatype",
                     "a derived datatype in a reduction",
                     "reduce a predefined datatype (docs/mpi.md's table)"},
    [WHY_DTYPE] = {S_CALL, "datatype", "datatype not supported by sharp",
                   "a datatype of docs/mpi.md's table (no long double, "
                   "MPI_LOGICAL, MPI_2REAL, ...)"},
    [WHY_OP_DTYPE] = {S_CALL, "op_on_datatype",
                      "op not offloaded on this datatype (MPI does not define "
                      "it there, or sharp does not compute it as MPI does)",
                      "see docs/mpi.md's table of types and ops"},
    [WHY_MAX_BYTES] = {S_CALL, "max_bytes",
                       "message larger than SHARP_MPI_MAX_BYTES=%s",
                       "set SHARP_MPI_MAX_BYTES=%s"},
    [WHY_OVER_2G] = {S_CALL, "over_2gib", "message of 2 GiB or more",
                     "split the call"},
    [WHY_ARGS] = {S_CALL, "erroneous",
                  "erroneous arguments (a root outside the communicator, "
                  "MPI_IN_PLACE at a non-root): MPI reports them",
                  "fix the call"},
    [WHY_PERSISTENT] =
        {S_CALL, "persistent_unordered",
         "a persistent collective: MPI-4 lets every rank start them in its "
         "own order, and a group's operations meet in the order they start",
         "SHARP_MPI_PERSISTENT_ORDERED=1 if the program starts them in one "
         "order on every rank"},
    [WHY_COMM_FREED] =
        {S_CALL, "comm_freed",
         "a persistent collective started after the program freed its "
         "communicator: the layer left the communicator's group, and the "
         "operation runs on MPI on the layer's duplicate of it",
         "none needed (MPI allows it); a persistent collective made on a "
         "communicator that lives is offloaded"},
};

/* per reason: [0] communicators (counted by their rank 0), [1] calls,
 * [2] bytes */
static unsigned long long why_count[WHY_N][3];

const char *smpi_why_name(int why)
{
    return why >= 0 && why < WHY_N ? why_tab[why].name : "?";
}

int smpi_why_of_status(int rc)
{
    switch (rc) {
    case SHARP_COLL_SUCCESS: return WHY_OK;
    case SHARP_COLL_ENOT_SUPP: return WHY_NOT_SUPP;
    case SHARP_COLL_ENOMEM: return WHY_NOMEM;
    case SHARP_COLL_EGROUP_ALLOC:
    case SHARP_COLL_EGROUP_ID:
    case SHARP_COLL_EGROUP_TRIM: return WHY_GROUP_ALLOC;
    case SHARP_COLL_ECONN_TREE:
    case SHARP_COLL_EGROUP_JOIN:
    case SHARP_COLL_EGROUP_MCAST: return WHY_GROUP_JOIN;
    case SHARP_COLL_EQUOTA: return WHY_QUOTA;
    case SHARP_COLL_ESESS_INIT: return WHY_SHARPD;
    case SHARP_COLL_EDEV: return WHY_DEVICE;
    case SHARP_COLL_EINVAL: return WHY_INVALID;
    case SHARP_COLL_EJOB_CREATE: return WHY_JOB_REFUSED;
    case SHARP_COLL_ETREE_INFO:
    case SHARP_COLL_ENOTREE: return WHY_NO_TREE;
    case SHARP_COLL_EOOB: return WHY_OOB;
    case SHARP_COLL_ELOCK_FAILED:
    case SHARP_COLL_ELOCK_DENIED: return WHY_LOCK;
    case SHARP_COLL_ENO_RESOURCE: return WHY_NO_RESOURCE;
    default: return WHY_SHARP_ERROR;
    }
}

/* the settings' names of the collectives (SHARP_MPI_<name>) */
static const char *kind_setting(int kind)
{
    static const char *const k[C_N] = {"ALLREDUCE", "REDUCE",    "BARRIER",
                                       "BCAST",     "ALLREDUCE", "REDUCE",
                                       "BARRIER",   "BCAST"};
    return kind >= 0 && kind < C_N ? k[kind] : "<COLLECTIVE>";
}

/* why's explanation and remedy, their %s filled in for this call */
static void why_text(int why, int kind, int size, long bytes, char *expl,
                     size_t el, char *rem, size_t rl)
{
    char a[64] = "", b[64] = "";
    const char *sock;
    switch (why) {
    case WHY_SHARPD:
        sock = getenv("SHARP_COLL_SHARPD_SOCKET");
        snprintf(a, sizeof(a), "%s",
                 sock && *sock ? sock : SHP_PATH_SHARPD_SOCK);
        break;
    case WHY_MIN_RANKS:
        snprintf(a, sizeof(a), "%d", smpi_cfg.min_ranks);
        snprintf(b, sizeof(b), "%d", size);
        break;
    case WHY_KIND_OFF:
        snprintf(a, sizeof(a), "%s", kind_setting(kind));
        snprintf(b, sizeof(b), "%s", kind_setting(kind));
        break;
    case WHY_MAX_BYTES:
        snprintf(a, sizeof(a), "%zu", smpi_cfg.max_bytes);
        snprintf(b, sizeof(b), "%ld", bytes);
        break;
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(expl, el, why_tab[why].expl, a);
    snprintf(rem, rl, why_tab[why].remedy, b);
#pragma GCC diagnostic pop
}

/* What the notes keep of a communicator: its number, its size, the
 * reasons it has shown (bit per reason; per collective for calls). */
typedef struct why_comm {
    int num, size, rank;
    uint64_t seen, seen_kind[C_N];
} why_comm_t;

static int why_keyval = MPI_KEYVAL_INVALID;
static int why_next; /* the next communicator's number */

static int why_delete(MPI_Comm comm, int keyval, void *attr, void *extra)
{
    (void)comm;
    (void)keyval;
    (void)extra;
    free(attr);
    return MPI_SUCCESS;
}

void smpi_why_init(void)
{
    if (smpi_cfg.verbose >= 1 && why_keyval == MPI_KEYVAL_INVALID) {
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, why_delete, &why_keyval,
                                NULL);
        why_next = 1; /* the world is 0 */
    }
}

void smpi_why_fini(void)
{
    if (why_keyval != MPI_KEYVAL_INVALID) {
        void *w;
        int found = 0;
        PMPI_Comm_get_attr(MPI_COMM_WORLD, why_keyval, &w, &found);
        if (found) {
            PMPI_Comm_delete_attr(MPI_COMM_WORLD, why_keyval);
        }
        PMPI_Comm_free_keyval(&why_keyval);
    }
}

static why_comm_t *why_comm(MPI_Comm comm)
{
    why_comm_t *w = NULL;
    int found = 0;
    if (why_keyval == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL) {
        return NULL;
    }
    PMPI_Comm_get_attr(comm, why_keyval, &w, &found);
    if (found) {
        return w;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return NULL;
    }
    int inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_rank(comm, &w->rank);
    if (inter) {
        PMPI_Comm_remote_size(comm, &w->size);
    } else {
        PMPI_Comm_size(comm, &w->size);
    }
    w->num = comm == MPI_COMM_WORLD ? 0 : why_next++;
    PMPI_Comm_set_attr(comm, why_keyval, w);
    return w;
}

/* a datatype's and an op's names for a note ("" if none) */
static void call_args(MPI_Datatype dt, MPI_Op op, char *s, size_t n)
{
    char name[MPI_MAX_OBJECT_NAME] = "";
    int len = 0;
    *s = '\0';
    if (dt != MPI_DATATYPE_NULL) {
        if (PMPI_Type_get_name(dt, name, &len) != MPI_SUCCESS || len == 0) {
            snprintf(name, sizeof(name), "a derived datatype");
        }
        snprintf(s, n, " with %s", name);
    }
    if (op != MPI_OP_NULL) {
        static const struct {
            MPI_Op op;
            const char *name;
        } ops[] = {{MPI_MAX, "MPI_MAX"},       {MPI_MIN, "MPI_MIN"},
                   {MPI_SUM, "MPI_SUM"},       {MPI_PROD, "MPI_PROD"},
                   {MPI_LAND, "MPI_LAND"},     {MPI_BAND, "MPI_BAND"},
                   {MPI_LOR, "MPI_LOR"},       {MPI_BOR, "MPI_BOR"},
                   {MPI_LXOR, "MPI_LXOR"},     {MPI_BXOR, "MPI_BXOR"},
                   {MPI_MAXLOC, "MPI_MAXLOC"}, {MPI_MINLOC, "MPI_MINLOC"}};
        const char *on = "a user-defined op";
        for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
            if (ops[i].op == op) {
                on = ops[i].name;
            }
        }
        size_t l = strlen(s);
        snprintf(s + l, n - l, ", %s", on);
    }
}

static void why_call(int kind, long bytes, MPI_Comm comm, int why,
                     MPI_Datatype dt, MPI_Op op)
{
    if (why <= WHY_OK || why >= WHY_N) {
        why = WHY_SHARP_ERROR; /* every call to MPI has a reason */
    }
    why_count[why][1]++;
    why_count[why][2] += (unsigned long long)(bytes > 0 ? bytes : 0);
    if (why == WHY_THREAD_MULTIPLE) {
        return; /* said once at MPI_Init; no notes from several threads */
    }
    why_comm_t *w = why_comm(comm);
    if (w == NULL) {
        return;
    }
    int scope = why_tab[why].scope;
    uint64_t bit = 1ull << why;
    uint64_t *seen = scope == S_CALL ? &w->seen_kind[kind] : &w->seen;
    if (*seen & bit) {
        return;
    }
    *seen |= bit;
    if (w->rank != 0) {
        return;
    }
    if (!(w->seen & bit) || scope != S_CALL) {
        /* the communicator counted once for the reason */
        if (scope == S_CALL) {
            w->seen |= bit;
        }
        why_count[why][0]++;
    }
    char expl[256], rem[256], args[160];
    why_text(why, kind, w->size, bytes, expl, sizeof(expl), rem, sizeof(rem));
    if (scope != S_CALL) {
        smpi_note(1, "communicator %d (size %d): not offloaded: %s; %s", w->num,
                  w->size, expl, rem);
    } else {
        call_args(dt, op, args, sizeof(args));
        smpi_note(1, "%s%s on comm %d (size %d) goes to MPI: %s; %s",
                  smpi_coll_names[kind], args, w->num, w->size, expl, rem);
    }
}

/* the tables are the process's: one thread at a time */
void smpi_why_call(int kind, long bytes, MPI_Comm comm, int why,
                   MPI_Datatype dt, MPI_Op op)
{
    smpi_lock();
    why_call(kind, bytes, comm, why, dt, op);
    smpi_unlock();
}

void smpi_why_report(void)
{
    unsigned long long all[WHY_N][3];
    PMPI_Reduce(why_count, all, WHY_N * 3, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                MPI_COMM_WORLD);
    if (smpi.rank != 0) {
        return;
    }
    int any = 0;
    for (int w = 1; w < WHY_N; w++) {
        any |= all[w][0] + all[w][1] > 0;
    }
    if (!any) {
        fprintf(stderr, "sharp_mpi: not offloaded, because: nothing went to "
                        "MPI\n");
        return;
    }
    fprintf(stderr, "sharp_mpi: not offloaded, because %-11s %13s %12s %14s\n",
            "", "communicators", "calls", "bytes");
    for (int w = 1; w < WHY_N; w++) {
        if (all[w][0] + all[w][1] == 0) {
            continue;
        }
        char expl[256], rem[256];
        why_text(w, -1, 0, 0, expl, sizeof(expl), rem, sizeof(rem));
        fprintf(stderr, "sharp_mpi: why %-20s %13llu %12llu %14llu  %s\n",
                why_tab[w].name, all[w][0], all[w][1], all[w][2], expl);
    }
}

void smpi_fallback(int kind, long bytes, MPI_Comm comm, int why,
                   MPI_Datatype dt, MPI_Op op)
{
    SMPI_ADD(smpi.calls[kind][1], 1);
    SMPI_ADD(smpi.bytes[kind][1], (unsigned long long)(bytes > 0 ? bytes : 0));
    smpi_why_call(kind, bytes, comm, why, dt, op);
}
