/*
 * libsharp_mpi: every PMPI completion call, and the starts of persistent
 * operations: MPI_Start, MPI_Startall, MPI_Wait, MPI_Waitall,
 * MPI_Waitany, MPI_Waitsome, MPI_Test, MPI_Testall, MPI_Testany,
 * MPI_Testsome, MPI_Request_get_status and MPI_Request_free.
 *
 * The program's arrays mix the layer's operations (op.c: generalized
 * requests, and persistent handles of MPI's own) with MPI's own requests.
 * Every call progresses sharp first (progress.c); an array is handed to
 * PMPI with the handle of an active persistent operation of ours replaced
 * by its activation's generalized request.  Without an operation of ours
 * active anywhere each call is MPI's own, at the cost of one look.
 */
#include "mpi-coll/sharp_mpi_int.h"
#include "mpi-coll/nb.h"

#include <stdlib.h>

static int nb_api_start(MPI_Request *req)
{
    nb_op_t *o = smpi_nb_find(*req);
    if (o == NULL || !o->persistent) {
        return PMPI_Start(req);
    }
    if (o->active) {
        return MPI_ERR_REQUEST; /* started twice */
    }
    smpi_comm_call(o->st, o->comm, 0); /* (the others' in nb_comm) */
    smpi_nb_start(o);
    return MPI_SUCCESS;
}

API int MPI_Start(MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_start(req);
    smpi_unlock();
    return rc;
}

static int nb_api_startall(int n, MPI_Request reqs[])
{
    for (int i = 0; i < n; i++) {
        int rc = MPI_Start(&reqs[i]);
        if (rc != MPI_SUCCESS) {
            return rc;
        }
    }
    return MPI_SUCCESS;
}

API int MPI_Startall(int n, MPI_Request reqs[])
{
    smpi_lock();
    int rc = nb_api_startall(n, reqs);
    smpi_unlock();
    return rc;
}

/* Completion ------------------------------------------------------------------
 *
 * Every call progresses sharp first.  In the array handed to PMPI, the
 * handle of an active persistent operation of ours is replaced by its
 * activation's generalized request; after the call the handle is put back
 * (and the operation inactive if MPI completed the activation). */

typedef struct {
    int n;
    MPI_Request *sub;
    nb_op_t **ops; /* [n] ours (persistent and active) or NULL */
    int ours;      /* active operations of ours in the array */
    int others;    /* active requests not ours */
    MPI_Request one;
    nb_op_t *one_op;
} nb_set_t;

static int nb_set_make(nb_set_t *s, int n, MPI_Request reqs[])
{
    s->n = n;
    s->ours = s->others = 0;
    if (n <= 1) {
        s->sub = &s->one;
        s->ops = &s->one_op;
    } else {
        s->sub = malloc(sizeof(MPI_Request) * (size_t)n);
        s->ops = malloc(sizeof(nb_op_t *) * (size_t)n);
        if (s->sub == NULL || s->ops == NULL) {
            free(s->sub);
            free(s->ops);
            return MPI_ERR_NO_MEM;
        }
    }
    for (int i = 0; i < n; i++) {
        nb_op_t *o = smpi_nb_find(reqs[i]);
        s->sub[i] = reqs[i];
        s->ops[i] = NULL;
        if (o == NULL) {
            s->others += reqs[i] != MPI_REQUEST_NULL;
            continue;
        }
        if (o->active) {
            s->ours++;
        }
        if (o->persistent && o->active) {
            s->sub[i] = o->greq;
            s->ops[i] = o;
        }
    }
    return MPI_SUCCESS;
}

/* the handles back; an activation that MPI freed: the operation inactive */
static void nb_set_done(nb_set_t *s, MPI_Request reqs[])
{
    for (int i = 0; i < s->n; i++) {
        if (s->ops[i] == NULL) {
            reqs[i] = s->sub[i];
            continue;
        }
        if (s->sub[i] == MPI_REQUEST_NULL) {
            s->ops[i]->active = 0;
        }
        reqs[i] = s->ops[i]->handle;
    }
    if (s->sub != &s->one) {
        free(s->sub);
        free(s->ops);
    }
}

/* the set's operations of ours completed to MPI (their generalized
 * requests, done: complete) or, if not `complete`, left pending; with
 * in_status each status' MPI_ERROR written */
static void nb_set_ours(nb_set_t *s, MPI_Request reqs[], int complete,
                        int in_status, MPI_Status statuses[])
{
    int ignore = statuses == MPI_STATUSES_IGNORE;
    for (int i = 0; i < s->n; i++) {
        nb_op_t *o = smpi_nb_find(reqs[i]);
        if (o == NULL || !o->active) {
            continue;
        }
        if (complete) {
            PMPI_Wait(&s->sub[i], ignore ? MPI_STATUS_IGNORE : &statuses[i]);
        }
        if (in_status && !ignore) {
            statuses[i].MPI_ERROR = complete ? MPI_SUCCESS : MPI_ERR_PENDING;
        }
    }
}

/* Every request of the set at once, ours done (to MPI: their generalized
 * requests complete): MPI's requests first, in an array of their own
 * (test: only if all of them are complete), then ours.  MPICH 4.0.2's
 * MPI_Testall fails with MPI_ERR_IN_STATUS on some arrays that mix
 * generalized requests with others, so they are never mixed. */
static int nb_set_all(nb_set_t *s, MPI_Request reqs[], int test, int *flag,
                      MPI_Status statuses[])
{
    int n = s->n, k = 0, rc;
    int ignore = statuses == MPI_STATUSES_IGNORE;
    MPI_Request *oth = malloc(sizeof(MPI_Request) * (size_t)n + 1);
    int *at = malloc(sizeof(int) * (size_t)n + 1);
    /* MPI_STATUSES_IGNORE is NULL in Open MPI: not a failed malloc */
    MPI_Status *st = ignore ? MPI_STATUSES_IGNORE
                            : malloc(sizeof(MPI_Status) * (size_t)n + 1);
    if (oth == NULL || at == NULL || (!ignore && st == NULL)) {
        free(oth);
        free(at);
        if (!ignore) {
            free(st);
        }
        return MPI_ERR_NO_MEM;
    }
    for (int i = 0; i < n; i++) {
        nb_op_t *o = smpi_nb_find(reqs[i]);
        if (o == NULL || !o->active) {
            at[k] = i;
            oth[k++] = s->sub[i];
        }
    }
    if (test) {
        rc = PMPI_Testall(k, oth, flag, st);
    } else {
        int depth = smpi_release(); /* MPI's own wait */
        rc = PMPI_Waitall(k, oth, st);
        smpi_regain(depth);
        *flag = 1;
    }
    /* MPI_ERR_IN_STATUS (MPI_ERRORS_RETURN): MPI's handles as MPI left
     * them and each status' error given back; ours completed all the same
     * (MPI_SUCCESS), or MPI_ERR_PENDING if the test did not complete */
    int in_status = rc == MPI_ERR_IN_STATUS;
    if (rc == MPI_SUCCESS || in_status) {
        for (int j = 0; j < k; j++) {
            s->sub[at[j]] = oth[j];
            if (!ignore) {
                statuses[at[j]] = st[j];
            }
        }
        nb_set_ours(s, reqs, *flag || !test, in_status, statuses);
    }
    free(oth);
    free(at);
    if (!ignore) {
        free(st);
    }
    return rc;
}

/* operations of ours in the set whose sharp part is not done */
static int nb_set_pending(const nb_set_t *s, MPI_Request reqs[])
{
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        nb_op_t *o = smpi_nb_find(reqs[i]);
        k += o != NULL && o->active && !o->done;
    }
    return k;
}

/* the requests of the array that are not ours (MPI's) */
static int nb_others(int n, MPI_Request reqs[])
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        k += reqs[i] != MPI_REQUEST_NULL && smpi_nb_find(reqs[i]) == NULL;
    }
    return k;
}

static int nb_any_active(void)
{
    for (nb_op_t *o = smpi_nb_ops; o != NULL; o = o->next) {
        if (o->active) {
            return 1;
        }
    }
    return 0;
}

/* an operation of ours, in any array or none, whose sharp part is not done:
 * it may need this process (its later fragments are posted as earlier ones
 * complete), and the other ranks may wait for it */
static int nb_sharp_busy(void)
{
    for (nb_op_t *o = smpi_nb_ops; o != NULL; o = o->next) {
        if (o->active && !o->done) {
            return 1;
        }
    }
    return 0;
}

/* The completion calls: one loop for all.  Each turn progresses sharp (an
 * operation whose sharp part is done gets its generalized request
 * completed), then asks MPI with the test form of the call on the array
 * (active persistent handles of ours replaced by their activations); a
 * wait repeats until that is satisfied.  While one of our operations is in
 * flight anywhere a wait never blocks inside MPI (the operation's later
 * fragments need this process, and the other ranks may wait for them), nor
 * inside sharp (MPI's own requests, in this array or not, progress only in
 * MPI calls, and the other ranks may wait for those): a turn of each, then
 * a short sleep.  But MPI_Wait, MPI_Waitall and any wait of one request
 * whose array holds only ours wait for an operation of ours in it as a
 * blocking call does, in sharp's wait or on the node's segment, which give
 * MPI a turn once the wait has lasted long (smpi_mpi_progress), when it is
 * alone in flight or every other one needs nothing of this process
 * meanwhile (smpi_nb_wait_first).  Not with MPI's requests in the array:
 * the program waits for those too, and another rank's part of them (a
 * scan, an alltoall, a reduce with its own op) may need this process's
 * turns of MPI's progress while it would wait in sharp's (MPICH's
 * nonblocking3 at 5 ranks took 143 s for 14 s on plain MPI; 24 s with
 * turns).  With none of ours in flight the wait is MPI's own. */
enum { NB_ONE, NB_ALL, NB_ANY, NB_SOME };

/* the empty status (MPI 4.0, 3.7.3) */
static void nb_status_empty(MPI_Status *st)
{
    if (st == MPI_STATUS_IGNORE) {
        return;
    }
    st->MPI_SOURCE = MPI_ANY_SOURCE;
    st->MPI_TAG = MPI_ANY_TAG;
    st->MPI_ERROR = MPI_SUCCESS;
    PMPI_Status_set_elements(st, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(st, 0);
}

/* MPI's own wait of the set, nothing of ours busy: the layer's lock let
 * go meanwhile, unless ours are in the array: they are complete, so the
 * wait returns at once, and MPI runs their free callback inside it
 * (smpi_nb_free: the shared list) */
static int nb_mpi_wait(int form, nb_set_t *s, MPI_Request reqs[], int *index,
                       int *outcount, int indices[], MPI_Status *statuses)
{
    int rc, f = 0, n = s->n;
    int depth = s->ours != 0 ? 0 : smpi_release();
    switch (form) {
    case NB_ONE: rc = PMPI_Wait(s->sub, statuses); break;
    case NB_ALL:
        /* ours in the array are complete to MPI */
        rc = s->ours == 0 ? PMPI_Waitall(n, s->sub, statuses)
                          : nb_set_all(s, reqs, 0, &f, statuses);
        break;
    case NB_ANY: rc = PMPI_Waitany(n, s->sub, index, statuses); break;
    default: rc = PMPI_Waitsome(n, s->sub, outcount, indices, statuses);
    }
    smpi_regain(depth);
    nb_set_done(s, reqs);
    return rc;
}

/* MPI's test form of the call on the set (*f: it completed) */
static int nb_mpi_test(int form, nb_set_t *s, MPI_Request reqs[], int *f,
                       int *index, int *outcount, int indices[],
                       MPI_Status *statuses)
{
    int rc = MPI_SUCCESS, n = s->n;
    switch (form) {
    case NB_ONE: rc = PMPI_Test(s->sub, f, statuses); break;
    case NB_ALL:
        /* all or nothing: while one of ours is not done, nothing
         * completes (MPICH 4.0.2's MPI_Testall fails with
         * MPI_ERR_IN_STATUS on some arrays that mix generalized
         * requests with others: they are never mixed) */
        if (s->ours == 0) {
            rc = PMPI_Testall(n, s->sub, f, statuses);
        } else if (nb_set_pending(s, reqs) == 0) {
            rc = nb_set_all(s, reqs, 1, f, statuses);
        } else {
            smpi_nb_poke_mpi();
        }
        break;
    case NB_ANY:
        rc = PMPI_Testany(n, s->sub, index, f, statuses);
        if (rc == MPI_SUCCESS && *f && *index == MPI_UNDEFINED) {
            /* nothing active: an empty status, which MPICH 4.0.2's
             * MPI_Testany of more than one request does not write
             * (its MPI_Waitany does) */
            nb_status_empty(statuses);
        }
        break;
    default:
        rc = PMPI_Testsome(n, s->sub, outcount, indices, statuses);
        *f = *outcount != 0;
    }
    return rc;
}

static int nb_complete(int form, int wait, int n, MPI_Request reqs[], int *flag,
                       int *index, int *outcount, int indices[],
                       MPI_Status *statuses)
{
    unsigned long moved = smpi_nb_moved, seen = smpi_nb_completed - 1;
    int from = 0, others = nb_others(n, reqs);
    for (unsigned turn = 0;; turn++) {
        nb_set_t s;
        int rc, f = 0;
        smpi_nb_progress_all();
        if (smpi_nb_moved != moved) {
            moved = smpi_nb_moved;
            turn = 0; /* a node step moved on: its next part is near */
        }
        int busy = nb_sharp_busy();
        if (wait && busy && !others &&
            (form == NB_ONE || form == NB_ALL || n == 1) &&
            smpi_nb_wait_first(n, reqs, &from)) {
            continue; /* its part moved on: the next turn may complete it */
        }
        if (wait && busy && form == NB_ALL && !others &&
            seen == smpi_nb_completed) {
            /* nothing of the array's can have completed since the last
             * look (all ours, none done since): no new look at it */
            smpi_nb_poke_mpi();
            smpi_nb_idle(turn, NULL);
            continue;
        }
        seen = smpi_nb_completed;
        rc = nb_set_make(&s, n, reqs);
        others = s.others;
        if (rc != MPI_SUCCESS) {
            return rc;
        }
        if (wait && !busy) {
            return nb_mpi_wait(form, &s, reqs, index, outcount, indices,
                               statuses);
        }
        rc =
            nb_mpi_test(form, &s, reqs, &f, index, outcount, indices, statuses);
        nb_set_done(&s, reqs);
        if (flag != NULL) {
            *flag = f;
        }
        if (rc != MPI_SUCCESS || f || !wait) {
            return rc;
        }
        /* nothing yet: let the others run (2 cores may hold many ranks) */
        smpi_nb_idle(turn, NULL);
    }
}

static int nb_api_test(MPI_Request *req, int *flag, MPI_Status *status)
{
    if (!nb_any_active()) {
        return PMPI_Test(req, flag, status);
    }
    return nb_complete(NB_ONE, 0, 1, req, flag, NULL, NULL, NULL, status);
}

API int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    smpi_lock();
    int rc = nb_api_test(req, flag, status);
    smpi_unlock();
    return rc;
}

static int nb_api_testall(int n, MPI_Request reqs[], int *flag,
                          MPI_Status statuses[])
{
    if (!nb_any_active()) {
        return PMPI_Testall(n, reqs, flag, statuses);
    }
    return nb_complete(NB_ALL, 0, n, reqs, flag, NULL, NULL, NULL, statuses);
}

API int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status statuses[])
{
    smpi_lock();
    int rc = nb_api_testall(n, reqs, flag, statuses);
    smpi_unlock();
    return rc;
}

static int nb_api_testany(int n, MPI_Request reqs[], int *index, int *flag,
                          MPI_Status *status)
{
    if (!nb_any_active()) {
        return PMPI_Testany(n, reqs, index, flag, status);
    }
    return nb_complete(NB_ANY, 0, n, reqs, flag, index, NULL, NULL, status);
}

API int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag,
                    MPI_Status *status)
{
    smpi_lock();
    int rc = nb_api_testany(n, reqs, index, flag, status);
    smpi_unlock();
    return rc;
}

static int nb_api_testsome(int n, MPI_Request reqs[], int *outcount,
                           int indices[], MPI_Status statuses[])
{
    if (!nb_any_active()) {
        return PMPI_Testsome(n, reqs, outcount, indices, statuses);
    }
    return nb_complete(NB_SOME, 0, n, reqs, NULL, NULL, outcount, indices,
                       statuses);
}

API int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                     MPI_Status statuses[])
{
    smpi_lock();
    int rc = nb_api_testsome(n, reqs, outcount, indices, statuses);
    smpi_unlock();
    return rc;
}

static int nb_api_request_get_status(MPI_Request req, int *flag,
                                     MPI_Status *status)
{
    if (!nb_any_active()) {
        return PMPI_Request_get_status(req, flag, status);
    }
    nb_set_t s;
    smpi_nb_progress_all();
    int rc = nb_set_make(&s, 1, &req);
    if (rc == MPI_SUCCESS) {
        rc = PMPI_Request_get_status(s.sub[0], flag, status);
        nb_set_done(&s, &req);
    }
    return rc;
}

API int MPI_Request_get_status(MPI_Request req, int *flag, MPI_Status *status)
{
    smpi_lock();
    int rc = nb_api_request_get_status(req, flag, status);
    smpi_unlock();
    return rc;
}

API int MPI_Wait(MPI_Request *req, MPI_Status *status)
{
    smpi_lock();
    if (!nb_any_active()) {
        smpi_unlock();
        return PMPI_Wait(req, status);
    }
    int rc = nb_complete(NB_ONE, 1, 1, req, NULL, NULL, NULL, NULL, status);
    smpi_unlock();
    return rc;
}

API int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[])
{
    smpi_lock();
    if (!nb_any_active()) {
        smpi_unlock();
        return PMPI_Waitall(n, reqs, statuses);
    }
    int rc = nb_complete(NB_ALL, 1, n, reqs, NULL, NULL, NULL, NULL, statuses);
    smpi_unlock();
    return rc;
}

API int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *status)
{
    smpi_lock();
    if (!nb_any_active()) {
        smpi_unlock();
        return PMPI_Waitany(n, reqs, index, status);
    }
    int rc = nb_complete(NB_ANY, 1, n, reqs, NULL, index, NULL, NULL, status);
    smpi_unlock();
    return rc;
}

API int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                     MPI_Status statuses[])
{
    smpi_lock();
    if (!nb_any_active()) {
        smpi_unlock();
        return PMPI_Waitsome(n, reqs, outcount, indices, statuses);
    }
    int rc = nb_complete(NB_SOME, 1, n, reqs, NULL, NULL, outcount, indices,
                         statuses);
    smpi_unlock();
    return rc;
}

/* MPI_Request_free is local: an operation in flight completes in the
 * background (its buffers are the program's until then, as MPI says) and
 * is released then (smpi_nb_complete_greq); a completed one now.  The
 * generalized request's free callback releases a non-persistent
 * operation, so MPI is handed a copy of the handle, never o's own. */
static int nb_api_request_free(MPI_Request *req)
{
    nb_op_t *o = smpi_nb_find(*req);
    if (o == NULL) {
        return PMPI_Request_free(req);
    }
    *req = MPI_REQUEST_NULL;
    if (o->active && !o->done) {
        o->user_freed = 1;
        return MPI_SUCCESS;
    }
    int persistent = o->persistent;
    if (o->active) {
        MPI_Request r = o->greq;
        PMPI_Request_free(&r); /* smpi_nb_free: o gone, or inactive */
    }
    if (persistent) {
        MPI_Request h = o->handle;
        PMPI_Request_free(&h);
        smpi_nb_release(o);
    }
    return MPI_SUCCESS;
}

API int MPI_Request_free(MPI_Request *req)
{
    smpi_lock();
    int rc = nb_api_request_free(req);
    smpi_unlock();
    return rc;
}
