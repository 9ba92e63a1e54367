// Internal: moving checkpoint state between ranks with the Communicator's broadcast only —
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
// Collective: rank 0 gets every rank's map (index = rank); other ranks get an empty vector.
// A loop of broadcasts: every rank sees every payload, so per-rank state should stay small.
std::vector<TensorMap> gather_to_root(comm::Communicator& comm, const TensorMap& mine);
// Collective: ints, reals, strings, world_size, step and path of root's snapshot to all.
void broadcast_scalars(comm::Communicator& comm, Snapshot& s, int root);

}  // namespace ht::checkpoint::detail
