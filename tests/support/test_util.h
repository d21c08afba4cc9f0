/* Helpers shared by the unit tests (header-only). */
#ifndef SHP_TEST_UTIL_H
#define SHP_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <ev.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/log.h"
#include "core/time.h"

/* Every warning or error a test logs is counted here; a test that does not
 * expect any asserts the count stays 0 (see test_log_expect_none()). */
static int test_log_warnings;
static char test_log_last[1024];

static void test_log_handler(int level, const char *err_id, const char *msg,
                             void *arg)
{
    (void)arg;
    if (level <= SHP_LOG_WARN) {
        test_log_warnings++;
        snprintf(test_log_last, sizeof(test_log_last), "%s%s%s",
                 err_id ? err_id : "", err_id ? " " : "", msg);
    }
}

static inline void test_log_capture(void)
{
    shp_log_set_level(SHP_LOG_INFO);
    shp_log_set_handler(test_log_handler, NULL);
    test_log_warnings = 0;
    test_log_last[0] = '\0';
}

static inline int test_log_setup(void **state)
{
    (void)state;
    test_log_capture();
    return 0;
}

/* Fails the test if anything logged a warning or an error. */
static inline int test_log_teardown(void **state)
{
    (void)state;
    if (test_log_warnings != 0) {
        print_error("unexpected warning/error logged: %s\n", test_log_last);
        return -1;
    }
    return 0;
}

/* Run `_loop` without blocking while `_cond` holds, for at most `_secs`. */
#define TEST_RUN_WHILE(_loop, _cond, _secs)                                    \
    do {                                                                       \
        uint64_t end_ = shp_time_ns() + (uint64_t)((_secs)*1e9);               \
        while ((_cond) && shp_time_ns() < end_) {                              \
            ev_run((_loop), EVRUN_NOWAIT);                                     \
            usleep(200);                                                       \
        }                                                                      \
    } while (0)

/* xorshift64*: deterministic test data from a seed. */
static inline uint64_t test_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Starts argv[0] with stdout and stderr appended to `log`: its pid, or -1
 * if it could not fork. */
static inline pid_t test_start(char *const argv[], const char *log)
{
    pid_t pid = fork();

    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* The directory of this test program (build/tests/ROOM) into dir; -1 if
 * it cannot be read */
static inline int test_self_dir(char *dir, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", dir, size - 1);
    char *slash;

    if (n <= 0) {
        return -1;
    }
    dir[n] = '\0';
    slash = strrchr(dir, '/');
    if (slash != NULL) {
        *slash = '\0';
    }
    return 0;
}

/* At least `want` descriptors, as far as the hard limit allows (floods of
 * connections) */
static inline void test_raise_nofile(rlim_t want)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* test_start, asserted */
static inline pid_t test_spawn(char *const argv[], const char *log)
{
    pid_t pid = test_start(argv, log);

    assert_true(pid >= 0);
    return pid;
}

#endif
