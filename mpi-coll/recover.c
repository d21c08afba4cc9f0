/*
 * The recovery service of libsharp_mpi (recover.h): a thread answering
 * other processes' questions about this process's groups (recover_svc.c),
 * and here the records it serves, the wire's MACs, and the decision a
 * member makes when its group failed (it asks the other members' services).
 *
 * Wire (TCP, one question per connection, integers big-endian; MAC:
 * HMAC-SHA-256 keyed by the job's key, which every rank got from rank 0 at
 * MPI_Init through MPI and which is never sent here):
 *   hello     (service) magic "SMRH", version, a fresh 16-byte nonce
 *   question  magic "SMRQ", version, group id, k, flags (1: send the
 *             result of k if you have it), the asker's nonce, MAC(hello's
 *             nonce, the question)
 *   answer    magic "SMRA", known (0: no such group here yet), posted (0:
 *             outside the group's operations, 1: inside one, 2: inside a
 *             windowed one), held (1: the result of k follows), done,
 *             decided, length of the result that follows, MAC(both
 *             nonces, the answer, the result), then the result
 * A question whose MAC does not verify (not the job's, or a replay: the
 * nonce is the connection's own) is dropped without an answer; an answer
 * whose MAC does not verify is taken for none.
 */
#include "mpi-coll/recover.h"
#include "mpi-coll/recover_int.h"

#include "core/time.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* the service's state and the records it serves (recover_int.h) */
smr_svc_t smr_svc = {
    .mu = PTHREAD_MUTEX_INITIALIZER, .lfd = -1, .stop = {-1, -1}};

/* the MACs ---------------------------------------------------------------- */

void smr_q_mac(const question_t *q, const unsigned char *hnonce,
               unsigned char *mac)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, smr_svc.key, sizeof(smr_svc.key));
    crypto_auth_hmacsha256_update(&st, hnonce, NONCE);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)q,
                                  offsetof(question_t, mac));
    crypto_auth_hmacsha256_final(&st, mac);
}

void smr_a_mac(const answer_t *a, const unsigned char *hnonce,
               const unsigned char *qnonce, const void *data, size_t len,
               unsigned char *mac)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, smr_svc.key, sizeof(smr_svc.key));
    crypto_auth_hmacsha256_update(&st, hnonce, NONCE);
    crypto_auth_hmacsha256_update(&st, qnonce, NONCE);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)a,
                                  offsetof(answer_t, mac));
    if (len > 0) {
        crypto_auth_hmacsha256_update(&st, data, len);
    }
    crypto_auth_hmacsha256_final(&st, mac);
}

/* An asker's I/O with a deadline --------------------------------------------- */

static int io_all(int fd, void *p, size_t n, int out)
{
    char *c = p;
    while (n > 0) {
        ssize_t k = out ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, 0);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return -1; /* error, timeout (SO_*TIMEO) or closed */
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static void set_timeouts(int fd)
{
    struct timeval tv = {IO_TIMEOUT_MS / 1000, (IO_TIMEOUT_MS % 1000) * 1000};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Records ----------------------------------------------------------------------- */

smr_rec_t *smr_rec_new(uint64_t id, int rank, int size, const smr_addr_t *peers)
{
    smr_rec_t *r = calloc(1, sizeof(*r));
    if (r == NULL ||
        (r->peers = malloc(sizeof(*peers) * (size_t)size)) == NULL) {
        free(r);
        return NULL;
    }
    memcpy(r->peers, peers, sizeof(*peers) * (size_t)size);
    r->id = id;
    r->rank = rank;
    r->size = size;
    pthread_mutex_lock(&smr_svc.mu);
    r->next = smr_svc.recs;
    smr_svc.recs = r;
    pthread_mutex_unlock(&smr_svc.mu);
    return r;
}

void smr_set_cancel(smr_rec_t *r, void (*cancel)(void *), void *arg,
                    int after_ms)
{
    pthread_mutex_lock(&smr_svc.mu);
    r->cancel = after_ms > 0 ? cancel : NULL;
    r->cancel_arg = arg;
    r->cancel_ns = (uint64_t)(after_ms > 0 ? after_ms : 0) * SHP_NSEC_PER_MSEC;
    pthread_mutex_unlock(&smr_svc.mu);
}

void smr_rec_free(smr_rec_t *r)
{
    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&smr_svc.mu);
    for (smr_rec_t **p = &smr_svc.recs; *p != NULL; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            break;
        }
    }
    pthread_mutex_unlock(&smr_svc.mu);
    free(r->peers);
    free(r->buf);
    free(r->win);
    free(r);
}

/* r's buffer made len bytes (and one, so that 0 is never asked of
 * realloc), its content kept as far as it fits; under smr_svc.mu.  0 or -1. */
static int resize(smr_rec_t *r, size_t len)
{
    char *b = realloc(r->buf, len + 1);
    if (b == NULL) {
        return -1;
    }
    r->buf = b;
    r->cap = len + 1;
    return 0;
}

__attribute__((hot)) void *smr_begin(smr_rec_t *r, size_t len, int *oom)
{
    void *p = NULL;
    *oom = 0;
    pthread_mutex_lock(&smr_svc.mu);
    if (!r->frozen) {
        /* keeps the last result (served until every member has it) */
        if (len + 1 > r->cap && resize(r, len) != 0) {
            *oom = 1;
            goto out;
        }
        r->posted = IN_OP;
        p = r->buf;
    }
out:
    pthread_mutex_unlock(&smr_svc.mu);
    return p;
}

/* r's window slots, made if they are not yet (under smr_svc.mu): 0 or -1 */
static int win_make(smr_rec_t *r)
{
    if (r->win == NULL) {
        r->win = calloc(SMR_WIN, SMR_WIN_BYTES);
    }
    return r->win != NULL ? 0 : -1;
}

static char *win_slot(const smr_rec_t *r, uint64_t op)
{
    return r->win + (size_t)(op % SMR_WIN) * SMR_WIN_BYTES;
}

void smr_allow_window(smr_rec_t *r)
{
    pthread_mutex_lock(&smr_svc.mu);
    r->windowed = 1;
    pthread_mutex_unlock(&smr_svc.mu);
}

__attribute__((hot)) void *smr_begin_win(smr_rec_t *r, size_t len, int *oom)
{
    void *p = NULL;
    *oom = 0;
    pthread_mutex_lock(&smr_svc.mu);
    if (len > SMR_WIN_BYTES || !r->windowed || win_make(r) != 0) {
        *oom = 1; /* (a larger one, or none allowed: the caller's error) */
    } else if (!r->frozen) {
        /* the slot of the windowed result SMR_WIN back: no member needs it
         * any more (the tree keeps members closer) */
        r->posted = IN_WIN;
        p = win_slot(r, r->done + 1);
    }
    pthread_mutex_unlock(&smr_svc.mu);
    return p;
}

/* the buffer's part of a completed operation (under smr_svc.mu) */
static void buf_end(smr_rec_t *r, size_t len)
{
    r->bop = r->done;
    r->rlen = len;
    /* a big buffer no longer needed: given back after a run of small
     * operations, not after one (a barrier between two 1 MiB allreduces
     * gave it back and the next one grew it again: a fresh mapping, its
     * pages faulted in, on every operation) */
    r->small = r->cap / 4 > len ? r->small + 1 : 0;
    if (r->cap > SMR_KEEP_BYTES && r->small >= SMR_SMALL_RUN) {
        (void)resize(r, len); /* kept as it is if that fails */
        r->small = 0;
    }
}

__attribute__((hot)) void smr_end(smr_rec_t *r, int ok, size_t len)
{
    pthread_mutex_lock(&smr_svc.mu);
    wslot_t *w = r->win != NULL ? &r->ws[(r->done + 1) % SMR_WIN] : NULL;
    if (ok) {
        r->done++;
        r->taken = r->done;
        if (r->posted == IN_WIN) {
            *w = (wslot_t){r->done, len};
        } else {
            buf_end(r, len);
        }
    } else {
        r->frozen = 1;
        if (r->posted == IN_WIN) {
            w->op = 0; /* part of the result may be in it */
        }
    }
    r->posted = OUT;
    r->asked_inside_ns = 0;
    r->canceled = 0;
    pthread_mutex_unlock(&smr_svc.mu);
}

const char *smr_held(const smr_rec_t *r, uint64_t op, size_t *len)
{
    if (op == 0 || op > r->done) {
        return NULL;
    }
    const wslot_t *w = &r->ws[op % SMR_WIN];
    if (r->win != NULL && w->op == op &&
        !(r->posted == IN_WIN && (r->done + 1) % SMR_WIN == op % SMR_WIN)) {
        *len = w->len;
        return win_slot(r, op);
    }
    if (r->bop == op) {
        /* a new result comes into the buffer only once every member has
         * completed this one */
        *len = r->rlen;
        return r->buf;
    }
    return NULL;
}

size_t smr_capacity(const smr_rec_t *r)
{
    return r->cap;
}

void *smr_result(smr_rec_t *r)
{
    size_t len;
    pthread_mutex_lock(&smr_svc.mu);
    const char *p = smr_held(r, r->taken, &len);
    pthread_mutex_unlock(&smr_svc.mu);
    return p != NULL ? (void *)p : r->buf;
}

int smr_take(smr_rec_t *r, size_t len)
{
    size_t got = 0;
    int rc = 0;
    pthread_mutex_lock(&smr_svc.mu);
    if (r->taken < r->done) {
        rc = smr_held(r, r->taken + 1, &got) != NULL && got == len ? 1 : -1;
        r->taken += rc > 0 ? 1 : 0;
    }
    pthread_mutex_unlock(&smr_svc.mu);
    return rc;
}

uint64_t smr_done(const smr_rec_t *r)
{
    pthread_mutex_lock(&smr_svc.mu);
    uint64_t d = r->done;
    pthread_mutex_unlock(&smr_svc.mu);
    return d;
}

uint64_t smr_decided(const smr_rec_t *r)
{
    pthread_mutex_lock(&smr_svc.mu);
    uint64_t d = r->decided;
    pthread_mutex_unlock(&smr_svc.mu);
    return d;
}

/* The decision ------------------------------------------------------------------ */

/* Ask peer p about operation k (and for its result, into *data, if want:
 * at most max bytes).  0: answered, the answer proved the job's; -1:
 * unreachable, garbled or not proved. */
static int ask(const smr_rec_t *r, int p, uint64_t k, int want, size_t max,
               answer_t *a, char **data)
{
    struct sockaddr_in sa;
    hello_t h;
    question_t q;
    unsigned char mac[MAC];
    int rc = -1;
    *data = NULL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    set_timeouts(fd);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = r->peers[p].ip;
    sa.sin_port = r->peers[p].port;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        io_all(fd, &h, sizeof(h), 0) != 0 || ntohl(h.magic) != H_MAGIC ||
        ntohl(h.version) != VERSION) {
        goto out;
    }
    memset(&q, 0, sizeof(q));
    q.magic = htonl(Q_MAGIC);
    q.version = htonl(VERSION);
    q.id = htobe64(r->id);
    q.k = htobe64(k);
    q.flags = htonl(want ? 1u : 0u);
    randombytes_buf(q.nonce, NONCE);
    smr_q_mac(&q, h.nonce, q.mac);
    if (io_all(fd, &q, sizeof(q), 1) != 0 ||
        io_all(fd, a, sizeof(*a), 0) != 0 || ntohl(a->magic) != A_MAGIC) {
        goto out;
    }
    uint64_t len = be64toh(a->len);
    if (len > (want ? max : 0) ||
        (len > 0 && ((*data = malloc((size_t)len)) == NULL ||
                     io_all(fd, *data, (size_t)len, 0) != 0))) {
        goto out;
    }
    smr_a_mac(a, h.nonce, q.nonce, *data, (size_t)len, mac);
    if (sodium_memcmp(mac, a->mac, MAC) != 0) {
        goto out; /* not the job's service */
    }
    a->known = ntohl(a->known);
    a->posted = ntohl(a->posted);
    a->held = ntohl(a->held);
    a->done = be64toh(a->done);
    a->decided = be64toh(a->decided);
    a->len = len;
    rc = 0;
out:
    if (rc != 0) {
        free(*data);
        *data = NULL;
    }
    close(fd);
    return rc;
}

/* Fetch the result of op from peer p, into the buffer (op == k, the
 * operation at hand: len bytes) or a window slot (a later one, windowed: at
 * most SMR_WIN_BYTES): 0, or -1. */
static int fetch(smr_rec_t *r, int p, uint64_t k, uint64_t op, size_t len)
{
    answer_t a;
    char *data;
    size_t max = op == k ? len : SMR_WIN_BYTES;
    if (ask(r, p, op, 1, max, &a, &data) != 0) {
        return -1;
    }
    int rc = -1;
    pthread_mutex_lock(&smr_svc.mu);
    if (a.known && a.held && (op != k || a.len == len) &&
        (op == k || win_make(r) == 0)) {
        char *to = op == k ? r->buf : win_slot(r, op);
        if (a.len > 0) {
            memcpy(to, data, a.len); /* smr_decide sized the buffer */
        }
        if (op == k) {
            r->bop = op; /* held once done reaches it */
            r->rlen = a.len;
        } else {
            r->ws[op % SMR_WIN] = (wslot_t){op, a.len};
        }
        rc = 0;
    }
    pthread_mutex_unlock(&smr_svc.mu);
    free(data);
    return rc;
}

static void (*wait_hook)(void);

void smr_set_wait_hook(void (*hook)(void))
{
    wait_hook = hook;
}

/* what a decision knows so far: the most operations a member completed,
 * one such member (-1: this one), and a decision made elsewhere (0: none) */
typedef struct {
    uint64_t max;
    int src;
    uint64_t F;
    int behind; /* a member completed k - 2 or less */
} sweep_t;

/* Member p, inside operation done + 1 (posted), when s->max is the most
 * any member completed: could that operation still complete and raise it?
 * Only at the front (done == max): a windowed one needs nothing of this
 * member; another needs every member's part, and this one (k - 1 done)
 * gave one only to k. */
static int may_complete(const sweep_t *s, uint64_t k, uint64_t done,
                        uint32_t posted)
{
    return posted != OUT && done == s->max &&
           (posted == IN_WIN || done + 1 == k);
}

/* Member p's answer (k: this member's operation at hand): 1 if it settles
 * p's part (*s updated), 0 to ask p again, -1 if the protocol's
 * assumption does not hold (why). */
static int ask_member(smr_rec_t *r, int p, uint64_t k, sweep_t *s, char *why,
                      size_t whylen)
{
    answer_t a;
    char *data;
    if (ask(r, p, k, 0, 0, &a, &data) != 0) {
        snprintf(why, whylen, "member %d's recovery service is unreachable", p);
        return 0; /* again, until the deadline */
    }
    free(data);
    if (!a.known) {
        snprintf(why, whylen, "member %d does not know the group", p);
        return 0;
    }
    if (a.decided != 0 && a.decided < k) {
        snprintf(why, whylen,
                 "member %d decided operation %llu, this one completed "
                 "%llu: the protocol's assumption does not hold",
                 p, (unsigned long long)a.decided, (unsigned long long)(k - 1));
        return -1;
    }
    if (a.decided != 0) {
        s->F = a.decided; /* and p completed everything before it */
        s->src = p;
        return 1;
    }
    if (a.done > s->max) {
        s->max = a.done;
        s->src = p;
    }
    s->behind |= a.done + 2 <= k;
    if (may_complete(s, k, a.done, a.posted)) {
        snprintf(why, whylen, "member %d is still inside operation %llu", p,
                 (unsigned long long)(a.done + 1));
        return 0; /* its operation will complete or fail */
    }
    return 1;
}

/* Every member is asked at least once (so every one is frozen); F is known
 * once a member decided it, or once no member's operation can complete any
 * more: 1 + the most a member completed.  Without windowed operations it
 * is known sooner, however many members still have to answer: k + 1 once a
 * member completed k (none can have completed k + 1: this one gave it
 * nothing), k once one is two behind (it gave k nothing).  F, or 0 (why). */
static uint64_t decide_sweep(smr_rec_t *r, uint64_t k, uint64_t end, char *pend,
                             int *src, char *why, size_t whylen)
{
    int npend = 0, wait_ms = 1;
    sweep_t s = {k - 1, -1, 0, 0};

    for (int p = 0; p < r->size; p++) {
        pend[p] = p != r->rank;
        npend += pend[p];
    }
    while (npend > 0 && s.F == 0) {
        for (int p = 0; p < r->size; p++) {
            int rc = pend[p] ? ask_member(r, p, k, &s, why, whylen) : 0;
            if (rc < 0) {
                return 0;
            }
            if (rc > 0) {
                pend[p] = 0;
                npend--;
            }
        }
        /* after the first sweep every member has been asked, so frozen */
        if (npend == 0 || s.F != 0 ||
            (!r->windowed && (s.max >= k || s.behind))) {
            break;
        }
        if (shp_deadline_passed(end)) {
            return 0;
        }
        if (wait_hook != NULL) {
            wait_hook();
        }
        poll(NULL, 0, wait_ms);
        wait_ms = wait_ms < 64 ? wait_ms * 2 : 64;
    }
    *src = s.src;
    return s.F != 0 ? s.F : s.max + 1;
}

/* the result of op from the member that has it (src), or any that has;
 * again until the deadline (a service's slots may all be taken a moment) */
static int fetch_any(smr_rec_t *r, int src, uint64_t k, uint64_t op, size_t len,
                     uint64_t end, char *why, size_t whylen)
{
    int ok = 0, wait_ms = 1;
    for (;;) {
        ok = src >= 0 && fetch(r, src, k, op, len) == 0;
        for (int p = 0; !ok && p < r->size; p++) {
            ok = p != r->rank && p != src && fetch(r, p, k, op, len) == 0;
        }
        if (ok || shp_deadline_passed(end)) {
            break;
        }
        poll(NULL, 0, wait_ms);
        wait_ms = wait_ms < 64 ? wait_ms * 2 : 64;
    }
    if (!ok) {
        snprintf(why, whylen,
                 "operation %llu completed at member %d, but its result "
                 "could not be fetched",
                 (unsigned long long)op, src);
        return -1;
    }
    return 0;
}

/* the results of k to F - 1, which completed elsewhere: 0, or -1 (why) */
static int fetch_all(smr_rec_t *r, int src, uint64_t k, uint64_t F, size_t len,
                     uint64_t end, char *why, size_t whylen)
{
    if (F - k > SMR_WIN) {
        snprintf(why, whylen,
                 "member %d completed operation %llu, this one only %llu: "
                 "more apart than the window of %d the tree allows",
                 src, (unsigned long long)(F - 1), (unsigned long long)(k - 1),
                 SMR_WIN);
        return -1;
    }
    for (uint64_t op = k; op < F; op++) {
        if (fetch_any(r, src, k, op, len, end, why, whylen) != 0) {
            return -1;
        }
    }
    return 0;
}

uint64_t smr_decide(smr_rec_t *r, size_t len, int timeout_ms, char *why,
                    size_t whylen)
{
    uint64_t k, F = 0, end = shp_deadline_ms(timeout_ms);
    int src = -1;
    char *pend = NULL;

    pthread_mutex_lock(&smr_svc.mu);
    r->frozen = 1;
    r->posted = OUT;
    k = r->done + 1;
    if (r->decided != 0) {
        F = r->decided;
    }
    if (F == 0 && len + 1 > r->cap) {
        (void)resize(r, len); /* checked just below */
    }
    int room = r->cap >= len + 1;
    pthread_mutex_unlock(&smr_svc.mu);
    if (F != 0) {
        return F;
    }
    if (!room || (pend = calloc((size_t)r->size, 1)) == NULL) {
        snprintf(why, whylen, "out of memory");
        return 0;
    }
    F = decide_sweep(r, k, end, pend, &src, why, whylen);
    free(pend);
    if (F == 0 ||
        (F > k && fetch_all(r, src, k, F, len, end, why, whylen) != 0)) {
        return 0;
    }
    pthread_mutex_lock(&smr_svc.mu);
    r->decided = F;
    r->done = F - 1; /* from k on, fetched: taken as the calls come */
    pthread_mutex_unlock(&smr_svc.mu);
    return F;
}
