/*
 * libsharp_yield: a preloaded shim that makes a busy-polling MPI give the
 * CPU away while it waits.
 *
 * Debian's MPICH 4.0.2 (ch4 over UCX) waits by calling ucp_worker_progress
 * in a loop and never yields (MPIR_CVAR_POLLS_BEFORE_YIELD is ch3's; ch4
 * ignores it).  With more ranks than cores, and the daemons of a
 * one-machine sharp fabric on the same cores, the ranks that wait take the
 * CPU from the ones (and the daemons) they wait for.  This wraps
 * ucp_worker_progress: after SHARP_YIELD_POLLS calls in a row that found
 * nothing to do, the calling thread sleeps SHARP_YIELD_USEC microseconds
 * (the kernel's timer slack, 50 us by default, comes on top) before each
 * further empty call, until one finds work again.
 *
 *   mpiexec -n 8 -genv LD_PRELOAD libsharp_yield.so ./app
 *
 *   SHARP_YIELD_POLLS  empty polls before sleeping (default 64; 0: never
 *                      sleep, the shim does nothing)
 *   SHARP_YIELD_USEC   microseconds of each sleep (default 20; 0:
 *                      sched_yield instead)
 *
 * It does nothing to a process that does not load UCX.  Use it on
 * oversubscribed nodes only: on a dedicated core a sleep adds latency.
 */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define API __attribute__((visibility("default")))

typedef unsigned (*progress_fn)(void *worker);

static progress_fn real_progress;
static long polls = -1, usec;
static __thread long idle;

static long env_num(const char *name, long dflt)
{
    const char *v = getenv(name);
    char *end;
    if (v == NULL || *v == '\0') {
        return dflt;
    }
    long x = strtol(v, &end, 10);
    if (*end != '\0' || x < 0) {
        fprintf(stderr, "sharp_yield: ignoring %s=%s (not a number >= 0)\n",
                name, v);
        return dflt;
    }
    return x;
}

static void setup(void)
{
    real_progress = (progress_fn)dlsym(RTLD_NEXT, "ucp_worker_progress");
    usec = env_num("SHARP_YIELD_USEC", 20);
    polls = env_num("SHARP_YIELD_POLLS", 64);
}

/* ucp_worker_h is a pointer; UCX's headers are not needed for this */
API unsigned ucp_worker_progress(void *worker)
{
    if (real_progress == NULL) {
        setup();
        if (real_progress == NULL) {
            fprintf(stderr, "sharp_yield: no ucp_worker_progress to wrap\n");
            abort();
        }
    }
    unsigned n = real_progress(worker);
    if (n != 0 || polls == 0) {
        idle = 0;
        return n;
    }
    if (++idle >= polls) {
        if (usec > 0) {
            struct timespec ts = {usec / 1000000, (usec % 1000000) * 1000};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            }
        } else {
            sched_yield();
        }
    }
    return n;
}
