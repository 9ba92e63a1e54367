// Internal: moving checkpoint state between ranks with the Communicator's broadcast and send/recv —
// tensor maps (a header of names/dtypes/shapes, then each tensor's bytes straight into its
// storage), the scalar part of a Snapshot, and the gather of per-rank entries to rank 0.
#pragma once
#include <string>
#include <vector>

#include "checkpoint/layout.h"
#include "comm/communicator.h"

namespace ht::checkpoint::detail {

// CPU, contiguous, dtype kept (no copy when the tensor already is).
TensorMap normalized(const TensorMap& m);
// Collective: after the call every rank holds root's map (m must be normalized on root).
void broadcast_tensors(comm::Communicator& comm, TensorMap& m, int root);
// Point-to-point: m (normalized) to rank dest / the map rank src sent.
void send_tensors(comm::Communicator& comm, const TensorMap& m, int dest);
TensorMap recv_tensors(comm::Communicator& comm, int src);
// Collective: rank 0 gets every rank's map (index = rank); other ranks get an empty vector.
// Point-to-point to rank 0: no other rank receives (or holds) anybody else's payload.
std::vector<TensorMap> gather_to_root(comm::Communicator& comm, const TensorMap& mine);
// Collective: ints, reals, strings, world_size, step and path of root's snapshot to all.
void broadcast_scalars(comm::Communicator& comm, Snapshot& s, int root);

}  // namespace ht::checkpoint::detail
