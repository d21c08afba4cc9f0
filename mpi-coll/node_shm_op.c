/*
 * The node-local step on shared memory: its operations (node_shm.h says
 * what it is for; the segment and the waits are node_shm.c's).
 *
 * Every rank counts operations alike (seq, starting at 1; the words start
 * at 0: operation 0 is finished everywhere).  An operation k:
 *
 *   reduce/gather/barrier  rank i > 0 writes slot i, stores arr[i] = k; the
 *                          leader waits for every arr[i] = k, folds (or hands
 *                          the slots out), writes the area, stores go = k;
 *                          rank i waits for go = k, copies the area out,
 *                          stores fin[i] = k
 *   bcast from root r      r waits for every fin[j] = k - 1, writes the
 *                          area, stores go = k; the others wait for go = k,
 *                          copy, store fin = k
 *
 * Reuse without further synchronisation (why no one overwrites what is
 * still read):
 * - slot i is read only by the leader, in a reduce/gather operation m,
 *   before it stores go = m; rank i writes slot i again, for an operation
 *   k > m, only after it saw go = m (the leader roots every reduce, and a
 *   rank ends every operation it does not root by waiting for go);
 * - the area of operation k - 1 is read by rank j before it stores
 *   fin[j] = k - 1 and, after that, arr[j] = k; whoever writes the area
 *   for operation k first waits for every arr[j] = k (reduce: the leader)
 *   or every fin[j] = k - 1 (bcast: the root), and the root of k has
 *   finished k - 1 itself;
 * - the words are stored with release (seq_cst) after the data and loaded
 *   with acquire before it is read.  Sequence numbers are 32 bits (a futex
 *   word) compared by signed difference, so they may wrap.
 */
#include "mpi-coll/node_shm.h"
#include "mpi-coll/node_shm_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Operations ---------------------------------------------------------------- */

/* A new operation; SHP_OK or the segment's failure. */
static shp_status_t smn_begin(smn_node_t *nd)
{
    if (atomic_load(&nd->hdr->fail) != 0) {
        return smn_failed(nd);
    }
    nd->seq++;
    nd->st.ops++;
    return SHP_OK;
}

/* Rank i > 0 arrives in the current fan-in: it leaves bytes of src in its
 * slot, marks its line and counts; the last to count wakes the leader. */
static void smn_arrive(smn_node_t *nd, const void *src, size_t bytes)
{
    if (bytes != 0) {
        memcpy(smn_slot(nd, nd->rank), src, bytes);
    }
    atomic_store_explicit(&nd->lines[nd->rank].arr, nd->seq,
                          memory_order_release);
    uint32_t c = atomic_fetch_add(&nd->in->count, 1) + 1;
    if (c == nd->in_target && atomic_load(&nd->in->sleepers) != 0) {
        smn_wake_all(&nd->in->count);
        nd->st.wakes++;
    }
}

/* The fan-in of the current operation: every rank i > 0 arrives; the
 * leader waits for them all. */
static shp_status_t smn_fan_in(smn_node_t *nd, const void *src, size_t bytes)
{
    nd->in_target += nd->n - 1;
    if (nd->rank != 0) {
        smn_arrive(nd, src, bytes);
        return SHP_OK;
    }
    return smn_wait(nd, &nd->in->count, &nd->in->sleepers, nd->in_target,
                    SMN_LATE, smn_deadline(nd, 1));
}

/* The fan-out of the current operation from root: it publishes bytes of
 * buf (already in the area if buf is the area) and code; the others copy
 * them out (buf NULL: not). */
static shp_status_t smn_fan_out(smn_node_t *nd, unsigned root, void *buf,
                                size_t bytes, int *code)
{
    smn_line_t *me = &nd->lines[nd->rank];
    if (nd->rank == root) {
        if (bytes != 0 && buf != nd->area) {
            memcpy(nd->area, buf, bytes);
        }
        nd->pub->code = code != NULL ? *code : 0;
        nd->pub->bytes = (uint32_t)bytes;
        smn_post(nd, &nd->pub->go, &nd->pub->go_sleepers, nd->seq);
        smn_post(nd, &me->fin, &me->fin_sleepers, nd->seq);
        return SHP_OK;
    }
    /* twice the timeout: the root, which may wait for the others, times
     * out first and names the rank that did not come */
    shp_status_t st = smn_wait(nd, &nd->pub->go, &nd->pub->go_sleepers, nd->seq,
                               root, smn_deadline(nd, 2));
    if (st != SHP_OK) {
        return st;
    }
    if (nd->pub->bytes != bytes) {
        st = SHP_ERR_MISMATCH; /* the callers disagree: nothing copied */
    } else if (buf != NULL && bytes != 0 && nd->pub->code == 0) {
        /* (a non-zero code carries no data: buf, which may be the
         * caller's in-place input for a redo, keeps what it held) */
        memcpy(buf, nd->area, bytes);
    }
    if (code != NULL) {
        *code = nd->pub->code;
    }
    smn_post(nd, &me->fin, &me->fin_sleepers, nd->seq);
    return st;
}

shp_status_t smn_reduce(smn_node_t *nd, const shp_reduce_desc_t *desc,
                        const void *src, size_t count, void *dst)
{
    size_t es = shp_reduce_elem_size(desc);
    if (es == 0 || shp_reduce_desc_check(desc, NULL) != SHP_OK) {
        return SHP_ERR_UNSUPPORTED;
    }
    if (count > nd->slot / es) {
        return SHP_ERR_TOO_LARGE;
    }
    if (nd->open || nd->nb || (nd->rank == 0 && dst == NULL) ||
        (count != 0 && src == NULL)) {
        return SHP_ERR_INVALID_PARAM;
    }
    shp_status_t st = smn_begin(nd);
    if (st == SHP_OK) {
        nd->open = 1;
        st = smn_fan_in(nd, src, count * es);
    }
    if (st != SHP_OK) {
        nd->open = 0;
        return st;
    }
    if (nd->rank != 0 || count == 0) {
        return SHP_OK;
    }
    nd->srcs[0] = src;
    for (unsigned i = 1; i < nd->n; i++) {
        nd->srcs[i] = smn_slot(nd, i);
    }
    st = shp_reduce_fold(desc, dst, nd->srcs, nd->n, count);
    if (st != SHP_OK) { /* the others wait for this operation */
        nd->open = 0;
        smn_fail(nd, nd->rank, SMN_FAIL_DEAD);
    }
    return st;
}

shp_status_t smn_gather(smn_node_t *nd, const void *src, size_t bytes,
                        const void **srcs)
{
    if (bytes > nd->slot) {
        return SHP_ERR_TOO_LARGE;
    }
    if (nd->open || nd->nb || (nd->rank == 0 && srcs == NULL) ||
        (bytes != 0 && src == NULL)) {
        return SHP_ERR_INVALID_PARAM;
    }
    shp_status_t st = smn_begin(nd);
    if (st == SHP_OK) {
        nd->open = 1;
        st = smn_fan_in(nd, src, bytes);
    }
    if (st != SHP_OK) {
        nd->open = 0;
        return st;
    }
    if (nd->rank != 0) {
        return SHP_OK;
    }
    srcs[0] = src;
    for (unsigned i = 1; i < nd->n; i++) {
        srcs[i] = smn_slot(nd, i);
    }
    return SHP_OK;
}

shp_status_t smn_result(smn_node_t *nd, void *buf, size_t bytes, int *code)
{
    if (!nd->open) {
        return SHP_ERR_INVALID_PARAM;
    }
    nd->open = 0;
    if (atomic_load(&nd->hdr->fail) != 0) {
        return smn_failed(nd);
    }
    if (bytes > nd->slot || (nd->rank == 0 && bytes != 0 && buf == NULL)) {
        /* the others wait for this operation: fail it for them too */
        smn_fail(nd, nd->rank, SMN_FAIL_DEAD);
        return SHP_ERR_INVALID_PARAM;
    }
    return smn_fan_out(nd, 0, buf, bytes, code);
}

/* Whole collectives -------------------------------------------------------- */

shp_status_t smn_allreduce(smn_node_t *nd, const shp_reduce_desc_t *desc,
                           const void *src, void *dst, size_t count,
                           smn_leader_fn_t fn, void *arg, int *code)
{
    size_t es = shp_reduce_elem_size(desc);
    size_t chunk = smn_chunk_count(nd, desc);
    int rc = 0;
    if (es == 0 || chunk == 0) {
        return SHP_ERR_UNSUPPORTED;
    }
    for (size_t off = 0; off < count && rc == 0;) {
        size_t m = count - off < chunk ? count - off : chunk;
        const char *s = (const char *)src + off * es;
        char *d = (char *)dst + off * es;
        shp_status_t st = smn_reduce(nd, desc, s, m, d);
        if (st == SHP_OK && nd->rank == 0 && fn != NULL) {
            rc = fn(arg, d, m, off);
        }
        if (st != SHP_OK) {
            return st;
        }
        st = smn_result(nd, d, m * es, &rc);
        if (st != SHP_OK) {
            return st;
        }
        off += m;
    }
    if (code != NULL) {
        *code = rc;
    }
    return SHP_OK;
}

shp_status_t smn_bcast(smn_node_t *nd, void *buf, size_t bytes, unsigned root)
{
    if (root >= nd->n || nd->open || nd->nb || (bytes != 0 && buf == NULL)) {
        return SHP_ERR_INVALID_PARAM;
    }
    for (size_t off = 0; off < bytes;) {
        size_t m = bytes - off < nd->slot ? bytes - off : nd->slot;
        shp_status_t st = smn_begin(nd);
        if (st != SHP_OK) {
            return st;
        }
        if (nd->rank == root) { /* everyone done with the area */
            uint64_t deadline = smn_deadline(nd, 1);
            for (unsigned j = 0; j < nd->n && st == SHP_OK; j++) {
                smn_line_t *l = &nd->lines[j];
                if (j != root) {
                    st = smn_wait(nd, &l->fin, &l->fin_sleepers, nd->seq - 1, j,
                                  deadline);
                }
            }
        }
        if (st == SHP_OK) {
            st = smn_fan_out(nd, root, (char *)buf + off, m, NULL);
        }
        if (st != SHP_OK) {
            return st;
        }
        off += m;
    }
    return SHP_OK;
}

shp_status_t smn_barrier(smn_node_t *nd, smn_leader_fn_t fn, void *arg,
                         int *code)
{
    if (nd->open || nd->nb) {
        return SHP_ERR_INVALID_PARAM;
    }
    int rc = 0;
    shp_status_t st = smn_begin(nd);
    if (st == SHP_OK) {
        st = smn_fan_in(nd, NULL, 0);
    }
    if (st == SHP_OK && nd->rank == 0 && fn != NULL) {
        rc = fn(arg, NULL, 0, 0);
    }
    if (st == SHP_OK) {
        st = smn_fan_out(nd, 0, NULL, 0, &rc);
    }
    if (st == SHP_OK && code != NULL) {
        *code = rc;
    }
    return st;
}

/* Non-blocking steps -------------------------------------------------------
 *
 * The same operation as smn_reduce/smn_gather + smn_result (the same words,
 * the same reuse rules), cut where the blocking form would wait: arriving
 * never waits; the leader's smn_nb_test_in and the others' smn_nb_test_out
 * look at the words once and return SHP_INPROGRESS if the peer has not
 * stored yet.  While a step is pending, the peer it waits for is checked
 * for life (and the timeout) at most once per period_ms, so that a test
 * called in a loop costs a load, not a syscall. */

/* Has the peer that a pending step waits for (SMN_LATE: the fan-in's)
 * died, or the step's time run out?  SHP_INPROGRESS if neither (or not
 * time to look again yet). */
static shp_status_t smn_nb_check(smn_node_t *nd, unsigned peer)
{
    if (atomic_load(&nd->hdr->fail) != 0) {
        nd->nb = 0;
        return smn_failed(nd);
    }
    uint64_t now = smn_now_ns();
    if (now < nd->nb_check_at) {
        return SHP_INPROGRESS;
    }
    nd->nb_check_at = now + (uint64_t)nd->o.period_ms * 1000000u;
    int dead;
    peer = smn_blame(nd, peer, &dead);
    if (dead) {
        nd->nb = 0;
        return smn_fail(nd, peer, SMN_FAIL_DEAD);
    }
    if (now >= nd->nb_deadline) {
        nd->nb = 0;
        return smn_fail(nd, peer, SMN_FAIL_TIMEOUT);
    }
    return SHP_INPROGRESS;
}

shp_status_t smn_nb_arrive(smn_node_t *nd, const void *src, size_t bytes)
{
    if (nd->open || nd->nb || bytes > nd->slot || (bytes != 0 && src == NULL)) {
        return SHP_ERR_INVALID_PARAM;
    }
    shp_status_t st = smn_begin(nd);
    if (st != SHP_OK) {
        return st;
    }
    nd->nb = 1;
    nd->in_target += nd->n - 1;
    nd->nb_src = src;
    nd->nb_bytes = bytes;
    /* as the blocking form: the leader's fan-in one timeout, the others'
     * wait for the publication two (the leader names the late rank) */
    nd->nb_deadline = smn_deadline(nd, nd->rank == 0 ? 1 : 2);
    nd->nb_check_at = smn_now_ns() + (uint64_t)nd->o.spin_ns;
    if (nd->rank != 0) {
        smn_arrive(nd, src, bytes);
    }
    return SHP_OK;
}

shp_status_t smn_nb_test_in(smn_node_t *nd)
{
    if (nd->rank != 0 || nd->nb == 0) {
        return SHP_ERR_INVALID_PARAM;
    }
    if (nd->nb == 2) {
        return SHP_OK;
    }
    if (!reached(atomic_load_explicit(&nd->in->count, memory_order_acquire),
                 nd->in_target)) {
        return smn_nb_check(nd, SMN_LATE);
    }
    if (atomic_load(&nd->hdr->fail) != 0) {
        nd->nb = 0;
        return smn_failed(nd);
    }
    nd->nb = 2;
    return SHP_OK;
}

shp_status_t smn_nb_fold(smn_node_t *nd, const shp_reduce_desc_t *desc,
                         size_t count, void *dst)
{
    size_t es = shp_reduce_elem_size(desc);
    if (nd->rank != 0 || nd->nb != 2 || es == 0 || count * es != nd->nb_bytes ||
        (count != 0 && dst == NULL)) {
        return SHP_ERR_INVALID_PARAM;
    }
    if (count == 0) {
        return SHP_OK;
    }
    nd->srcs[0] = nd->nb_src;
    for (unsigned i = 1; i < nd->n; i++) {
        nd->srcs[i] = smn_slot(nd, i);
    }
    return shp_reduce_fold(desc, dst, nd->srcs, nd->n, count);
}

shp_status_t smn_nb_srcs(smn_node_t *nd, const void **srcs)
{
    if (nd->rank != 0 || nd->nb != 2 || srcs == NULL) {
        return SHP_ERR_INVALID_PARAM;
    }
    srcs[0] = nd->nb_src;
    for (unsigned i = 1; i < nd->n; i++) {
        srcs[i] = smn_slot(nd, i);
    }
    return SHP_OK;
}

shp_status_t smn_nb_publish(smn_node_t *nd, const void *buf, size_t bytes,
                            int code)
{
    if (nd->rank != 0 || nd->nb != 2) {
        return SHP_ERR_INVALID_PARAM;
    }
    nd->nb = 0;
    if (atomic_load(&nd->hdr->fail) != 0) {
        return smn_failed(nd);
    }
    if (bytes > nd->slot || (bytes != 0 && buf == NULL)) {
        smn_fail(nd, nd->rank, SMN_FAIL_DEAD); /* the others wait for it */
        return SHP_ERR_INVALID_PARAM;
    }
    return smn_fan_out(nd, 0, (void *)buf, bytes, &code);
}

shp_status_t smn_nb_test_out(smn_node_t *nd, void *buf, size_t bytes, int *code)
{
    if (nd->rank == 0 || nd->nb != 1) {
        return SHP_ERR_INVALID_PARAM;
    }
    if (!reached(atomic_load_explicit(&nd->pub->go, memory_order_acquire),
                 nd->seq)) {
        return smn_nb_check(nd, 0);
    }
    nd->nb = 0;
    /* published: smn_fan_out finds it so at once, copies, and finishes */
    return smn_fan_out(nd, 0, buf, bytes, code);
}

int smn_nb_pending(const smn_node_t *nd)
{
    return nd->nb != 0;
}

/* the word a pending step waits on, its sleepers and its target; 0: the
 * step awaits nothing of the others */
static int smn_nb_awaited(smn_node_t *nd, _Atomic uint32_t **w,
                          _Atomic uint32_t **sleepers, uint32_t *target)
{
    if (nd->nb != 1) {
        return 0;
    }
    if (nd->rank == 0) {
        *w = &nd->in->count;
        *sleepers = &nd->in->sleepers;
        *target = nd->in_target;
    } else {
        *w = &nd->pub->go;
        *sleepers = &nd->pub->go_sleepers;
        *target = nd->seq;
    }
    return 1;
}

int smn_nb_await(smn_node_t *nd, smn_nb_await_t *a)
{
    if (!smn_nb_awaited(nd, &a->w, &a->sleepers, &a->target)) {
        return 0; /* nothing awaited from the others */
    }
    a->fail = &nd->hdr->fail;
    return 1;
}

int smn_nb_sleep(const smn_nb_await_t *a, uint64_t max_ns)
{
    struct timespec ts = {(time_t)(max_ns / 1000000000u),
                          (long)(max_ns % 1000000000u)};
    int slept = 0;
    atomic_fetch_add(a->sleepers, 1);
    uint32_t v = atomic_load(a->w);
    if (!reached(v, a->target) && atomic_load(a->fail) == 0) {
        slept = 1;
        syscall(SYS_futex, (uint32_t *)a->w, FUTEX_WAIT, v, &ts, NULL, 0);
    }
    atomic_fetch_sub(a->sleepers, 1);
    return slept;
}

void smn_nb_slept(smn_node_t *nd)
{
    nd->st.sleeps++;
}

void smn_nb_wait(smn_node_t *nd)
{
    _Atomic uint32_t *w, *sleepers;
    uint32_t target;
    if (smn_nb_awaited(nd, &w, &sleepers, &target)) {
        /* (a failure is the next test's to say) */
        (void)smn_wait(nd, w, sleepers, target, nd->rank == 0 ? SMN_LATE : 0,
                       nd->nb_deadline);
    }
}
