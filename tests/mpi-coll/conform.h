/*
 * mpi_conform's harness, shared by its files (mpi_conform.c: the harness
 * and most cases; mpi_conform_window.c: nbc_window).
 */
#ifndef MPI_CONFORM_H
#define MPI_CONFORM_H

#include <mpi.h>

extern int rank, size;
extern long tri;             /* 0 + 1 + ... + size-1 */
extern MPI_Status sts[4000]; /* a statuses array for every case */

/* "mpi_conform CASE: rank R: FAIL: ..." and MPI_Abort */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void expect(long got, long want, const char *what, int i);
/* buf[j] == base + mul * j for j < n */
void expect_seq(const int *buf, int n, long base, long mul, const char *what);
MPI_Comm dup_world(void);

#define CK(call)                                                               \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != MPI_SUCCESS) {                                              \
            die("%s returned %d", #call, rc_);                                 \
        }                                                                      \
    } while (0)

void case_nbc_window(void);

#endif
