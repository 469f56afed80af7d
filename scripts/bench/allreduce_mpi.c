/* The baseline of `dist_bench allreduce`: MPI_Allreduce (sum, float, in place) called directly,
 * same sizes, repetitions and timing (the slowest rank's time per repetition, medianed). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (size_t bytes = 1024; bytes <= ((size_t)256 << 20); bytes *= 4) {
    size_t n = bytes / 4;
    float *buf = malloc(bytes);
    for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
    long reps = (long)((64 << 20) / bytes);
    if (reps < 5) reps = 5;
    if (reps > 200) reps = 200;
    for (int w = 0; w < 3; w++)
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double *times = malloc(sizeof(double) * reps);
    for (long r = 0; r < reps; r++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t = MPI_Wtime() - t0, slowest;
      MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times[r] = slowest;
    }
    qsort(times, reps, sizeof(double), cmp);
    double med = times[reps / 2];
    if (rank == 0)
      printf("allreduce mpi-c bytes=%zu us=%.1f busbw_GBps=%.3f\n", bytes, med * 1e6,
             2.0 * (size - 1) / size * bytes / med / 1e9);
    free(times);
    free(buf);
  }
  MPI_Finalize();
  return 0;
}
