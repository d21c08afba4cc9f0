/*
 * The recovery service of libsharp_mpi (recover.h): the thread that
 * answers other processes' questions about this process's groups, from the
 * records recover.c keeps (the wire and its MACs: recover.c).
 *
 * The service serves MAX_CONNS connections at once, non-blocking, one
 * poll loop: each has CONN_MS from its accept to a proved question, then
 * CONN_MS without progress while its answer goes out; fixed-size buffers
 * but the answer's (the result, sent only to the job); a connection
 * beyond MAX_CONNS closes the oldest that has not proved the key yet.  So
 * no one holding connections open, or trickling bytes into them, delays an
 * answer the job waits for.
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

/* The service ----------------------------------------------------------------- */

static smr_rec_t *find(uint64_t id)
{
    for (smr_rec_t *r = smr_svc.recs; r != NULL; r = r->next) {
        if (r->id == id) {
            return r;
        }
    }
    return NULL;
}

/* a member asked while inside an operation: waited for, or given up
 * after cancel_ns (under smr_svc.mu) */
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
    const char *held = NULL;
    memset(&a, 0, sizeof(a));
    pthread_mutex_lock(&smr_svc.mu);
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
        held = (ntohl(q->flags) & 1) ? smr_held(r, k, &len) : NULL;
        a.held = held != NULL;
        len = held != NULL ? len : 0;
    }
    out = malloc(sizeof(a) + len);
    if (out != NULL && len > 0) {
        memcpy(out + sizeof(a), held, len);
    }
    pthread_mutex_unlock(&smr_svc.mu);
    if (out == NULL) {
        return -1;
    }
    a.magic = htonl(A_MAGIC);
    a.known = htonl(a.known);
    a.posted = htonl(a.posted);
    a.held = htonl(a.held);
    a.done = htobe64(a.done);
    a.decided = htobe64(a.decided);
    a.len = htobe64((uint64_t)len);
    smr_a_mac(&a, c->hello.nonce, q->nonce, out + sizeof(a), len, a.mac);
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
        smr_q_mac(&c->q, c->hello.nonce, mac);
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
    int fd = accept4(smr_svc.lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {
            poll(NULL, 0, 10); /* the asker retries */
        }
        return;
    }
    conn_t *c = NULL, *old = NULL;
    for (int i = 0; i < MAX_CONNS && c == NULL; i++) {
        conn_t *x = &smr_svc.conns[i];
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
        p[0] = (struct pollfd){smr_svc.lfd, POLLIN, 0};
        p[1] = (struct pollfd){smr_svc.stop[0], POLLIN, 0};
        for (int i = 0; i < MAX_CONNS; i++) {
            conn_t *c = &smr_svc.conns[i];
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
            conn_t *c = &smr_svc.conns[at[j - 2]];
            if (p[j].revents != 0 && !conn_step(c)) {
                conn_close(c);
            }
        }
        if (p[0].revents & POLLIN) {
            conn_accept();
        }
    }
    for (int i = 0; i < MAX_CONNS; i++) {
        conn_close(&smr_svc.conns[i]);
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
        smr_svc.lfd = listen_on(addr);
    } else {
        /* the address the others will use: the host name's; every
         * address only if that one is not this host's */
        addr = host_ip();
        smr_svc.lfd = listen_on(addr);
        if (smr_svc.lfd < 0 && errno == EADDRNOTAVAIL) {
            smr_svc.lfd = listen_on(htonl(INADDR_ANY));
        }
    }
    memcpy(smr_svc.key, key, SMR_KEY_LEN);
    for (int i = 0; i < MAX_CONNS; i++) {
        smr_svc.conns[i].fd = -1;
    }
    if (smr_svc.lfd < 0 ||
        getsockname(smr_svc.lfd, (struct sockaddr *)&sa, &sl) != 0 ||
        pipe2(smr_svc.stop, O_CLOEXEC) != 0) {
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
    int rc = pthread_create(&smr_svc.thread, NULL, service, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        goto fail;
    }
    smr_svc.running = 1;
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
    if (smr_svc.running) {
        char c = 1;
        if (write(smr_svc.stop[1], &c, 1) == 1) {
            pthread_join(smr_svc.thread, NULL);
        } else {
            pthread_cancel(smr_svc.thread);
            pthread_join(smr_svc.thread, NULL);
        }
        smr_svc.running = 0;
    }
    for (int i = 0; i < 2; i++) {
        if (smr_svc.stop[i] >= 0) {
            close(smr_svc.stop[i]);
            smr_svc.stop[i] = -1;
        }
    }
    if (smr_svc.lfd >= 0) {
        close(smr_svc.lfd);
        smr_svc.lfd = -1;
    }
    sodium_memzero(smr_svc.key, sizeof(smr_svc.key));
}
