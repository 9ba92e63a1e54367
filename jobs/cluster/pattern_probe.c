/* pattern_probe: times three ways of moving the same all-reduce bytes across the emulated
 * cluster, to choose the point-to-point pattern of comm::BucketReducer (docs/scaling.md):
 *   allreduce  MPI_Allreduce per bucket (the cluster's collective rules: a ring from 64 KiB);
 *   alltoall   reduce-scatter then all-gather, each rank messaging all W-1 peers at once;
 *   pairwise   the same rounds one peer at a time: step s sends to rank+s, receives from rank-s;
 *   ring       W-1 steps of partial sums to the right neighbour, then W-1 steps of the results.
 * Every pattern sends 2 (W-1)/W x bytes per rank. Values are zeros: only the time is measured.
 *
 *   mpicc -O2 -o /tmp/pattern_probe jobs/cluster/pattern_probe.c
 *   jobs/cluster/emulate.sh mpirun -np 4 /tmp/pattern_probe BYTES BUCKET_BYTES CALLS REPEATS
 *
 * Prints from rank 0, per repeat and pattern, in an interleaved order (so that load changes hit
 * every pattern alike): "pattern=ring bytes=3370000 bucket=1048576 s_per_call=2.311". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int W, me;

static void check(int rc, const char *call) {
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "pattern_probe: %s failed (%d)\n", call, rc);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

static void exchange(float *send, int to, float *recv, int from, int count, int tag) {
  MPI_Request rq[2];
  check(MPI_Irecv(recv, count, MPI_FLOAT, from, tag, MPI_COMM_WORLD, &rq[0]), "MPI_Irecv");
  check(MPI_Isend(send, count, MPI_FLOAT, to, tag, MPI_COMM_WORLD, &rq[1]), "MPI_Isend");
  check(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE), "MPI_Waitall");
}

static void add(float *acc, const float *x, int count) {
  for (int i = 0; i < count; ++i) acc[i] += x[i];
}

/* Rank r owns chunk r: receives every peer's copy of it (rows), sums, sends the sum to every peer. */
static void alltoall(float *buf, float *rows, int n, int one_peer_at_a_time) {
  const int per = n / W;
  MPI_Request *rq = malloc(sizeof(MPI_Request) * 2 * (size_t)W);
  for (int phase = 0; phase < 2; ++phase) {
    int k = 0;
    for (int s = 1; s < W; ++s) {
      const int to = (me + s) % W, from = (me - s + W) % W;
      float *send = phase == 0 ? buf + to * per : buf + me * per;
      float *recv = phase == 0 ? rows + from * per : buf + from * per;
      if (one_peer_at_a_time) {
        exchange(send, to, recv, from, per, phase);
        continue;
      }
      check(MPI_Irecv(recv, per, MPI_FLOAT, from, phase, MPI_COMM_WORLD, &rq[k++]), "MPI_Irecv");
      check(MPI_Isend(send, per, MPI_FLOAT, to, phase, MPI_COMM_WORLD, &rq[k++]), "MPI_Isend");
    }
    if (k > 0) check(MPI_Waitall(k, rq, MPI_STATUSES_IGNORE), "MPI_Waitall");
    if (phase == 0)
      for (int j = 0; j < W; ++j)
        if (j != me) add(buf + me * per, rows + j * per, per);
  }
  free(rq);
}

static void ring(float *buf, float *tmp, int n) {
  const int per = n / W, right = (me + 1) % W, left = (me - 1 + W) % W;
  for (int s = 0; s < W - 1; ++s) {
    const int send = (me - 1 - s + 2 * W) % W, recv = (me - 2 - s + 2 * W) % W;
    exchange(buf + send * per, right, tmp, left, per, 0);
    add(buf + recv * per, tmp, per);
  }
  for (int s = 0; s < W - 1; ++s) {
    const int send = (me - s + W) % W, recv = (me - 1 - s + W) % W;
    exchange(buf + send * per, right, buf + recv * per, left, per, 1);
  }
}

int main(int argc, char **argv) {
  check(MPI_Init(&argc, &argv), "MPI_Init");
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (argc != 5) {
    if (me == 0) fprintf(stderr, "usage: pattern_probe BYTES BUCKET_BYTES CALLS REPEATS\n");
    MPI_Finalize();
    return 2;
  }
  const int n = atoi(argv[1]) / 4 / W * W, bucket = atoi(argv[2]) / 4 / W * W;
  const int calls = atoi(argv[3]), repeats = atoi(argv[4]);
  if (n <= 0 || bucket <= 0 || calls <= 0 || repeats <= 0) {
    if (me == 0) fprintf(stderr, "pattern_probe: BYTES and BUCKET_BYTES >= 4 x ranks, CALLS and REPEATS >= 1\n");
    MPI_Finalize();
    return 2;
  }
  float *buf = calloc((size_t)n, 4), *scratch = calloc((size_t)n, 4);
  if (!buf || !scratch) {
    fprintf(stderr, "pattern_probe: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  static const char *names[4] = {"allreduce", "alltoall", "pairwise", "ring"};
  for (int rep = 0; rep < repeats; ++rep)
    for (int p = 0; p < 4; ++p) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int c = 0; c < calls; ++c)
        for (int b = 0; b < n; b += bucket) {
          const int count = b + bucket <= n ? bucket : n - b;
          if (p == 0)
            check(MPI_Allreduce(MPI_IN_PLACE, buf + b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
          else if (p == 3)
            ring(buf + b, scratch, count);
          else
            alltoall(buf + b, scratch + b, count, p == 2);
        }
      MPI_Barrier(MPI_COMM_WORLD);
      if (me == 0)
        printf("pattern=%s bytes=%d bucket=%d s_per_call=%.3f\n", names[p], n * 4, bucket * 4,
               (MPI_Wtime() - t0) / calls);
      fflush(stdout);
    }
  free(buf);
  free(scratch);
  MPI_Finalize();
  return 0;
}
