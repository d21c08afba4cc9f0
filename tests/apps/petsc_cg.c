/*
 * petsc_cg: a PETSc Krylov solve whose residual history is printed exactly,
 * for the application tests and benches of issue 59 (tests/apps/
 * test_petsc_exact.sh, bench/apps.sh).  Built against the installed PETSc
 * by the scripts, like PETSc's tutorials; it knows nothing of sharp.
 *
 * The operator is the 2-D Laplacian's 5-point stencil on an M x N grid
 * (rows split over the ranks as PETSc decides), the right-hand side A u
 * for a u whose values jump from row to row; the solver is whatever the options say (-ksp_type,
 * -pc_type, -ksp_rtol, -ksp_max_it ...: KSPSetFromOptions).
 *
 *   petsc_cg [-m M] [-n N] [-signal_at K[,K2...] -signal_file FILE]
 *            [PETSc options]
 *
 *   -signal_at K -signal_file FILE   rank 0 creates FILE at iteration K of
 *                                    the solve (a test kills a daemon then);
 *                                    with several K (up to 4), FILE.1 at
 *                                    the first, FILE.2 at the second ...
 *
 * Rank 0 prints, after the solve:
 *   reason R iterations I
 *   solve_s S            KSPSolve's time on rank 0 (MPI_Wtime)
 *   iter_ms MED MAX      the median and the longest iteration (the time
 *                        between two calls of the monitor)
 *   iter_ms_signal B A S with -signal_at: the mean iteration before the
 *                        last signal and after it, and the seconds from
 *                        it to the end of the solve
 *   error E              |x - u|, in C's %a (every bit)
 *   norm K V             the residual history, one a line, %a
 * and exits 0 (PETSc's own errors abort the job).
 */
#include <petscksp.h>

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    PetscInt signal_at[4], nsignals;
    char signal_file[PETSC_MAX_PATH_LEN];
    PetscBool signal;
    PetscMPIInt rank;
    double *stamps; /* MPI_Wtime at each monitor call */
    PetscInt nstamps, max_stamps;
} cg_watch_t;

static PetscErrorCode cg_monitor(KSP ksp, PetscInt it, PetscReal rnorm,
                                 void *arg)
{
    cg_watch_t *w = arg;

    (void)ksp;
    (void)rnorm;
    if (w->nstamps < w->max_stamps)
        w->stamps[w->nstamps++] = MPI_Wtime();
    for (PetscInt j = 0; w->signal && w->rank == 0 && j < w->nsignals; j++) {
        if (it != w->signal_at[j])
            continue;
        char name[PETSC_MAX_PATH_LEN + 16];
        if (w->nsignals == 1)
            snprintf(name, sizeof(name), "%s", w->signal_file);
        else
            snprintf(name, sizeof(name), "%s.%d", w->signal_file, (int)j + 1);
        FILE *f = fopen(name, "w");
        if (f != NULL)
            fclose(f);
    }
    return 0;
}

/* the 5-point Laplacian on an m x n grid, rows split by PETSc */
static PetscErrorCode cg_operator(PetscInt m, PetscInt n, Mat *a)
{
    PetscInt lo, hi;

    PetscCall(MatCreate(PETSC_COMM_WORLD, a));
    PetscCall(MatSetSizes(*a, PETSC_DECIDE, PETSC_DECIDE, m * n, m * n));
    PetscCall(MatSetFromOptions(*a));
    PetscCall(MatMPIAIJSetPreallocation(*a, 5, NULL, 5, NULL));
    PetscCall(MatSeqAIJSetPreallocation(*a, 5, NULL));
    PetscCall(MatGetOwnershipRange(*a, &lo, &hi));
    for (PetscInt row = lo; row < hi; row++) {
        PetscInt i = row / n, j = row % n, cols[5], k = 0;
        PetscScalar vals[5];
        if (i > 0)
            cols[k] = row - n, vals[k++] = -1.0;
        if (i < m - 1)
            cols[k] = row + n, vals[k++] = -1.0;
        if (j > 0)
            cols[k] = row - 1, vals[k++] = -1.0;
        if (j < n - 1)
            cols[k] = row + 1, vals[k++] = -1.0;
        cols[k] = row, vals[k++] = 4.0;
        PetscCall(MatSetValues(*a, 1, &row, k, cols, vals, INSERT_VALUES));
    }
    PetscCall(MatAssemblyBegin(*a, MAT_FINAL_ASSEMBLY));
    PetscCall(MatAssemblyEnd(*a, MAT_FINAL_ASSEMBLY));
    return 0;
}

/* u: values in [0, 1) that jump from row to row (every frequency of the
 * grid, so CG needs many iterations), the same for any number of ranks */
static PetscErrorCode cg_solution(Vec u)
{
    PetscInt lo, hi;
    PetscScalar *v;

    PetscCall(VecGetOwnershipRange(u, &lo, &hi));
    PetscCall(VecGetArray(u, &v));
    for (PetscInt row = lo; row < hi; row++)
        v[row - lo] = (PetscScalar)((row * 7919) % 1009) / 1009.0;
    PetscCall(VecRestoreArray(u, &v));
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* rank 0's lines (see the head of the file) */
static PetscErrorCode cg_report(KSP ksp, Vec x, Vec u, double secs,
                                cg_watch_t *w)
{
    KSPConvergedReason reason;
    PetscInt its, nh;
    const PetscReal *h;
    PetscReal err;
    double med = 0, max = 0, before = 0, after = 0, tail = 0;

    PetscCall(KSPGetConvergedReason(ksp, &reason));
    PetscCall(KSPGetIterationNumber(ksp, &its));
    PetscCall(KSPGetResidualHistory(ksp, &h, &nh));
    PetscCall(VecAXPY(x, -1.0, u));
    PetscCall(VecNorm(x, NORM_2, &err));
    PetscInt last = w->nsignals > 0 ? w->signal_at[w->nsignals - 1] : 0;
    PetscInt k = last > 0 && last < w->nstamps - 1 ? last : 0;
    if (k > 0) { /* the mean iteration before the signal and after it */
        before = (w->stamps[k] - w->stamps[0]) / (double)k;
        tail = w->stamps[w->nstamps - 1] - w->stamps[k];
        after = tail / (double)(w->nstamps - 1 - k);
    }
    for (PetscInt i = 1; i < w->nstamps; i++)
        w->stamps[i - 1] = w->stamps[i] - w->stamps[i - 1];
    if (w->nstamps > 1) {
        qsort(w->stamps, (size_t)w->nstamps - 1, sizeof(double), cmp_double);
        med = w->stamps[(w->nstamps - 1) / 2];
        max = w->stamps[w->nstamps - 2];
    }
    if (w->rank != 0)
        return 0;
    printf("reason %d iterations %d\nsolve_s %.6f\niter_ms %.4f %.4f\n",
           (int)reason, (int)its, secs, med * 1e3, max * 1e3);
    if (k > 0)
        printf("iter_ms_signal %.4f %.4f %.6f\n", before * 1e3, after * 1e3,
               tail);
    printf("error %a\n", (double)err);
    for (PetscInt i = 0; i < nh; i++)
        printf("norm %d %a\n", (int)i, (double)h[i]);
    fflush(stdout);
    return 0;
}

static PetscErrorCode cg_main(void)
{
    PetscInt m = 32, n = 32, max_it = 10000;
    cg_watch_t w = {.nsignals = 4};
    Mat a;
    Vec x, b, u;
    KSP ksp;

    PetscCall(PetscOptionsGetInt(NULL, NULL, "-m", &m, NULL));
    PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &n, NULL));
    PetscBool have_at = PETSC_FALSE;
    PetscCall(PetscOptionsGetIntArray(NULL, NULL, "-signal_at", w.signal_at,
                                      &w.nsignals, &have_at));
    if (!have_at)
        w.nsignals = 0;
    PetscCall(PetscOptionsGetString(NULL, NULL, "-signal_file", w.signal_file,
                                    sizeof(w.signal_file), &w.signal));
    PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &w.rank));
    PetscCall(cg_operator(m, n, &a));
    PetscCall(MatCreateVecs(a, &u, &b));
    PetscCall(VecDuplicate(u, &x));
    PetscCall(cg_solution(u));
    PetscCall(MatMult(a, u, b));
    PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
    PetscCall(KSPSetOperators(ksp, a, a));
    PetscCall(KSPSetFromOptions(ksp));
    PetscCall(KSPGetTolerances(ksp, NULL, NULL, NULL, &max_it));
    PetscCall(KSPSetResidualHistory(ksp, NULL, max_it + 1, PETSC_TRUE));
    w.max_stamps = max_it + 1;
    PetscCall(PetscMalloc1(w.max_stamps, &w.stamps));
    PetscCall(KSPMonitorSet(ksp, cg_monitor, &w, NULL));
    PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
    double t0 = MPI_Wtime();
    PetscCall(KSPSolve(ksp, b, x));
    double secs = MPI_Wtime() - t0;
    PetscCall(cg_report(ksp, x, u, secs, &w));
    PetscCall(PetscFree(w.stamps));
    PetscCall(KSPDestroy(&ksp));
    PetscCall(VecDestroy(&x));
    PetscCall(VecDestroy(&b));
    PetscCall(VecDestroy(&u));
    PetscCall(MatDestroy(&a));
    return 0;
}

int main(int argc, char **argv)
{
    PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
    PetscCall(cg_main());
    PetscCall(PetscFinalize());
    return 0;
}
