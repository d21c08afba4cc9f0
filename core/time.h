/* Monotonic-clock helpers. */
#ifndef SHP_COMMON_TIME_H
#define SHP_COMMON_TIME_H

#include <stdint.h>
#include <time.h>

#define SHP_NSEC_PER_SEC 1000000000ull
#define SHP_NSEC_PER_MSEC 1000000ull
#define SHP_NSEC_PER_USEC 1000ull

/* Nanoseconds on CLOCK_MONOTONIC: never jumps, not wall time. */
static inline uint64_t shp_time_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SHP_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static inline uint64_t shp_time_ms(void)
{
    return shp_time_ns() / SHP_NSEC_PER_MSEC;
}

static inline double shp_time_sec(void)
{
    return (double)shp_time_ns() / (double)SHP_NSEC_PER_SEC;
}

/* A deadline `timeout_ms` from now; a negative timeout never expires. */
static inline uint64_t shp_deadline_ms(int64_t timeout_ms)
{
    return timeout_ms < 0
               ? UINT64_MAX
               : shp_time_ns() + (uint64_t)timeout_ms * SHP_NSEC_PER_MSEC;
}

static inline int shp_deadline_passed(uint64_t deadline_ns)
{
    return deadline_ns != UINT64_MAX && shp_time_ns() >= deadline_ns;
}

/* Milliseconds left until a deadline, clamped to [0, INT32_MAX]; -1 if the
 * deadline never expires (poll(2) convention). */
int shp_deadline_left_ms(uint64_t deadline_ns);

#endif
