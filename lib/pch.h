// Precompiled header shared by every target: the expensive torch headers.
#pragma once
#include <torch/torch.h>
#include <mpi.h>
#include <hdf5.h>
#include <fmt/format.h>
#include <string>
#include <vector>
#include <memory>
