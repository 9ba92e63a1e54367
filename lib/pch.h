// Precompiled header shared by every target: the expensive torch headers and a few standard ones.
// No <mpi.h> and no <hdf5.h>: a precompiled header is force-included into every translation unit,
// so either here would hand MPI or HDF5 to modules that do not link them (only comm/ and io/ do;
// tests/layering/layering.sh checks the sources). Both are cheap to parse where they are included.
#pragma once
#include <torch/torch.h>
#include <fmt/format.h>
#include <string>
#include <vector>
#include <memory>
