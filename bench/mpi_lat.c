/*
 * mpi_lat: OSU-style MPI latency (warm-up, iterations, mean over ranks'
 * maximum) for MPI_Allreduce (float sum) of 4 B to 1 MiB and MPI_Barrier.
 * Prints one line per size: "allreduce BYTES US" and "barrier 0 US".
 * An ordinary MPI program: bench/mpi.sh runs it through sharp, over TCP and
 * over shared memory.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    float *a = calloc(1 << 18, sizeof(float)), *b = calloc(1 << 18, 4);
    for (int bytes = 4; bytes <= (1 << 20); bytes *= 4) {
        int n = bytes / 4, iters = bytes <= 4096    ? 200
                                   : bytes <= 65536 ? 50
                                                    : 10;
        for (int i = 0; i < 10; i++)
            MPI_Allreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double us = (MPI_Wtime() - t0) * 1e6 / iters, max;
        MPI_Reduce(&us, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("allreduce %d %.2f\n", bytes, max);
    }
    for (int i = 0; i < 10; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < 200; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    double us = (MPI_Wtime() - t0) * 1e6 / 200, max;
    MPI_Reduce(&us, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("barrier 0 %.2f\n", max);
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
