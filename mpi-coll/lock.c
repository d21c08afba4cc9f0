/*
 * libsharp_mpi: the layer's lock, for programs at MPI_THREAD_MULTIPLE
 * (sharp_mpi_int.h says what it guards).  A plain mutex with a depth per
 * thread, so that a thread can take it again inside a call that holds it,
 * and let it go entirely before it waits for other processes: a lock held
 * across such a wait would let two threads of two ranks, each waiting for
 * the other rank's other thread, wait for ever.  Without MPI_THREAD_MULTIPLE
 * (smpi.threads 0) smpi_lock and smpi_unlock (inline, sharp_mpi_int.h) call
 * nothing: the single-threaded path pays one predictable branch.
 */
#include "mpi-coll/sharp_mpi_int.h"

#include <pthread.h>

static pthread_mutex_t smpi_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int smpi_depth;

void smpi_lock_mt(void)
{
    if (smpi_depth++ == 0) {
        pthread_mutex_lock(&smpi_mu);
    }
}

void smpi_unlock_mt(void)
{
    if (--smpi_depth == 0) {
        pthread_mutex_unlock(&smpi_mu);
    }
}

int smpi_release(void)
{
    int d = smpi_depth;
    if (smpi.threads && d > 0) {
        smpi_depth = 0;
        pthread_mutex_unlock(&smpi_mu);
    }
    return d;
}

void smpi_regain(int depth)
{
    if (smpi.threads && depth > 0) {
        pthread_mutex_lock(&smpi_mu);
        smpi_depth = depth;
    }
}
