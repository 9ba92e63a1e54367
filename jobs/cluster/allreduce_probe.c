/* allreduce_probe: times MPI_Allreduce (float, sum, MPI_COMM_WORLD) for a few message sizes and
 * reports, per size, the seconds per call and the bytes each node's network interfaces sent during
 * the timed calls (from /sys/class/net/<if>/statistics, i.e. the emulated node's veth counters).
 * Used by docs/cluster.md to measure link efficiency and by tests/cluster to check the ring model.
 *
 *   mpicc -O2 -o /tmp/allreduce_probe jobs/cluster/allreduce_probe.c
 *   jobs/cluster/emulate.sh mpirun -np 2 /tmp/allreduce_probe [-n CALLS] [-w WARMUP] [-i IFACE] [-v] SIZE_BYTES...
 * (-v: one line per timed call as well)
 *
 * One line per size from rank 0 (key=value, for scripts):
 *   probe bytes=3370000 world=2 nodes=2 calls=5 s_per_call=0.2851 s_min=... s_max=...
 *         tx_bytes_per_call_per_node=... ring_bytes_per_call=...
 * ring_bytes_per_call = 2 (W-1)/W * bytes: what one rank of a ring all-reduce over W ranks sends;
 * with one rank per node (or ranks placed in node order) it is also what each node sends.
 * IFACE defaults to every interface but lo; counters of a node are read by its lowest rank. */
#include <mpi.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOST_LEN 64

static void check(int rc, const char *call) {
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "allreduce_probe: %s failed (%d)\n", call, rc);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

/* Sum of tx_bytes over the interfaces (one named, or all but lo); -1 when none can be read. */
static long long tx_bytes(const char *iface) {
  long long sum = -1;
  DIR *d = opendir("/sys/class/net");
  struct dirent *e;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL) {
    char path[512];
    FILE *f;
    long long v;
    if (e->d_name[0] == '.' || strcmp(e->d_name, "lo") == 0) continue;
    if (iface && strcmp(e->d_name, iface) != 0) continue;
    snprintf(path, sizeof path, "/sys/class/net/%s/statistics/tx_bytes", e->d_name);
    if (!(f = fopen(path, "r"))) continue;
    if (fscanf(f, "%lld", &v) == 1) sum = (sum < 0 ? 0 : sum) + v;
    fclose(f);
  }
  closedir(d);
  return sum;
}

static void usage(void) {
  fprintf(stderr, "usage: allreduce_probe [-n CALLS] [-w WARMUP] [-i IFACE] [-v] SIZE_BYTES...\n");
}

int main(int argc, char **argv) {
  int calls = 5, warmup = 1, verbose = 0, opt, rank, world, i, s;
  const char *iface = NULL;
  char host[HOST_LEN] = {0};
  check(MPI_Init(&argc, &argv), "MPI_Init");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  while ((opt = getopt(argc, argv, "n:w:i:v")) != -1) {
    if (opt == 'n') calls = atoi(optarg);
    else if (opt == 'w') warmup = atoi(optarg);
    else if (opt == 'i') iface = optarg;
    else if (opt == 'v') verbose = 1;
    else { if (rank == 0) usage(); MPI_Finalize(); return 1; }
  }
  if (optind >= argc || calls < 1 || warmup < 0) { if (rank == 0) usage(); MPI_Finalize(); return 1; }
  gethostname(host, HOST_LEN - 1);

  /* Node of each rank: the lowest rank with the same hostname reads that node's counters. */
  char *hosts = malloc((size_t)world * HOST_LEN);
  check(MPI_Allgather(host, HOST_LEN, MPI_CHAR, hosts, HOST_LEN, MPI_CHAR, MPI_COMM_WORLD), "MPI_Allgather");
  int reader = 1, nodes = 0;
  for (i = 0; i < world; ++i) {
    int first = 1, j;
    for (j = 0; j < i; ++j) if (strcmp(hosts + (size_t)i * HOST_LEN, hosts + (size_t)j * HOST_LEN) == 0) first = 0;
    nodes += first;
    if (i == rank) reader = first;
  }
  if (rank == 0) {
    printf("probe hosts:");
    for (i = 0; i < world; ++i) printf(" %d=%s", i, hosts + (size_t)i * HOST_LEN);
    printf(" (%d nodes)\n", nodes);
  }

  for (s = optind; s < argc; ++s) {
    long long bytes = atoll(argv[s]);
    size_t count = (size_t)(bytes / (long long)sizeof(float));
    float *buf = malloc(count * sizeof(float) + 1);
    for (i = 0; i < (int)count; ++i) buf[i] = (float)(rank + 1) * 1e-3f;
    for (i = 0; i < warmup; ++i)
      check(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    double t_min = 1e30, t_max = 0, t_sum = 0;
    long long tx0 = 0, tx1 = 0;
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    if (reader) tx0 = tx_bytes(iface);
    for (i = 0; i < calls; ++i) {
      double t0, dt, dt_max;
      check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
      t0 = MPI_Wtime();
      check(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
      dt = MPI_Wtime() - t0;
      check(MPI_Allreduce(&dt, &dt_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce(time)");
      if (verbose && rank == 0) printf("probe call=%d bytes=%lld s=%.6f\n", i, bytes, dt_max);
      t_sum += dt_max;
      if (dt_max < t_min) t_min = dt_max;
      if (dt_max > t_max) t_max = dt_max;
    }
    if (reader) tx1 = tx_bytes(iface);
    long long sent = reader && tx0 >= 0 && tx1 >= 0 ? tx1 - tx0 : 0, sent_sum = 0;
    int counted = reader && tx0 >= 0 && tx1 >= 0, counted_sum = 0;
    check(MPI_Reduce(&sent, &sent_sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce");
    check(MPI_Reduce(&counted, &counted_sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce");
    if (rank == 0) {
      double per_node = counted_sum ? (double)sent_sum / counted_sum / calls : -1;
      double ring = 2.0 * (world - 1) / world * (double)(count * sizeof(float));
      printf("probe bytes=%lld world=%d nodes=%d calls=%d s_per_call=%.4f s_min=%.4f s_max=%.4f "
             "tx_bytes_per_call_per_node=%.0f ring_bytes_per_call=%.0f\n",
             (long long)(count * sizeof(float)), world, nodes, calls, t_sum / calls, t_min, t_max,
             per_node, ring);
      fflush(stdout);
    }
    free(buf);
  }
  free(hosts);
  MPI_Finalize();
  return 0;
}
