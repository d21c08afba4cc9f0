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
 * protocol's.
 */
#include "mpi-coll/recover.h"
#include "core/time.h"
#include "tests/support/test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXN 4
#define COOKIE 0x1234abcd5678ef90ull
#define GROUP 77

/* what a member does once every member's service is known; its exit code
 * is its verdict (0 right) */
typedef int (*role_t)(smr_rec_t *r, int me);

static smr_addr_t addrs[MAXN];

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
    for (int i = 0; i < n; i++) {
        assert_int_equal(pipe(up[i]), 0);
        assert_int_equal(pipe(down[i]), 0);
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            smr_addr_t me;
            alarm(30);
            if (smr_start("127.0.0.1", COOKIE, &me) != 0 ||
                write(up[i][1], &me, sizeof(me)) != sizeof(me) ||
                read(down[i][0], addrs, sizeof(addrs)) != sizeof(addrs)) {
                _exit(90);
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
    for (int i = 0; i < n; i++) {
        if (codes[i] != 0) {
            fail_msg("member %d: verdict %d", i, codes[i]);
        }
    }
}

/* Member 0 completed operation 3 (result 0x33 x 5000), members 1 and 2
 * failed in it: both decide F = 4 and get the result. */
static int role_fetch(smr_rec_t *r, int me)
{
    char why[200];
    complete(r, 5000, 0x11);
    complete(r, 5000, 0x22);
    if (me == 0) {
        complete(r, 5000, 0x33);
        return 0;
    }
    int oom;
    smr_begin(r, 5000, &oom);
    smr_end(r, 0, 5000); /* failed */
    usleep(50000);       /* member 0 is done by now */
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

static void test_fetch_result(void **state)
{
    int codes[3];
    (void)state;
    run(3, role_fetch, codes);
    expect_all_zero(3, codes);
}

/* Every member failed in operation 2, outside it now: F = 2 everywhere. */
static int role_nowhere(smr_rec_t *r, int me)
{
    char why[200];
    int oom;
    (void)me;
    complete(r, 16, 0x11);
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
        smr_begin(r, 64, &oom);
        smr_end(r, 0, 64); /* 3 failed */
        uint64_t F = smr_decide(r, 64, 5000, why, sizeof(why));
        return F == 3 && smr_done(r) == 2 ? 0 : 30;
    }
    smr_begin(r, 64, &oom); /* inside 2 */
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
        char junk[64];
        memset(junk, k == 1 ? 0 : 0x53, sizeof(junk));
        if (k > 0 && write(fd, junk, sizeof(junk)) != sizeof(junk)) {
            return 71;
        }
        char c;
        struct timeval tv = {3, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ssize_t got = k > 0 ? read(fd, &c, 1) : 0;
        if (got > 0 || (got < 0 && errno == EAGAIN)) {
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fetch_result),
        cmocka_unit_test(test_completed_nowhere),
        cmocka_unit_test(test_member_behind),
        cmocka_unit_test(test_wait_for_member_inside),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_cancel_member_inside),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_not_the_protocol),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
