/*
 * mpi_layer: measures libsharp_mpi's own cost per offloaded MPI_Allreduce,
 * the time spent in the MPI layer outside the libsharp_coll call it makes
 * (the paper's figure for its MPI layer: 0.2-0.4 us).  Preloaded in front
 * of libsharp_mpi by bench/mpi.sh: it wraps MPI_Allreduce (the whole call)
 * and the native part (sharp_coll_do_allreduce, or its _nb form and the
 * request's test and wait: the engine's blocking call) and, at MPI_Finalize,
 * prints to stderr
 *   "sharp_mpi_layer[RANK]: MPI layer's own cost: N ns per call (CALLS calls)"
 * N is the median over the calls: a rank preempted inside the layer (all
 * processes share the cores) would make a mean meaningless.  Calls that
 * did not reach libsharp_coll (fallbacks) are not counted.  The two extra
 * clock reads of the inner timing are part of N (a few tens of ns on this
 * machine's vDSO clock).
 */
#include <sharp/api/sharp_coll.h>

#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { MAX_SAMPLES = 1 << 16 };
static unsigned long long inner_ns, calls;
static unsigned own[MAX_SAMPLES];
static int in_call, reached;

static int cmp_u(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull +
           (unsigned long long)ts.tv_nsec;
}

/* the native part's time, inside an MPI_Allreduce */
static void native(unsigned long long t0)
{
    if (in_call) {
        inner_ns += now_ns() - t0;
        reached = 1;
    }
}

/* The native calls a blocking allreduce makes: the operation's post
 * (blocking, or non-blocking and waited for), and its test and wait.  Each
 * wrapper calls the next definition (libsharp_coll's) and counts its time
 * as native. */
#define NATIVE(name, params, args)                                             \
    int name params                                                            \
    {                                                                          \
        static int(*next) params;                                              \
        if (next == NULL)                                                      \
            *(void **)&next = dlsym(RTLD_NEXT, #name);                         \
        unsigned long long t0 = now_ns();                                      \
        int rc = next args;                                                    \
        native(t0);                                                            \
        return rc;                                                             \
    }

NATIVE(sharp_coll_do_allreduce,
       (struct sharp_coll_comm * comm, struct sharp_coll_reduce_spec *spec),
       (comm, spec))
NATIVE(sharp_coll_do_allreduce_nb,
       (struct sharp_coll_comm * comm, struct sharp_coll_reduce_spec *spec,
        void **handle),
       (comm, spec, handle))
NATIVE(sharp_coll_req_test, (void *handle), (handle))
NATIVE(sharp_coll_req_wait, (void *handle), (handle))

int MPI_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt,
                  MPI_Op op, MPI_Comm comm)
{
    static int (*next)(const void *, void *, int, MPI_Datatype, MPI_Op,
                       MPI_Comm);
    if (next == NULL)
        *(void **)&next = dlsym(RTLD_NEXT, "MPI_Allreduce");
    inner_ns = 0;
    in_call = 1;
    reached = 0;
    unsigned long long t0 = now_ns();
    int rc = next(sbuf, rbuf, count, dt, op, comm);
    unsigned long long t = now_ns() - t0;
    in_call = 0;
    if (reached && calls < MAX_SAMPLES)
        own[calls++] = (unsigned)(t - inner_ns);
    return rc;
}

int MPI_Finalize(void)
{
    static int (*next)(void);
    int rank = -1;
    if (next == NULL)
        *(void **)&next = dlsym(RTLD_NEXT, "MPI_Finalize");
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (calls > 0) {
        qsort(own, calls, sizeof(own[0]), cmp_u);
        fprintf(stderr,
                "sharp_mpi_layer[%d]: MPI layer's own cost: %u ns per call "
                "(%llu calls)\n",
                rank, own[calls / 2], calls);
    }
    return next();
}
