/*
 * The recovery service of libsharp_mpi (recover.h): a thread answering
 * other processes' questions about this process's groups, and the
 * decision a member makes when its group failed.
 *
 * Wire (TCP, one question per connection, integers big-endian; MAC:
 * HMAC-SHA-256 keyed by the job's key, which every rank got from rank 0 at
 * MPI_Init through MPI and which is never sent here):
 *   hello     (service) magic "SMRH", version, a fresh 16-byte nonce
 *   question  magic "SMRQ", version, group id, k, flags (1: send the
 *             result of k if you have it), the asker's nonce, MAC(hello's
 *             nonce, the question)
 *   answer    magic "SMRA", known (0: no such group here yet), posted,
 *             done, decided, length of the result that follows (0: none),
 *             MAC(both nonces, the answer, the result), then the result
 * A question whose MAC does not verify (not the job's, or a replay: the
 * nonce is the connection's own) is dropped without an answer; an answer
 * whose MAC does not verify is taken for none.
 *
 * The service serves MAX_CONNS connections at once, non-blocking, one
 * poll loop: each has CONN_MS from its accept to a proved question, then
 * CONN_MS without progress while its answer goes out; fixed-size buffers
 * but the answer's (the result, sent only to the job); a connection
 * beyond MAX_CONNS closes the oldest that has not proved the key yet.  So no one holding connections open, or trickling
 * bytes into them, delays an answer the job waits for.
 */
#include "mpi-coll/recover.h"

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

#define H_MAGIC 0x534d5248u /* "SMRH" */
#define Q_MAGIC 0x534d5251u /* "SMRQ" */
#define A_MAGIC 0x534d5241u /* "SMRA" */
#define VERSION 2u
#define IO_TIMEOUT_MS 2000 /* an asker's wait for each read and write */
#define CONN_MS 2000       /* a connection's whole life at the service */
#define MAX_CONNS 64       /* served at once */
#define NONCE 16
#define MAC crypto_auth_hmacsha256_BYTES

struct smr_rec {
    uint64_t id;
    int rank, size;
    smr_addr_t *peers;
    uint64_t done;            /* operations completed */
    uint64_t decided;         /* F, once decided */
    int posted;               /* inside operation done + 1 */
    int frozen;               /* asked, or failed: post nothing more */
    uint64_t asked_inside_ns; /* first asked while inside it (0: not) */
    void (*cancel)(void *);   /* smr_set_cancel */
    void *cancel_arg;
    uint64_t cancel_ns;
    int canceled; /* in this operation */
    char *buf;    /* the last result (rlen bytes), or the next one's */
    size_t cap, rlen;
    unsigned small; /* operations in a row that needed a quarter of cap */
    struct smr_rec *next;
};

typedef struct {
    uint32_t magic, version;
    unsigned char nonce[NONCE];
} hello_t;

typedef struct {
    uint32_t magic, version;
    uint64_t id, k;
    uint32_t flags, pad;
    unsigned char nonce[NONCE];
    unsigned char mac[MAC]; /* over the hello's nonce and the above */
} question_t;

typedef struct {
    uint32_t magic, known, posted, pad;
    uint64_t done, decided, len;
    unsigned char mac[MAC]; /* over both nonces, the above and the data */
} answer_t;

/* one connection at the service */
typedef struct {
    int fd; /* -1: free */
    int answering;
    uint64_t born, deadline;
    hello_t hello;
    size_t hsent;
    question_t q;
    size_t qgot;
    char *out; /* the answer and its result */
    size_t olen, osent;
} conn_t;

static struct {
    pthread_mutex_t mu; /* the records and the list */
    smr_rec_t *recs;
    int lfd, stop[2];
    pthread_t thread;
    int running;
    unsigned char key[SMR_KEY_LEN];
    conn_t conns[MAX_CONNS];
} svc = {.mu = PTHREAD_MUTEX_INITIALIZER, .lfd = -1, .stop = {-1, -1}};

/* the MACs ---------------------------------------------------------------- */

static void q_mac(const question_t *q, const unsigned char *hnonce,
                  unsigned char *mac)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, svc.key, sizeof(svc.key));
    crypto_auth_hmacsha256_update(&st, hnonce, NONCE);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)q,
                                  offsetof(question_t, mac));
    crypto_auth_hmacsha256_final(&st, mac);
}

static void a_mac(const answer_t *a, const unsigned char *hnonce,
                  const unsigned char *qnonce, const void *data, size_t len,
                  unsigned char *mac)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, svc.key, sizeof(svc.key));
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

/* The service ----------------------------------------------------------------- */

static smr_rec_t *find(uint64_t id)
{
    for (smr_rec_t *r = svc.recs; r != NULL; r = r->next) {
        if (r->id == id) {
            return r;
        }
    }
    return NULL;
}

/* a member asked while inside an operation: waited for, or given up
 * after cancel_ns (under svc.mu) */
static void asked_inside(smr_rec_t *r)
{
    uint64_t now = shp_time_ns();
    if (r->asked_inside_ns == 0) {
        r->asked_inside_ns = now;
    } else if (r->cancel != NULL && !r->canceled &&
               now - r->asked_inside_ns > r->cancel_ns) {
        r->canceled = 1;
        fprintf(stderr,
                "sharp_mpi: recovery of group %016llx: member %d was "
                "still inside operation %llu %llu ms after the "
                "others asked (no notice of the failure came): it "
                "gives the operation up\n",
                (unsigned long long)r->id, r->rank,
                (unsigned long long)(r->done + 1),
                (unsigned long long)(r->cancel_ns / SHP_NSEC_PER_MSEC));
        r->cancel(r->cancel_arg);
    }
}

/* c's question, proved: its answer (and the result asked for) made into
 * c->out.  0, or -1 (out of memory: the connection is closed). */
static int answer(conn_t *c)
{
    const question_t *q = &c->q;
    uint64_t id = be64toh(q->id), k = be64toh(q->k);
    answer_t a;
    char *out;
    memset(&a, 0, sizeof(a));
    pthread_mutex_lock(&svc.mu);
    smr_rec_t *r = find(id);
    size_t len = 0;
    if (r != NULL) {
        r->frozen = 1; /* from now on: nothing more through sharp */
        if (r->posted) {
            asked_inside(r);
        }
        a.known = 1;
        a.posted = (uint32_t)r->posted;
        a.done = r->done;
        a.decided = r->decided;
        if ((ntohl(q->flags) & 1) && r->done == k && r->rlen > 0) {
            len = r->rlen;
        }
    }
    out = malloc(sizeof(a) + len);
    if (out != NULL && len > 0) {
        memcpy(out + sizeof(a), r->buf, len);
    }
    pthread_mutex_unlock(&svc.mu);
    if (out == NULL) {
        return -1;
    }
    a.magic = htonl(A_MAGIC);
    a.known = htonl(a.known);
    a.posted = htonl(a.posted);
    a.done = htobe64(a.done);
    a.decided = htobe64(a.decided);
    a.len = htobe64((uint64_t)len);
    a_mac(&a, c->hello.nonce, q->nonce, out + sizeof(a), len, a.mac);
    memcpy(out, &a, sizeof(a));
    c->out = out;
    c->olen = sizeof(a) + len;
    c->osent = 0;
    c->answering = 1;
    return 0;
}

static void conn_close(conn_t *c)
{
    if (c->fd >= 0) {
        close(c->fd);
    }
    free(c->out);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

/* what c can do now: 1 to keep it, 0 to close it (done, a stranger,
 * closed by the peer) */
static int conn_step(conn_t *c)
{
    ssize_t n;
    if (c->hsent < sizeof(c->hello)) {
        n = send(c->fd, (char *)&c->hello + c->hsent,
                 sizeof(c->hello) - c->hsent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        }
        c->hsent += (size_t)n;
    }
    if (c->hsent == sizeof(c->hello) && !c->answering) {
        n = recv(c->fd, (char *)&c->q + c->qgot, sizeof(c->q) - c->qgot,
                 MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                       errno != EINTR)) {
            return 0;
        }
        c->qgot += n > 0 ? (size_t)n : 0;
        if (c->qgot < sizeof(c->q)) {
            return 1;
        }
        unsigned char mac[MAC];
        q_mac(&c->q, c->hello.nonce, mac);
        if (ntohl(c->q.magic) != Q_MAGIC || ntohl(c->q.version) != VERSION ||
            sodium_memcmp(mac, c->q.mac, MAC) != 0 || answer(c) != 0) {
            return 0; /* not one of ours: closed without an answer */
        }
    }
    if (c->answering) {
        n = send(c->fd, c->out + c->osent, c->olen - c->osent,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        }
        c->osent += (size_t)n;
        /* a process of the job: CONN_MS without progress, however large
         * the result */
        c->deadline = shp_time_ns() + (uint64_t)CONN_MS * SHP_NSEC_PER_MSEC;
        return c->osent < c->olen;
    }
    return 1;
}

/* a new connection: a free slot, or the oldest not yet answering */
static void conn_accept(void)
{
    int fd = accept4(svc.lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {
            poll(NULL, 0, 10); /* the asker retries */
        }
        return;
    }
    conn_t *c = NULL, *old = NULL;
    for (int i = 0; i < MAX_CONNS && c == NULL; i++) {
        conn_t *x = &svc.conns[i];
        if (x->fd < 0) {
            c = x;
        } else if (!x->answering && (old == NULL || x->born < old->born)) {
            old = x;
        }
    }
    if (c == NULL && old != NULL) {
        conn_close(old);
        c = old;
    }
    if (c == NULL) {
        close(fd); /* every slot is answering the job: the asker retries */
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->fd = fd;
    c->born = shp_time_ns();
    c->deadline = c->born + (uint64_t)CONN_MS * SHP_NSEC_PER_MSEC;
    c->hello.magic = htonl(H_MAGIC);
    c->hello.version = htonl(VERSION);
    randombytes_buf(c->hello.nonce, NONCE);
    if (!conn_step(c)) {
        conn_close(c);
    }
}

static void *service(void *arg)
{
    struct pollfd p[2 + MAX_CONNS];
    int at[MAX_CONNS];
    (void)arg;
    for (;;) {
        uint64_t now = shp_time_ns(), next = UINT64_MAX;
        int n = 2;
        p[0] = (struct pollfd){svc.lfd, POLLIN, 0};
        p[1] = (struct pollfd){svc.stop[0], POLLIN, 0};
        for (int i = 0; i < MAX_CONNS; i++) {
            conn_t *c = &svc.conns[i];
            if (c->fd < 0) {
                continue;
            }
            if (now >= c->deadline) {
                conn_close(c); /* its time is up, answered or not */
                continue;
            }
            next = c->deadline < next ? c->deadline : next;
            int out = c->hsent < sizeof(c->hello) || c->answering;
            p[n] = (struct pollfd){c->fd, out ? POLLOUT : POLLIN, 0};
            at[n - 2] = i;
            n++;
        }
        int ms = next == UINT64_MAX
                     ? -1
                     : (int)((next - now) / SHP_NSEC_PER_MSEC) + 1;
        if (poll(p, (nfds_t)n, ms) < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (p[1].revents) {
            break;
        }
        for (int j = 2; j < n; j++) {
            conn_t *c = &svc.conns[at[j - 2]];
            if (p[j].revents != 0 && !conn_step(c)) {
                conn_close(c);
            }
        }
        if (p[0].revents & POLLIN) {
            conn_accept();
        }
    }
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_close(&svc.conns[i]);
    }
    return NULL;
}

/* the host name's address (loopback if it has none) */
static uint32_t host_ip(void)
{
    char host[256] = "";
    struct addrinfo hints, *res = NULL;
    uint32_t ip = htonl(INADDR_LOOPBACK);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    if (gethostname(host, sizeof(host) - 1) == 0 &&
        getaddrinfo(host, NULL, &hints, &res) == 0 && res != NULL) {
        ip = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    }
    if (res != NULL) {
        freeaddrinfo(res);
    }
    return ip;
}

/* a listening socket on ip:0 (network order), or -1 */
static int listen_on(uint32_t ip)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = ip;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
                    listen(fd, 128) != 0)) {
        int e = errno;
        close(fd);
        errno = e;
        fd = -1;
    }
    return fd;
}

int smr_start(const char *ip, const unsigned char *key, smr_addr_t *me)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    uint32_t addr;
    if (sodium_init() < 0) {
        errno = ENOSYS;
        return -1;
    }
    if (ip != NULL && *ip != '\0') {
        if (inet_pton(AF_INET, ip, &addr) != 1) {
            errno = EINVAL;
            return -1;
        }
        svc.lfd = listen_on(addr);
    } else {
        /* the address the others will use: the host name's; every
         * address only if that one is not this host's */
        addr = host_ip();
        svc.lfd = listen_on(addr);
        if (svc.lfd < 0 && errno == EADDRNOTAVAIL) {
            svc.lfd = listen_on(htonl(INADDR_ANY));
        }
    }
    memcpy(svc.key, key, SMR_KEY_LEN);
    for (int i = 0; i < MAX_CONNS; i++) {
        svc.conns[i].fd = -1;
    }
    if (svc.lfd < 0 || getsockname(svc.lfd, (struct sockaddr *)&sa, &sl) != 0 ||
        pipe2(svc.stop, O_CLOEXEC) != 0) {
        goto fail;
    }
    me->ip =
        sa.sin_addr.s_addr != htonl(INADDR_ANY) ? sa.sin_addr.s_addr : addr;
    me->port = sa.sin_port;
    me->pad = 0;
    /* the thread takes no signal meant for the program's own threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&svc.thread, NULL, service, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        goto fail;
    }
    svc.running = 1;
    return 0;
fail : {
    int e = errno;
    smr_stop();
    errno = e;
    return -1;
}
}

void smr_stop(void)
{
    if (svc.running) {
        char c = 1;
        if (write(svc.stop[1], &c, 1) == 1) {
            pthread_join(svc.thread, NULL);
        } else {
            pthread_cancel(svc.thread);
            pthread_join(svc.thread, NULL);
        }
        svc.running = 0;
    }
    for (int i = 0; i < 2; i++) {
        if (svc.stop[i] >= 0) {
            close(svc.stop[i]);
            svc.stop[i] = -1;
        }
    }
    if (svc.lfd >= 0) {
        close(svc.lfd);
        svc.lfd = -1;
    }
    sodium_memzero(svc.key, sizeof(svc.key));
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
    pthread_mutex_lock(&svc.mu);
    r->next = svc.recs;
    svc.recs = r;
    pthread_mutex_unlock(&svc.mu);
    return r;
}

void smr_set_cancel(smr_rec_t *r, void (*cancel)(void *), void *arg,
                    int after_ms)
{
    pthread_mutex_lock(&svc.mu);
    r->cancel = after_ms > 0 ? cancel : NULL;
    r->cancel_arg = arg;
    r->cancel_ns = (uint64_t)(after_ms > 0 ? after_ms : 0) * SHP_NSEC_PER_MSEC;
    pthread_mutex_unlock(&svc.mu);
}

void smr_rec_free(smr_rec_t *r)
{
    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&svc.mu);
    for (smr_rec_t **p = &svc.recs; *p != NULL; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            break;
        }
    }
    pthread_mutex_unlock(&svc.mu);
    free(r->peers);
    free(r->buf);
    free(r);
}

/* r's buffer made len bytes (and one, so that 0 is never asked of
 * realloc), its content kept as far as it fits; under svc.mu.  0 or -1. */
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

void *smr_begin(smr_rec_t *r, size_t len, int *oom)
{
    void *p = NULL;
    *oom = 0;
    pthread_mutex_lock(&svc.mu);
    if (!r->frozen) {
        /* keeps the last result (served until every member has it) */
        if (len + 1 > r->cap && resize(r, len) != 0) {
            *oom = 1;
            goto out;
        }
        r->posted = 1;
        p = r->buf;
    }
out:
    pthread_mutex_unlock(&svc.mu);
    return p;
}

void smr_end(smr_rec_t *r, int ok, size_t len)
{
    pthread_mutex_lock(&svc.mu);
    r->posted = 0;
    r->asked_inside_ns = 0;
    r->canceled = 0;
    if (ok) {
        r->done++;
        r->rlen = len;
        /* a big buffer no longer needed: given back after a run of small
         * operations, not after one (a barrier between two 1 MiB
         * allreduces gave it back and the next one grew it again: a fresh
         * mapping, its pages faulted in, on every operation) */
        r->small = r->cap / 4 > len ? r->small + 1 : 0;
        if (r->cap > SMR_KEEP_BYTES && r->small >= SMR_SMALL_RUN) {
            (void)resize(r, len); /* kept as it is if that fails */
            r->small = 0;
        }
    } else {
        r->frozen = 1;
    }
    pthread_mutex_unlock(&svc.mu);
}

size_t smr_capacity(const smr_rec_t *r)
{
    return r->cap;
}

void *smr_result(smr_rec_t *r)
{
    return r->buf;
}

uint64_t smr_done(const smr_rec_t *r)
{
    pthread_mutex_lock(&svc.mu);
    uint64_t d = r->done;
    pthread_mutex_unlock(&svc.mu);
    return d;
}

uint64_t smr_decided(const smr_rec_t *r)
{
    pthread_mutex_lock(&svc.mu);
    uint64_t d = r->decided;
    pthread_mutex_unlock(&svc.mu);
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
    q_mac(&q, h.nonce, q.mac);
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
    a_mac(a, h.nonce, q.nonce, *data, (size_t)len, mac);
    if (sodium_memcmp(mac, a->mac, MAC) != 0) {
        goto out; /* not the job's service */
    }
    a->known = ntohl(a->known);
    a->posted = ntohl(a->posted);
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

/* Fetch the result of k from a peer that has it: 0, or -1. */
static int fetch(smr_rec_t *r, int p, uint64_t k, size_t len)
{
    answer_t a;
    char *data;
    if (ask(r, p, k, 1, len, &a, &data) != 0) {
        return -1;
    }
    if (!a.known || a.done != k || a.len != len) {
        free(data);
        return -1;
    }
    pthread_mutex_lock(&svc.mu);
    if (len > 0) {
        memcpy(r->buf, data, len); /* smr_begin sized it */
    }
    pthread_mutex_unlock(&svc.mu);
    free(data);
    return 0;
}

static void (*wait_hook)(void);

void smr_set_wait_hook(void (*hook)(void))
{
    wait_hook = hook;
}

/* Member p's answer about operation k: 1 if it settles p's part (*found
 * and *src updated: F as far as known, a member that completed k), 0 to
 * ask p again, -1 if the protocol's assumption does not hold (why). */
static int ask_member(smr_rec_t *r, int p, uint64_t k, uint64_t *found,
                      int *src, char *why, size_t whylen)
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
    if (a.decided != 0 && a.decided != k && a.decided != k + 1) {
        snprintf(why, whylen,
                 "member %d decided operation %llu, this one is at "
                 "%llu: the protocol's assumption does not hold",
                 p, (unsigned long long)a.decided, (unsigned long long)k);
        return -1;
    }
    if (a.decided != 0) {
        *found = a.decided;
        *src = a.decided == k + 1 ? p : *src;
    } else if (a.done >= k) {
        *found = k + 1;
        *src = p;
    } else if (a.done + 2 <= k) {
        *found = *found ? *found : k;
    } else if (a.posted) {
        snprintf(why, whylen, "member %d is still inside operation %llu", p,
                 (unsigned long long)k);
        return 0; /* its operation will complete or fail */
    }
    return 1;
}

/* Every member is asked at least once (so every one is frozen); the
 * answer is known once one member completed k (F = k + 1, *src one that
 * did) or is behind (F = k: it never posts k now), or once every member
 * answered while outside the group's operations.  F, or 0 (why). */
static uint64_t decide_sweep(smr_rec_t *r, uint64_t k, uint64_t end, char *pend,
                             int *src, char *why, size_t whylen)
{
    int npend = 0, wait_ms = 1;
    uint64_t found = 0; /* F, as soon as known */

    for (int p = 0; p < r->size; p++) {
        pend[p] = p != r->rank;
        npend += pend[p];
    }
    while (npend > 0) {
        for (int p = 0; p < r->size; p++) {
            int rc =
                pend[p] ? ask_member(r, p, k, &found, src, why, whylen) : 0;
            if (rc < 0) {
                return 0;
            }
            if (rc > 0) {
                pend[p] = 0;
                npend--;
            }
        }
        /* after the first sweep every member has been asked, so frozen */
        if (found != 0 && (found != k + 1 || *src >= 0)) {
            break;
        }
        if (npend == 0) {
            found = k; /* every one outside, none completed k */
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
    return found != 0 ? found : k;
}

/* the result of k from the member that has it (src), or any that has;
 * again until the deadline (a service's slots may all be taken a moment) */
static int fetch_any(smr_rec_t *r, int src, uint64_t k, size_t len,
                     uint64_t end, char *why, size_t whylen)
{
    int ok = 0, wait_ms = 1;
    for (;;) {
        ok = src >= 0 && fetch(r, src, k, len) == 0;
        for (int p = 0; !ok && p < r->size; p++) {
            ok = p != r->rank && p != src && fetch(r, p, k, len) == 0;
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
                 (unsigned long long)k, src);
        return -1;
    }
    return 0;
}

uint64_t smr_decide(smr_rec_t *r, size_t len, int timeout_ms, char *why,
                    size_t whylen)
{
    uint64_t k, F = 0, end = shp_deadline_ms(timeout_ms);
    int src = -1;
    char *pend = NULL;

    pthread_mutex_lock(&svc.mu);
    r->frozen = 1;
    r->posted = 0;
    k = r->done + 1;
    if (r->decided != 0) {
        F = r->decided;
    }
    if (F == 0 && len + 1 > r->cap) {
        (void)resize(r, len); /* checked just below */
    }
    int room = r->cap >= len + 1;
    pthread_mutex_unlock(&svc.mu);
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
        (F == k + 1 && fetch_any(r, src, k, len, end, why, whylen) != 0)) {
        return 0;
    }
    pthread_mutex_lock(&svc.mu);
    r->decided = F;
    if (F == k + 1) {
        r->done = k;
        r->rlen = len;
    }
    pthread_mutex_unlock(&svc.mu);
    return F;
}
