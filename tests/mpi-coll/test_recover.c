/*
 * The recovery protocol of libsharp_mpi (mpi-coll/recover.c) with real
 * services: each member is a forked process with its own service thread on
 * 127.0.0.1, put in a state (operations done, inside one, failed), then
 * one decides.  The cases are the ones the proof in docs/mpi.md walks
 * through: the last operation completed at some member (its result is
 * fetched), completed nowhere, a member behind, a member still inside the
 * operation that completes or fails later, a decision already made
 * elsewhere, a member that never answers (a bounded error), a member left
 * inside an operation that is canceled, and questions that are not the
 * protocol's.  And the service against others on the network: connections
 * held open or trickling bytes, more than it serves at once, while a
 * member needs a result (answered at once all the same, each stalled one
 * closed by its deadline); a process with another job's key (no answer);
 * a relay that records a member's question and sends it again (no answer).
 */
#include "mpi-coll/recover.h"
#include "core/time.h"
#include "tests/support/test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXN 4
#define GROUP 77

/* what a member does once every member's service is known; its exit code
 * is its verdict (0 right) */
typedef int (*role_t)(smr_rec_t *r, int me);

static smr_addr_t addrs[MAXN];
static const unsigned char job_key[SMR_KEY_LEN] =
    "the job's key, 32 bytes long...";
static const unsigned char other_key[SMR_KEY_LEN] =
    "another job's key, 32 bytes....";
/* a member that runs with another job's key (-1: none) */
static int stranger = -1;
/* a member that reaches member 0 through the relay of test_replay_... */
static int via_mitm = -1;
static struct {
    int lfd;
    volatile int stop;
    smr_addr_t addr;
    size_t back, replay_back; /* service to asker: relayed, replayed */
    int replayed;
} mitm;

/* a meeting point of the members (shared memory made by run(), counted
 * afresh for each run) */
static int *met;

/* wait until n arrivals in all (a run's second meeting of n members
 * waits for 2n): a member asked before it reached the state a test
 * means finds its record frozen, another case than the test's */
static void meet(int n)
{
    __atomic_add_fetch(met, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(met, __ATOMIC_SEQ_CST) < n) {
        usleep(1000);
    }
}

/* complete one operation with a len-byte result of byte c */
static void complete(smr_rec_t *r, size_t len, int c)
{
    int oom;
    char *b = smr_begin(r, len, &oom);
    assert_non_null(b);
    memset(b, c, len);
    smr_end(r, 1, len);
}

/* n members, each running role (me = 0..n-1); every exit code 0 */
static void run(int n, role_t role, int *codes)
{
    int up[MAXN][2], down[MAXN][2];
    pid_t pid[MAXN];
    if (met == NULL) {
        met = mmap(NULL, sizeof(*met), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        assert_true(met != MAP_FAILED);
    }
    *met = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(pipe(up[i]), 0);
        assert_int_equal(pipe(down[i]), 0);
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            smr_addr_t me;
            alarm(30);
            signal(SIGPIPE, SIG_IGN);
            if (smr_start("127.0.0.1", i == stranger ? other_key : job_key,
                          &me) != 0 ||
                write(up[i][1], &me, sizeof(me)) != sizeof(me) ||
                read(down[i][0], addrs, sizeof(addrs)) != sizeof(addrs)) {
                _exit(90);
            }
            if (i == via_mitm) {
                addrs[0] = mitm.addr;
            }
            smr_rec_t *r = smr_rec_new(GROUP, i, n, addrs);
            if (r == NULL) {
                _exit(91);
            }
            int rc = role(r, i);
            /* stay up a little for the others' questions */
            usleep(600000);
            smr_rec_free(r);
            smr_stop();
            _exit(rc);
        }
        assert_int_equal(read(up[i][0], &addrs[i], sizeof(addrs[i])),
                         sizeof(addrs[i]));
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(write(down[i][1], addrs, sizeof(addrs)),
                         sizeof(addrs));
    }
    for (int i = 0; i < n; i++) {
        int st;
        assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
        codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
        close(up[i][0]);
        close(up[i][1]);
        close(down[i][0]);
        close(down[i][1]);
    }
}

static void expect_all_zero(int n, const int *codes)
{
    int bad = -1;
    for (int i = 0; i < n; i++) {
        if (codes[i] != 0) {
            fprintf(stderr, "member %d: verdict %d\n", i, codes[i]);
            bad = i;
        }
    }
    if (bad >= 0) {
        fail_msg("member %d: verdict %d", bad, codes[bad]);
    }
}

/* Member 0 completed operation 3 (result 0x33 x 5000), members 1 and 2
 * failed in it: both decide F = 4 and get the result. */
static int role_fetch(smr_rec_t *r, int me)
{
    char why[200];
    complete(r, 5000, 0x11);
    complete(r, 5000, 0x22);
    meet(3);
    if (me == 0) {
        complete(r, 5000, 0x33);
        meet(6);
        return 0;
    }
    int oom;
    smr_begin(r, 5000, &oom);
    smr_end(r, 0, 5000); /* failed */
    meet(6);             /* member 0 is done by now */
    uint64_t F = smr_decide(r, 5000, 5000, why, sizeof(why));
    if (F != 4 || smr_done(r) != 3) {
        return 10;
    }
    const unsigned char *b = smr_result(r);
    for (int i = 0; i < 5000; i++) {
        if (b[i] != 0x33) {
            return 11;
        }
    }
    /* the next operation: not posted, and redone */
    if (smr_begin(r, 8, &oom) != NULL ||
        smr_decide(r, 8, 1000, why, sizeof(why)) != 4) {
        return 12;
    }
    return 0;
}

/* A big result buffer is kept across a small operation (a barrier
 * between two 1 MiB allreduces) and given back only after a run of small
 * ones. */
static void test_buffer_kept_across_small(void **state)
{
    (void)state;
    smr_addr_t me = {0};
    smr_rec_t *r = smr_rec_new(99, 0, 1, &me);
    assert_non_null(r);
    size_t big = (size_t)2 << 20;
    int oom;
    for (int i = 0; i < 3 * SMR_SMALL_RUN; i++) {
        size_t len = i % 2 ? 0 : big; /* a barrier after each */
        assert_non_null(smr_begin(r, len, &oom));
        smr_end(r, 1, len);
        assert_true(smr_capacity(r) > big);
    }
    assert_non_null(smr_begin(r, big, &oom));
    smr_end(r, 1, big);
    for (int i = 0; i < SMR_SMALL_RUN - 1; i++) {
        assert_non_null(smr_begin(r, 8, &oom));
        smr_end(r, 1, 8);
    }
    assert_true(smr_capacity(r) > big); /* one short of the run */
    assert_non_null(smr_begin(r, 8, &oom));
    smr_end(r, 1, 8);
    assert_true(smr_capacity(r) < 64);
    smr_rec_free(r);
}

static void test_fetch_result(void **state)
{
    int codes[3];
    (void)state;
    run(3, role_fetch, codes);
    expect_all_zero(3, codes);
}

/* Every member failed in operation 2, outside it now: F = 2 everywhere.
 * (All complete 1 first: a member that had not begun 1 when the others
 * asked would find its record frozen, and fail 1 instead: another case.) */
static int role_nowhere(smr_rec_t *r, int me)
{
    char why[200];
    int oom;
    (void)me;
    complete(r, 16, 0x11);
    meet(4);
    smr_begin(r, 16, &oom);
    smr_end(r, 0, 16);
    uint64_t F = smr_decide(r, 16, 5000, why, sizeof(why));
    return F == 2 && smr_done(r) == 1 ? 0 : 20;
}

static void test_completed_nowhere(void **state)
{
    int codes[4];
    (void)state;
    run(4, role_nowhere, codes);
    expect_all_zero(4, codes);
}

/* Member 1 is behind (done 1, inside operation 2 for good); member 0
 * completed 2 and is at 3: F = 3 for member 0 at once (member 1 cannot
 * contribute to 3 now); member 1's 2 then fails, and it fetches 2. */
static int role_behind(smr_rec_t *r, int me)
{
    char why[200];
    int oom;
    complete(r, 64, 0x11);
    if (me == 0) {
        complete(r, 64, 0x22);
        meet(2);
        smr_begin(r, 64, &oom);
        smr_end(r, 0, 64); /* 3 failed */
        uint64_t F = smr_decide(r, 64, 5000, why, sizeof(why));
        return F == 3 && smr_done(r) == 2 ? 0 : 30;
    }
    smr_begin(r, 64, &oom); /* inside 2 */
    meet(2);
    usleep(200000);
    smr_end(r, 0, 64); /* then it fails */
    uint64_t F = smr_decide(r, 64, 5000, why, sizeof(why));
    const unsigned char *b = smr_result(r);
    return F == 3 && smr_done(r) == 2 && b[63] == 0x22 ? 0 : 31;
}

static void test_member_behind(void **state)
{
    int codes[2];
    (void)state;
    run(2, role_behind, codes);
    expect_all_zero(2, codes);
}

/* Member 1 is inside operation 1 when member 0 (failed) asks; it completes
 * 1 a little later: member 0 waits for it and fetches. */
static int role_late(smr_rec_t *r, int me)
{
    char why[200];
    int oom;
    char *b = smr_begin(r, 100, &oom);
    meet(2);
    if (me == 1) {
        usleep(150000);
        memset(b, 0x5a, 100);
        smr_end(r, 1, 100);
        return 0;
    }
    smr_end(r, 0, 100);
    uint64_t F = smr_decide(r, 100, 5000, why, sizeof(why));
    b = smr_result(r);
    return F == 2 && b[0] == 0x5a && b[99] == 0x5a ? 0 : 40;
}

static void test_wait_for_member_inside(void **state)
{
    int codes[2];
    (void)state;
    run(2, role_late, codes);
    expect_all_zero(2, codes);
}

/* Member 1 stays inside operation 1 for ever: member 0's decision ends
 * after its timeout, with a reason. */
static int role_stuck(smr_rec_t *r, int me)
{
    char why[200] = "";
    int oom;
    smr_begin(r, 8, &oom);
    meet(2);
    if (me == 1) {
        usleep(1500000);
        return 0;
    }
    smr_end(r, 0, 8);
    uint64_t F = smr_decide(r, 8, 400, why, sizeof(why));
    return F == 0 && strstr(why, "still inside") != NULL ? 0 : 50;
}

static void test_timeout(void **state)
{
    int codes[2];
    (void)state;
    run(2, role_stuck, codes);
    expect_all_zero(2, codes);
}

/* Member 1 stays inside operation 1 (no notice of the failure reaches
 * it) but has a way to be canceled: the service calls it once, 300 ms
 * after member 0 first asked; member 1's operation then fails, and both
 * decide F = 1 (completed nowhere). */
static volatile int canceled;
static void cancel_hook(void *arg)
{
    *(volatile int *)arg += 1;
}

static int role_canceled(smr_rec_t *r, int me)
{
    char why[200] = "";
    int oom;
    smr_set_cancel(r, cancel_hook, (void *)&canceled, 300);
    uint64_t t0 = shp_time_ns();
    smr_begin(r, 8, &oom);
    meet(2);
    if (me == 1) {
        while (!canceled && shp_time_ns() - t0 < 4 * SHP_NSEC_PER_SEC) {
            usleep(1000);
        }
        uint64_t waited = shp_time_ns() - t0;
        if (!canceled || waited < 250 * SHP_NSEC_PER_MSEC) {
            return 70; /* never canceled, or before its time */
        }
        smr_end(r, 0, 8); /* the canceled operation fails */
    } else {
        smr_end(r, 0, 8);
    }
    uint64_t F = smr_decide(r, 8, 5000, why, sizeof(why));
    if (F != 1 || smr_done(r) != 0) {
        return 71;
    }
    /* member 0 was never inside: its hook is never called */
    return (me == 1 ? canceled == 1 : canceled == 0) ? 0 : 72;
}

static void test_cancel_member_inside(void **state)
{
    int codes[2];
    (void)state;
    run(2, role_canceled, codes);
    expect_all_zero(2, codes);
}

/* Barriers (no bytes): member 0 completed, member 1 fetches "nothing". */
static int role_barrier(smr_rec_t *r, int me)
{
    char why[200];
    int oom;
    if (me == 0) {
        smr_begin(r, 0, &oom);
        smr_end(r, 1, 0);
        return 0;
    }
    smr_begin(r, 0, &oom);
    smr_end(r, 0, 0);
    usleep(50000);
    return smr_decide(r, 0, 5000, why, sizeof(why)) == 2 ? 0 : 60;
}

static void test_barrier(void **state)
{
    int codes[2];
    (void)state;
    run(2, role_barrier, codes);
    expect_all_zero(2, codes);
}

/* Questions that are not the protocol's (zeros, other bytes, a
 * connection closed at once) get no answer and do not stop the service:
 * a right question afterwards is answered. */
static int role_garbage(smr_rec_t *r, int me)
{
    char why[200];
    int oom;
    if (me == 0) {
        complete(r, 4, 0x77);
        usleep(1000000);
        return 0;
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = addrs[0].ip;
    sa.sin_port = addrs[0].port;
    for (int k = 0; k < 3; k++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            return 70;
        }
        char junk[256]; /* more than any question */
        memset(junk, k == 1 ? 0 : 0x53, sizeof(junk));
        if (k > 0 && write(fd, junk, sizeof(junk)) != sizeof(junk)) {
            return 71;
        }
        char c[256];
        struct timeval tv = {3, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        /* the service's hello (24 bytes), then nothing but the close */
        ssize_t got = 0, n = 0;
        while (k > 0 && (n = read(fd, c, sizeof(c))) > 0) {
            got += n;
        }
        if (got > 24 || (n < 0 && errno == EAGAIN)) {
            return 72; /* answered garbage, or left it hanging */
        }
        close(fd);
    }
    smr_begin(r, 4, &oom);
    smr_end(r, 0, 4);
    usleep(50000);
    uint64_t F = smr_decide(r, 4, 5000, why, sizeof(why));
    return F == 2 && ((unsigned char *)smr_result(r))[3] == 0x77 ? 0 : 73;
}

static void test_not_the_protocol(void **state)
{
    int codes[2];
    (void)state;
    run(2, role_garbage, codes);
    expect_all_zero(2, codes);
}

/* Slow-loris connections to member 0's service: member 2 (no member of
 * the group) holds LORIS connections open, some silent, some sending a
 * byte now and then, more than the service takes at once, while member 1
 * needs member 0's result.  The recovery completes at once with the right
 * result; the service closes each stalled connection by its own deadline;
 * member 2 then asks member 0 itself, with another job's key: it gets
 * no answer and no result. */
#define LORIS 100

static int open_to(const smr_addr_t *a)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = a->ip;
    sa.sin_port = a->port;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int role_loris(smr_rec_t *r, int me)
{
    char why[200] = "";
    int oom;
    if (me == 0) {
        complete(r, 3000, 0x11);
        complete(r, 3000, 0x42);
        usleep(4500000); /* up while the others ask */
        return 0;
    }
    if (me == 1) {
        complete(r, 3000, 0x11);
        smr_begin(r, 3000, &oom);
        smr_end(r, 0, 3000); /* 2 failed here, completed at member 0 */
        usleep(300000);      /* member 2's connections are held by now */
        uint64_t t0 = shp_time_ns();
        uint64_t F = smr_decide(r, 3000, 3000, why, sizeof(why));
        uint64_t ms = (shp_time_ns() - t0) / SHP_NSEC_PER_MSEC;
        const unsigned char *b = smr_result(r);
        if (F != 3 || smr_done(r) != 2 || b[0] != 0x42 || b[2999] != 0x42) {
            fprintf(stderr, "member 1: F %llu after %llu ms (%s)\n",
                    (unsigned long long)F, (unsigned long long)ms, why);
            return 81;
        }
        return ms < 1500 ? 0 : 82;
    }
    /* member 2: the stranger */
    int fds[LORIS];
    for (int i = 0; i < LORIS; i++) {
        fds[i] = open_to(&addrs[0]);
        if (fds[i] < 0) {
            return 83;
        }
    }
    /* half of them trickle a byte every 100 ms for 3 s */
    uint64_t t0 = shp_time_ns();
    while (shp_time_ns() - t0 < 3 * SHP_NSEC_PER_SEC) {
        for (int i = 0; i < LORIS; i += 2) {
            (void)send(fds[i], "S", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        usleep(100000);
    }
    /* every one was closed by the service by now (2 s each at most) */
    int open_left = 0;
    for (int i = 0; i < LORIS; i++) {
        char c[64];
        ssize_t n;
        while ((n = recv(fds[i], c, sizeof(c), MSG_DONTWAIT)) > 0) {
        }
        open_left += n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        close(fds[i]);
    }
    if (open_left > 0) {
        fprintf(stderr, "member 2: %d stalled connections still open\n",
                open_left);
        return 84;
    }
    /* another job's key: no answer, no result */
    smr_rec_t *s = smr_rec_new(GROUP, 2, 3, addrs);
    if (s == NULL) {
        return 85;
    }
    smr_begin(s, 3000, &oom);
    smr_end(s, 0, 3000);
    uint64_t F = smr_decide(s, 3000, 600, why, sizeof(why));
    int leaked = smr_done(s) != 0 ||
                 (smr_result(s) && ((unsigned char *)smr_result(s))[0] == 0x42);
    smr_rec_free(s);
    if (F != 0 || leaked) {
        fprintf(stderr, "member 2: a stranger got an answer (F %llu)\n",
                (unsigned long long)F);
        return 86;
    }
    return 0;
}

static void test_slow_loris_and_stranger(void **state)
{
    int codes[3];
    (void)state;
    stranger = 2;
    run(3, role_loris, codes);
    stranger = -1;
    expect_all_zero(3, codes);
}

/* A man in the middle: member 1 reaches member 0's service only through
 * a relay in the test process, which records the bytes member 1 sent in
 * its first exchange and sends them again to member 0 on a connection of
 * its own.  Member 1's recovery works through the relay; the replay gets
 * no answer (less back than the exchange it copies): what crosses the
 * network does not let whoever sees it ask again. */

/* c and s relayed both ways until one closes; rec: what c sent (up to
 * cap, *nrec bytes); *back (returned): what s sent */
static size_t relay(int c, int s, char *rec, size_t cap, size_t *nrec,
                    size_t *back)
{
    struct pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
    char buf[8192];
    *nrec = *back = 0;
    while (poll(p, 2, 3000) > 0) {
        int from = (p[0].revents != 0) ? 0 : 1;
        ssize_t n = read(p[from].fd, buf, sizeof(buf));
        if (n <= 0) {
            break;
        }
        if (from == 0 && *nrec + (size_t)n <= cap) {
            memcpy(rec + *nrec, buf, (size_t)n);
            *nrec += (size_t)n;
        }
        *back += from == 1 ? (size_t)n : 0;
        if (write(p[1 - from].fd, buf, (size_t)n) != n) {
            break;
        }
    }
    return *back;
}

static void *mitm_run(void *arg)
{
    (void)arg;
    while (!mitm.stop) {
        struct pollfd pl = {mitm.lfd, POLLIN, 0};
        if (poll(&pl, 1, 50) <= 0) {
            continue;
        }
        int c = accept(mitm.lfd, NULL, NULL);
        int s = open_to(&addrs[0]);
        char rec[4096];
        size_t nrec = 0, back = 0;
        if (c >= 0 && s >= 0) {
            relay(c, s, rec, sizeof(rec), &nrec, &back);
        }
        close(c);
        close(s);
        if (!mitm.replayed && back > 0) {
            mitm.replayed = 1;
            mitm.back = back;
            int t = open_to(&addrs[0]);
            struct timeval tv = {3, 0};
            setsockopt(t, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
            char buf[8192];
            ssize_t n;
            if (t >= 0 && write(t, rec, nrec) == (ssize_t)nrec) {
                while ((n = read(t, buf, sizeof(buf))) > 0) {
                    mitm.replay_back += (size_t)n;
                }
            }
            close(t);
        }
    }
    return NULL;
}

static int role_replayed(smr_rec_t *r, int me)
{
    char why[200] = "";
    int oom;
    complete(r, 500, 0x11);
    if (me == 0) {
        complete(r, 500, 0x42);
        usleep(2000000); /* up for the replay */
        return 0;
    }
    smr_begin(r, 500, &oom);
    smr_end(r, 0, 500);
    usleep(50000);
    uint64_t F = smr_decide(r, 500, 3000, why, sizeof(why));
    const unsigned char *b = smr_result(r);
    return F == 3 && b[0] == 0x42 && b[499] == 0x42 ? 0 : 90;
}

static void test_replay_gets_nothing(void **state)
{
    int codes[2];
    pthread_t th;
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    (void)state;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    mitm.lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(bind(mitm.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(mitm.lfd, 16), 0);
    assert_int_equal(getsockname(mitm.lfd, (struct sockaddr *)&sa, &sl), 0);
    mitm.addr.ip = sa.sin_addr.s_addr;
    mitm.addr.port = sa.sin_port;
    assert_int_equal(pthread_create(&th, NULL, mitm_run, NULL), 0);
    via_mitm = 1;
    run(2, role_replayed, codes);
    via_mitm = -1;
    mitm.stop = 1;
    pthread_join(th, NULL);
    close(mitm.lfd);
    expect_all_zero(2, codes);
    assert_true(mitm.replayed);
    if (mitm.replay_back >= mitm.back) {
        fail_msg("a replayed question got %zu bytes back (the exchange it "
                 "copies: %zu)",
                 mitm.replay_back, mitm.back);
    }
}

/* Windowed operations (bcasts the others send nothing for): a member may
 * complete them while another is behind ---------------------------------- */

/* complete windowed operation `op` (8 bytes of op's low byte) */
static void complete_win(smr_rec_t *r, uint64_t op)
{
    int oom;
    char *b = smr_begin_win(r, 8, &oom);
    assert_non_null(b);
    memset(b, (int)(op & 0xff), 8);
    smr_end(r, 1, 8);
}

/* take the next len-byte result: 1 if every byte is c */
static int take_is(smr_rec_t *r, size_t len, int c)
{
    if (smr_take(r, len) != 1) {
        return 0;
    }
    const unsigned char *b = smr_result(r);
    for (size_t i = 0; i < len; i++) {
        if (b[i] != (unsigned char)c) {
            return 0;
        }
    }
    return 1;
}

/* Member 0 completed windowed operations 3 to 7, member 2 only 3 and 4,
 * member 1 none (it failed in 3): F = 8 everywhere, and each member
 * behind takes the results it missed, in order, as its calls come. */
static int role_window(smr_rec_t *r, int me)
{
    char why[200];
    int oom;
    smr_allow_window(r);
    complete(r, 16, 0x11);
    complete(r, 16, 0x22);
    uint64_t upto = me == 0 ? 7 : me == 2 ? 4 : 2;
    for (uint64_t op = 3; op <= upto; op++) {
        complete_win(r, op);
    }
    if (me == 1) {
        smr_begin_win(r, 8, &oom);
        smr_end(r, 0, 8); /* 3 failed */
    }
    meet(3);
    if (smr_decide(r, 8, 5000, why, sizeof(why)) != 8) {
        fprintf(stderr, "member %d: %s\n", me, why);
        return 70;
    }
    for (uint64_t op = upto + 1; op <= 7; op++) {
        if (!take_is(r, 8, (int)op)) {
            return 71;
        }
    }
    /* operation 8 completed nowhere: redone without sharp */
    return smr_take(r, 8) == 0 && smr_done(r) == 7 ? 0 : 72;
}

static void test_window_behind(void **state)
{
    int codes[3];
    (void)state;
    run(3, role_window, codes);
    expect_all_zero(3, codes);
}

/* Member 0 completed operation 2 (5000 bytes) and windowed 3 and 4; member
 * 1 failed in 2: it takes 2, then 3 and 4 (a call of another length
 * is refused), then 5 is redone. */
static int role_window_after(smr_rec_t *r, int me)
{
    char why[200];
    int oom;
    smr_allow_window(r);
    complete(r, 16, 0x11);
    if (me == 0) {
        complete(r, 5000, 0x22);
        complete_win(r, 3);
        complete_win(r, 4);
        meet(2);
        return 0;
    }
    smr_begin(r, 5000, &oom);
    smr_end(r, 0, 5000);
    meet(2);
    if (smr_decide(r, 5000, 5000, why, sizeof(why)) != 5) {
        fprintf(stderr, "member 1: %s\n", why);
        return 80;
    }
    if (!take_is(r, 5000, 0x22) || smr_take(r, 16) != -1 || !take_is(r, 8, 3) ||
        !take_is(r, 8, 4)) {
        return 81;
    }
    return smr_take(r, 8) == 0 ? 0 : 82;
}

static void test_window_after_op(void **state)
{
    int codes[2];
    (void)state;
    run(2, role_window_after, codes);
    expect_all_zero(2, codes);
}

/* Member 0 is inside windowed operation 3 when member 1 (failed in 2)
 * asks, and completes it later: member 1 waits for it, F = 4. */
static int role_window_front(smr_rec_t *r, int me)
{
    char why[200];
    int oom;
    smr_allow_window(r);
    complete(r, 16, 0x11);
    if (me == 0) {
        complete_win(r, 2);
        char *b = smr_begin_win(r, 8, &oom);
        meet(2);
        usleep(200000);
        memset(b, 3, 8);
        smr_end(r, 1, 8);
        return 0;
    }
    smr_begin_win(r, 8, &oom);
    smr_end(r, 0, 8);
    meet(2);
    if (smr_decide(r, 8, 5000, why, sizeof(why)) != 4) {
        return 90;
    }
    return take_is(r, 8, 2) && take_is(r, 8, 3) && smr_take(r, 8) == 0 ? 0 : 91;
}

static void test_window_wait_front(void **state)
{
    int codes[2];
    (void)state;
    run(2, role_window_front, codes);
    expect_all_zero(2, codes);
}

/* Members further apart than the window: no decision, a reason (the tree
 * keeps members closer; a member must never take a slot reused since). */
static int role_window_far(smr_rec_t *r, int me)
{
    char why[200] = "";
    int oom;
    smr_allow_window(r);
    if (me == 0) {
        for (uint64_t op = 1; op <= SMR_WIN + 1; op++) {
            complete_win(r, op);
        }
        meet(2);
        return 0;
    }
    smr_begin_win(r, 8, &oom);
    smr_end(r, 0, 8);
    meet(2);
    uint64_t F = smr_decide(r, 8, 1000, why, sizeof(why));
    return F == 0 && strstr(why, "window") != NULL ? 0 : 100;
}

/* Member 0 completed windowed 1 to SMR_WIN and is inside SMR_WIN + 1, whose
 * result goes into the slot of 1; it fails there.  Member 1 (failed in 1)
 * must not be given that slot's bytes: no decision within its time. */
static int role_window_reused(smr_rec_t *r, int me)
{
    char why[200] = "";
    int oom;
    smr_allow_window(r);
    if (me == 0) {
        for (uint64_t op = 1; op <= SMR_WIN; op++) {
            complete_win(r, op);
        }
        char *b = smr_begin_win(r, 8, &oom);
        memset(b, 0x77, 8); /* part of a result that will not complete */
        meet(2);
        usleep(100000);
        smr_end(r, 0, 8);
        return 0;
    }
    smr_begin_win(r, 8, &oom);
    smr_end(r, 0, 8);
    meet(2);
    uint64_t F = smr_decide(r, 8, 800, why, sizeof(why));
    return F == 0 && strstr(why, "could not be fetched") != NULL ? 0 : 110;
}

static void test_window_too_far(void **state)
{
    int codes[2];
    (void)state;
    run(2, role_window_far, codes);
    expect_all_zero(2, codes);
    run(2, role_window_reused, codes);
    expect_all_zero(2, codes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buffer_kept_across_small),
        cmocka_unit_test(test_fetch_result),
        cmocka_unit_test(test_completed_nowhere),
        cmocka_unit_test(test_member_behind),
        cmocka_unit_test(test_wait_for_member_inside),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_cancel_member_inside),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_not_the_protocol),
        cmocka_unit_test(test_slow_loris_and_stranger),
        cmocka_unit_test(test_replay_gets_nothing),
        cmocka_unit_test(test_window_behind),
        cmocka_unit_test(test_window_after_op),
        cmocka_unit_test(test_window_wait_front),
        cmocka_unit_test(test_window_too_far),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
