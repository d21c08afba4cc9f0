/*
 * What the MPI test programs that compare results bit for bit share: a
 * mixer for their pseudo-random inputs and a hash of a result's bytes.
 */
#ifndef MPI_TEST_BITS_H
#define MPI_TEST_BITS_H

#include <stddef.h>
#include <stdint.h>

/* a 64-bit mixer (splitmix's finaliser): inputs from (rank, index) */
static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2a9d0bull;
    return x ^ (x >> 33);
}

/* FNV-1a of n bytes: a result's bits in one number */
static inline uint64_t fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 1099511628211ull;
    }
    return h;
}

#endif
