/*
 * mpi_threads: several threads of every rank, each driving a communicator
 * of its own at MPI_THREAD_MULTIPLE, every result checked (the hybrid MPI
 * + threads program; tests/mpi-coll/test_threads.sh).  An ordinary MPI
 * program: it knows nothing of sharp.
 *
 * Each thread makes its communicator itself (MPI_Comm_create_group of the
 * world's group, a tag of its own: MPI lets threads make theirs at once),
 * which makes its sharp group, so the groups are made by several threads
 * at once, in whatever order each rank reaches them.  Each phase of a thread: a window of non-blocking
 * allreduces (int64 sums, 1 to 2048 elements) completed by one of six
 * forms in turn (MPI_Waitall, MPI_Test in a loop, MPI_Wait each,
 * MPI_Waitany, MPI_Waitsome, MPI_Testall in a loop: MPI runs the requests'
 * free callbacks inside each), a blocking MPI_Allreduce, an MPI_Barrier
 * and an MPI_Bcast from a rotating root.
 *
 *   mpi_threads [--threads T] [--phases N]
 *
 * Prints "mpi_threads: T threads x N phases, every result right" and exits
 * 0, or the number of wrong results.
 */
#include <mpi.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXT 8
#define WIN 3
#define MAXN 2048

static int rank, size, phases = 200;

typedef struct {
    int id;
    MPI_Group group;
    MPI_Comm comm;
    int errors;
    int64_t in[WIN][MAXN], out[WIN][MAXN];
} thr_t;

static int64_t val(int t, long p, int s, int r, int i)
{
    return (int64_t)((t * 7919 + p * 31 + s * 7 + r * 3 + i) % 1009) - 504;
}

static void fail(thr_t *t, const char *what, long p)
{
    if (t->errors++ < 10) {
        fprintf(stderr, "rank %d thread %d: phase %ld: %s wrong\n", rank, t->id,
                p, what);
    }
}

static int check(thr_t *t, long p, int s, int n)
{
    for (int i = 0; i < n; i++) {
        int64_t want = 0;
        for (int r = 0; r < size; r++) {
            want += val(t->id, p, s, r, i);
        }
        if (t->out[s][i] != want) {
            return 0;
        }
    }
    return 1;
}

/* the window's requests completed by form f (0-5) */
static void complete(MPI_Request req[WIN], long f)
{
    MPI_Status st[WIN];
    int flag = 0, k, idx[WIN];
    switch (f) {
    case 0: MPI_Waitall(WIN, req, st); break;
    case 2:
        for (int s = WIN - 1; s >= 0; s--) {
            MPI_Wait(&req[s], &st[s]);
        }
        break;
    case 3:
        for (int left = WIN; left > 0; left--) {
            MPI_Waitany(WIN, req, &k, st);
        }
        break;
    case 4:
        for (int left = WIN; left > 0; left -= k) {
            MPI_Waitsome(WIN, req, &k, idx, st);
        }
        break;
    case 5:
        while (MPI_Testall(WIN, req, &flag, st), !flag) {
            usleep(20);
        }
        break;
    default:
        for (int done = 0; done < WIN;) {
            done = 0;
            for (int s = 0; s < WIN; s++) {
                flag = 1;
                if (req[s] != MPI_REQUEST_NULL) {
                    MPI_Test(&req[s], &flag, MPI_STATUS_IGNORE);
                }
                done += flag;
            }
            if (done < WIN) {
                usleep(20); /* "compute" a little: 2 cores hold them all */
            }
        }
    }
}

static void window(thr_t *t, long p)
{
    MPI_Request req[WIN];
    int n[WIN];
    for (int s = 0; s < WIN; s++) {
        n[s] = 1 + (int)((p * 977 + s * 131 + t->id * 17) % MAXN);
        for (int i = 0; i < n[s]; i++) {
            t->in[s][i] = val(t->id, p, s, rank, i);
        }
        MPI_Iallreduce(t->in[s], t->out[s], n[s], MPI_INT64_T, MPI_SUM, t->comm,
                       &req[s]);
    }
    complete(req, p % 6);
    for (int s = 0; s < WIN; s++) {
        if (!check(t, p, s, n[s])) {
            fail(t, "an iallreduce", p);
        }
    }
}

static void blocking(thr_t *t, long p)
{
    int64_t x = val(t->id, p, 9, rank, 0), sum = 0, want = 0;
    MPI_Allreduce(&x, &sum, 1, MPI_INT64_T, MPI_SUM, t->comm);
    for (int r = 0; r < size; r++) {
        want += val(t->id, p, 9, r, 0);
    }
    if (sum != want) {
        fail(t, "an allreduce", p);
    }
    MPI_Barrier(t->comm);
    int root = (int)((p + t->id) % size);
    int64_t b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = rank == root ? val(t->id, p, 11, root, i) : -1;
    }
    MPI_Bcast(b, 4, MPI_INT64_T, root, t->comm);
    for (int i = 0; i < 4; i++) {
        if (b[i] != val(t->id, p, 11, root, i)) {
            fail(t, "a bcast", p);
            break;
        }
    }
}

static void *run(void *arg)
{
    thr_t *t = arg;
    /* its group, beside the others' */
    MPI_Comm_create_group(MPI_COMM_WORLD, t->group, 100 + t->id, &t->comm);
    for (long p = 0; p < phases; p++) {
        window(t, p);
        blocking(t, p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int nt = 3, provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nt = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--phases") && i + 1 < argc) {
            phases = atoi(argv[++i]);
        } else {
            nt = 0;
        }
    }
    if (nt < 1 || nt > MAXT || phases < 1) {
        if (rank == 0) {
            fprintf(stderr,
                    "usage: mpi_threads [--threads 1-%d] "
                    "[--phases N]\n",
                    MAXT);
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) {
            printf("mpi_threads: the MPI gives no MPI_THREAD_MULTIPLE\n");
        }
        MPI_Finalize();
        return 77;
    }
    static thr_t th[MAXT];
    pthread_t tid[MAXT];
    for (int i = 0; i < nt; i++) {
        th[i].id = i;
        MPI_Comm_group(MPI_COMM_WORLD, &th[i].group);
    }
    for (int i = 1; i < nt; i++) {
        pthread_create(&tid[i], NULL, run, &th[i]);
    }
    run(&th[0]);
    int errors = th[0].errors;
    for (int i = 1; i < nt; i++) {
        pthread_join(tid[i], NULL);
        errors += th[i].errors;
    }
    int all = 0;
    MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < nt; i++) {
        MPI_Comm_free(&th[i].comm);
        MPI_Group_free(&th[i].group);
    }
    if (rank == 0) {
        if (all == 0) {
            printf("mpi_threads: %d threads x %d phases, every result right\n",
                   nt, phases);
        } else {
            printf("mpi_threads: %d results WRONG\n", all);
        }
        fflush(stdout);
    }
    MPI_Finalize();
    return all > 255 ? 255 : all;
}
