/*
 * The node-local step on shared memory (node_shm.h says what it is for):
 * its segment and how a rank waits on it; the operations on it are
 * node_shm_op.c's, what the two share node_shm_int.h.
 *
 * The segment, made by the leader with shm_open (a random name, O_EXCL,
 * mode 0600) and unlinked once every rank attached:
 *
 *   header    magic, version, sizes, cookie, ranks attached, failure word
 *   pub       go (the last operation published), its code and length
 *   lines[n]  one cache line per rank: arr (the last operation it arrived
 *             at: its contribution is in its slot), fin (the last operation
 *             it finished: the published data copied out), its pid
 *   area      the published data (a result, a bcast's chunk), slot_bytes
 *   slots[n]  each rank's contribution, slot_bytes each
 *
 * Waiting: spin for spin_ns, look between sched_yield calls for yield_ns,
 * then sleep on the word's futex (FUTEX_WAIT on
 * the shared word) in slices of period_ms; each word has a count of
 * sleepers beside it, and whoever stores a word makes the wake syscall
 * only if that count is not 0 (waiter: count++, load word; storer: store
 * word, load count; all seq_cst, so one of the two sees the other).
 * Between slices the waiter checks that the rank it waits for is alive (a
 * pidfd: readable once the process ended, zombie or not; kill(pid, 0) and
 * /proc where pidfds are missing; no check across pid namespaces) and the
 * timeout (one deadline for a whole fan-in; twice the timeout for the
 * root's publication, so that the root times out first and names the rank
 * that did not come).  A dead or late rank, or a failure another rank
 * found, fails the segment: the failure word (reason, rank) is set once,
 * every futex word is woken, and every later call returns the error.  A
 * sleeper that just missed that wake sees it at the end of its slice.
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

void smn_opts_default(smn_opts_t *o)
{
    o->slot_bytes = 64 * 1024;
    o->spin_ns = 2000;
    o->yield_ns = 2000000;
    o->timeout_ms = 30000;
    o->period_ms = 100;
    o->progress = NULL;
}

/* Helpers ------------------------------------------------------------------ */

uint64_t smn_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t smn_seg_bytes(unsigned n, size_t slot)
{
    return (uint64_t)3 * SMN_LINE + (uint64_t)n * SMN_LINE +
           (uint64_t)(n + 1) * slot;
}

static uint64_t smn_self_pidns(void)
{
    struct stat sb;
    return stat("/proc/self/ns/pid", &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

void smn_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* store a word and wake its sleepers, if any */
void smn_post(smn_node_t *nd, _Atomic uint32_t *w, _Atomic uint32_t *sleepers,
              uint32_t v)
{
    atomic_store(w, v);
    if (atomic_load(sleepers) != 0) {
        smn_wake_all(w);
        nd->st.wakes++;
    }
}

shp_status_t smn_failed(const smn_node_t *nd)
{
    uint32_t f = atomic_load(&nd->hdr->fail);
    return f >> 16 == SMN_FAIL_TIMEOUT ? SHP_ERR_TIMED_OUT
                                       : SHP_ERR_GROUP_FAILED;
}

/* fail the segment for everyone (the first reason found stays) */
shp_status_t smn_fail(smn_node_t *nd, unsigned peer, uint32_t why)
{
    uint32_t none = 0;
    atomic_compare_exchange_strong(&nd->hdr->fail, &none,
                                   why << 16 | (peer + 1));
    smn_wake_all(&nd->pub->go);
    smn_wake_all(&nd->in->count);
    for (unsigned i = 0; i < nd->n; i++) {
        smn_wake_all(&nd->lines[i].fin);
    }
    return smn_failed(nd);
}

/* a process that ended, zombie or not (kill(pid, 0) does not tell) */
static int smn_proc_ended(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) {
        return 1;
    }
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT;
    }
    ssize_t len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0) {
        return 0;
    }
    buf[len] = '\0';
    const char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

static int smn_peer_alive(smn_node_t *nd, unsigned peer)
{
    smn_line_t *l = &nd->lines[peer];
    pid_t pid = atomic_load(&l->pid);
    if (pid <= 0 || nd->pidns == 0 || l->pidns != nd->pidns) {
        return 1; /* not attached yet, or not ours to see: the timeout */
    }
    if (nd->pidfd[peer] == -1) {
#ifdef SYS_pidfd_open
        long fd = syscall(SYS_pidfd_open, pid, 0);
        if (fd < 0 && errno == ESRCH) {
            return 0;
        }
        nd->pidfd[peer] = fd >= 0 ? (int)fd : -2;
#else
        nd->pidfd[peer] = -2;
#endif
    }
    if (nd->pidfd[peer] == -2) {
        return !smn_proc_ended(pid);
    }
    struct pollfd p = {.fd = nd->pidfd[peer], .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

/* The rank a wait on peer holds responsible: peer itself, or of a fan-in's
 * late ranks the first found dead, else the first (if every rank stored
 * its word, one has not counted yet: the last); *dead if it died. */
unsigned smn_blame(smn_node_t *nd, unsigned peer, int *dead)
{
    if (peer != SMN_LATE) {
        *dead = !smn_peer_alive(nd, peer);
        return peer;
    }
    unsigned first = SMN_LATE;
    *dead = 0;
    for (unsigned i = 1; i < nd->n; i++) {
        if (reached(atomic_load(&nd->lines[i].arr), nd->seq)) {
            continue;
        }
        if (!smn_peer_alive(nd, i)) {
            *dead = 1;
            return i;
        }
        if (first == SMN_LATE) {
            first = i;
        }
    }
    return first != SMN_LATE ? first : nd->n - 1;
}

/* a deadline `times` timeouts from now */
uint64_t smn_deadline(const smn_node_t *nd, unsigned times)
{
    if (nd->o.timeout_ms == 0) { /* none: as long as the peer lives */
        return UINT64_MAX;
    }
    return smn_now_ns() + (uint64_t)times * nd->o.timeout_ms * 1000000u;
}

/* One look of a wait before it sleeps: 1 (and *st) if it is over, *w
 * having reached target or the segment failed. */
static int smn_looked(smn_node_t *nd, _Atomic uint32_t *w, uint32_t target,
                      shp_status_t *st)
{
    if (reached(atomic_load_explicit(w, memory_order_acquire), target)) {
        nd->st.spins++;
        *st = SHP_OK;
        return 1;
    }
    if (atomic_load_explicit(&nd->hdr->fail, memory_order_relaxed)) {
        *st = smn_failed(nd);
        return 1;
    }
    return 0;
}

/* Wait until *w reaches target, peer being the rank that stores it
 * (SMN_LATE: the fan-in's), until the deadline. */
shp_status_t smn_wait(smn_node_t *nd, _Atomic uint32_t *w,
                      _Atomic uint32_t *sleepers, uint32_t target,
                      unsigned peer, uint64_t deadline)
{
    shp_status_t st;
    uint64_t spin_end = smn_now_ns() + nd->o.spin_ns;
    for (unsigned i = 1;; i++) {
        if (smn_looked(nd, w, target, &st)) {
            return st;
        }
        if (i % 64 == 0 && smn_now_ns() >= spin_end) {
            break;
        }
        smn_relax();
    }
    if (nd->o.yield_ns != 0) { /* give the core away while looking */
        uint64_t yield_end = smn_now_ns() + nd->o.yield_ns;
        do {
            sched_yield();
            if (smn_looked(nd, w, target, &st)) {
                return st;
            }
            if (nd->o.progress != NULL) {
                nd->o.progress();
            }
        } while (smn_now_ns() < yield_end);
    }
    for (;;) {
        uint64_t now = smn_now_ns();
        uint64_t slice = (uint64_t)nd->o.period_ms * 1000000u;
        if (nd->o.progress != NULL) {
            nd->o.progress();
            slice = slice < 1000000u ? slice : 1000000u;
        }
        if (now < deadline && deadline - now < slice) {
            slice = deadline - now;
        }
        struct timespec ts = {(time_t)(slice / 1000000000u),
                              (long)(slice % 1000000000u)};
        atomic_fetch_add(sleepers, 1);
        uint32_t v = atomic_load(w);
        if (!reached(v, target) && atomic_load(&nd->hdr->fail) == 0 &&
            now < deadline) {
            nd->st.sleeps++;
            syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
        }
        atomic_fetch_sub(sleepers, 1);
        if (reached(atomic_load(w), target)) {
            return SHP_OK;
        }
        if (atomic_load(&nd->hdr->fail) != 0) {
            return smn_failed(nd);
        }
        int dead;
        unsigned who = smn_blame(nd, peer, &dead);
        if (dead) {
            return smn_fail(nd, who, SMN_FAIL_DEAD);
        }
        if (smn_now_ns() >= deadline) {
            return smn_fail(nd, who, SMN_FAIL_TIMEOUT);
        }
    }
}

char *smn_slot(const smn_node_t *nd, unsigned i)
{
    return nd->slots + (size_t)i * nd->slot;
}

/* Setup ------------------------------------------------------------------ */

static shp_status_t smn_node_new(unsigned n, unsigned rank, const smn_opts_t *o,
                                 smn_node_t **out)
{
    smn_node_t *nd = calloc(1, sizeof(*nd));
    if (nd == NULL) {
        return SHP_ERR_NO_MEMORY;
    }
    nd->pidfd = malloc(sizeof(int) * n);
    nd->srcs = malloc(sizeof(void *) * n);
    if (nd->pidfd == NULL || nd->srcs == NULL) {
        free(nd->pidfd);
        free(nd->srcs);
        free(nd);
        return SHP_ERR_NO_MEMORY;
    }
    for (unsigned i = 0; i < n; i++) {
        nd->pidfd[i] = -1;
    }
    nd->n = n;
    nd->rank = rank;
    nd->o = *o;
    if (nd->o.period_ms == 0) {
        nd->o.period_ms = 1; /* sleep in slices, never spin on a 0 timeout */
    }
    nd->pidns = smn_self_pidns();
    *out = nd;
    return SHP_OK;
}

/* the segment's parts, once base and sizes are known */
static void smn_layout(smn_node_t *nd)
{
    nd->hdr = (smn_hdr_t *)nd->base;
    nd->pub = (smn_pub_t *)(nd->base + SMN_LINE);
    nd->in = (smn_in_t *)(nd->base + 2 * SMN_LINE);
    nd->lines = (smn_line_t *)(nd->base + 3 * SMN_LINE);
    nd->area = nd->base + 3 * SMN_LINE + (size_t)nd->n * SMN_LINE;
    nd->slots = nd->area + nd->slot;
}

static void smn_join(smn_node_t *nd)
{
    smn_line_t *l = &nd->lines[nd->rank];
    l->pidns = nd->pidns;
    atomic_store(&l->pid, (int32_t)getpid());
    atomic_fetch_add(&nd->hdr->attached, 1);
}

shp_status_t smn_create(unsigned nranks, const smn_opts_t *o, smn_node_t **node,
                        smn_handle_t *h)
{
    size_t slot = (o->slot_bytes + SMN_LINE - 1) / SMN_LINE * SMN_LINE;
    if (nranks == 0 || nranks > SMN_MAX_RANKS || slot == 0 ||
        slot > UINT32_MAX || o->slot_bytes > UINT32_MAX) {
        return SHP_ERR_INVALID_PARAM;
    }
    uint64_t bytes = smn_seg_bytes(nranks, slot), rnd[2];
    if (bytes > SIZE_MAX / 2) {
        return SHP_ERR_TOO_LARGE;
    }
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        return SHP_ERR_IO;
    }
    smn_node_t *nd;
    shp_status_t st = smn_node_new(nranks, 0, o, &nd);
    if (st != SHP_OK) {
        return st;
    }
    snprintf(nd->name, sizeof(nd->name), SMN_PREFIX "%d-%016llx", (int)getpid(),
             (unsigned long long)rnd[0]);
    int fd = shm_open(nd->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        st = errno == EEXIST ? SHP_ERR_EXISTS : SHP_ERR_IO;
        goto err_node;
    }
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)bytes) != 0) {
        st = errno == ENOSPC ? SHP_ERR_NO_RESOURCE : SHP_ERR_IO;
        goto err_unlink;
    }
    nd->base =
        mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (nd->base == MAP_FAILED) {
        st = SHP_ERR_NO_RESOURCE;
        goto err_unlink;
    }
    close(fd);
    nd->seg_bytes = (size_t)bytes;
    nd->slot = slot;
    smn_layout(nd);
    smn_hdr_t *hd = nd->hdr;
    hd->version = SMN_VERSION;
    hd->nranks = nranks;
    hd->seg_bytes = bytes;
    hd->cookie = rnd[1];
    hd->slot_bytes = (uint32_t)slot;
    smn_join(nd);
    atomic_thread_fence(memory_order_release);
    hd->magic = SMN_MAGIC;
    memset(h, 0, sizeof(*h));
    memcpy(h->name, nd->name, sizeof(h->name));
    h->seg_bytes = bytes;
    h->cookie = rnd[1];
    h->nranks = nranks;
    h->slot_bytes = (uint32_t)slot;
    *node = nd;
    return SHP_OK;

err_unlink:
    close(fd);
    shm_unlink(nd->name);
err_node:
    free(nd->pidfd);
    free(nd->srcs);
    free(nd);
    return st;
}

/* the mapped header against the handle */
static shp_status_t smn_check_hdr(const smn_hdr_t *hd, const smn_handle_t *h)
{
    if (hd->magic != SMN_MAGIC) {
        return SHP_ERR_PROTO;
    }
    if (hd->version != SMN_VERSION) {
        return SHP_ERR_VERSION;
    }
    if (hd->nranks != h->nranks || hd->slot_bytes != h->slot_bytes ||
        hd->seg_bytes != h->seg_bytes || hd->cookie != h->cookie) {
        return SHP_ERR_MISMATCH;
    }
    return SHP_OK;
}

/* the handle itself, and the file it names */
static shp_status_t smn_check_file(const smn_handle_t *h, int fd)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        return SHP_ERR_IO;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid() ||
        (sb.st_mode & 07777) != 0600) {
        return SHP_ERR_PERM;
    }
    if ((uint64_t)sb.st_size != h->seg_bytes) {
        return SHP_ERR_MISMATCH;
    }
    return SHP_OK;
}

shp_status_t smn_attach(const smn_handle_t *h, unsigned rank,
                        const smn_opts_t *o, smn_node_t **node)
{
    if (memchr(h->name, '\0', sizeof(h->name)) == NULL ||
        strncmp(h->name, SMN_PREFIX, strlen(SMN_PREFIX)) != 0 ||
        strchr(h->name + 1, '/') != NULL) {
        return SHP_ERR_INVALID_PARAM;
    }
    if (h->nranks == 0 || h->nranks > SMN_MAX_RANKS || rank == 0 ||
        rank >= h->nranks || h->slot_bytes == 0 ||
        h->slot_bytes % SMN_LINE != 0 ||
        h->seg_bytes != smn_seg_bytes(h->nranks, h->slot_bytes)) {
        return SHP_ERR_INVALID_PARAM;
    }
    smn_node_t *nd;
    shp_status_t st = smn_node_new(h->nranks, rank, o, &nd);
    if (st != SHP_OK) {
        return st;
    }
    memcpy(nd->name, h->name, sizeof(nd->name));
    int fd = shm_open(nd->name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        st = errno == ENOENT ? SHP_ERR_NOT_FOUND : SHP_ERR_IO;
        goto err_node;
    }
    st = smn_check_file(h, fd);
    if (st == SHP_OK) {
        nd->base = mmap(NULL, (size_t)h->seg_bytes, PROT_READ | PROT_WRITE,
                        MAP_SHARED, fd, 0);
        st = nd->base == MAP_FAILED ? SHP_ERR_NO_RESOURCE : SHP_OK;
    }
    close(fd);
    if (st != SHP_OK) {
        goto err_node;
    }
    nd->seg_bytes = (size_t)h->seg_bytes;
    nd->slot = h->slot_bytes;
    smn_layout(nd);
    st = smn_check_hdr(nd->hdr, h);
    if (st == SHP_OK && atomic_load(&nd->lines[rank].pid) != 0) {
        st = SHP_ERR_EXISTS; /* this node rank attached already */
    }
    if (st != SHP_OK) {
        goto err_unmap;
    }
    atomic_thread_fence(memory_order_acquire);
    smn_join(nd);
    *node = nd;
    return SHP_OK;

err_unmap:
    munmap(nd->base, nd->seg_bytes);
err_node:
    free(nd->pidfd);
    free(nd->srcs);
    free(nd);
    return st;
}

shp_status_t smn_unlink(smn_node_t *nd)
{
    if (atomic_load(&nd->hdr->attached) < nd->n) {
        return SHP_ERR_BUSY;
    }
    if (atomic_exchange(&nd->hdr->unlinked, 1) == 0 &&
        shm_unlink(nd->name) != 0 && errno != ENOENT) {
        return SHP_ERR_IO;
    }
    return SHP_OK;
}

void smn_destroy(smn_node_t *nd)
{
    if (nd == NULL) {
        return;
    }
    if (atomic_exchange(&nd->hdr->unlinked, 1) == 0) {
        shm_unlink(nd->name);
    }
    munmap(nd->base, nd->seg_bytes);
    for (unsigned i = 0; i < nd->n; i++) {
        if (nd->pidfd[i] >= 0) {
            close(nd->pidfd[i]);
        }
    }
    free(nd->pidfd);
    free(nd->srcs);
    free(nd);
}

unsigned smn_rank(const smn_node_t *nd)
{
    return nd->rank;
}

unsigned smn_size(const smn_node_t *nd)
{
    return nd->n;
}

size_t smn_slot_bytes(const smn_node_t *nd)
{
    return nd->slot;
}

size_t smn_chunk_count(const smn_node_t *nd, const shp_reduce_desc_t *desc)
{
    size_t es = shp_reduce_elem_size(desc);
    return es == 0 ? 0 : nd->slot / es;
}

void *smn_result_area(smn_node_t *nd)
{
    return nd->area;
}

int smn_failed_rank(const smn_node_t *nd)
{
    uint32_t f = atomic_load(&nd->hdr->fail);
    return f == 0 ? -1 : (int)(f & 0xffff) - 1;
}

void smn_get_stats(const smn_node_t *nd, smn_stats_t *st)
{
    *st = nd->st;
}
