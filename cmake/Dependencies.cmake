# Finds every external dependency and fails with one sentence that says what to do.

# --- libtorch: the setup script's prefix by default, or the user's own via Torch_DIR / CMAKE_PREFIX_PATH
set(HPCTRAIN_DEFAULT_TORCH "$ENV{HOME}/.cache/hpctrain/libtorch-2.11.0-cu130/torch")
if(DEFINED ENV{HPCTRAIN_CACHE})
  set(HPCTRAIN_DEFAULT_TORCH "$ENV{HPCTRAIN_CACHE}/libtorch-2.11.0-cu130/torch")
endif()
if(NOT Torch_DIR AND EXISTS "${HPCTRAIN_DEFAULT_TORCH}/share/cmake/Torch")
  set(Torch_DIR "${HPCTRAIN_DEFAULT_TORCH}/share/cmake/Torch")
endif()
if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR "hpctrain: libtorch not found (Torch_DIR='${Torch_DIR}'). "
    "Run ./scripts/setup.sh, or pass -DTorch_DIR=<libtorch>/share/cmake/Torch.")
endif()
message(STATUS "hpctrain: libtorch ${Torch_VERSION} from ${Torch_DIR}")

# --- MPI
find_package(MPI QUIET COMPONENTS C CXX)
if(NOT MPI_FOUND)
  message(FATAL_ERROR "hpctrain: MPI not found. Install OpenMPI (apt-get install libopenmpi-dev openmpi-bin) "
    "or load your site's MPI module.")
endif()

# --- HDF5, parallel build preferred
set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 QUIET COMPONENTS C)
if(NOT HDF5_FOUND)
  message(FATAL_ERROR "hpctrain: HDF5 not found. Install libhdf5-openmpi-dev or load your site's HDF5 module.")
endif()
if(NOT HDF5_IS_PARALLEL)
  message(STATUS "hpctrain: HDF5 is serial; ranks read their hyperslabs with independent POSIX I/O")
endif()

# fmt: libtorch ships fmt 12 headers that come first on the include path, so the project uses
# those, header-only (no spdlog: Debian's is compiled against fmt 9).
find_package(nlohmann_json QUIET)
find_package(CLI11 QUIET)
find_package(tomlplusplus QUIET)
foreach(dep nlohmann_json CLI11 tomlplusplus)
  if(NOT ${dep}_FOUND)
    message(FATAL_ERROR "hpctrain: ${dep} not found. Run ./scripts/setup.sh (Debian packages) or install it.")
  endif()
endforeach()

# One interface target per external dependency, so that each library states what it uses.
add_library(ht_ext_torch INTERFACE)
target_link_libraries(ht_ext_torch INTERFACE ${TORCH_LIBRARIES})
add_library(ht_ext_mpi INTERFACE)
target_link_libraries(ht_ext_mpi INTERFACE MPI::MPI_CXX)
add_library(ht_ext_hdf5 INTERFACE)
target_link_libraries(ht_ext_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_include_directories(ht_ext_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS})
target_compile_definitions(ht_ext_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})
if(HDF5_IS_PARALLEL)
  target_compile_definitions(ht_ext_hdf5 INTERFACE HPCTRAIN_HDF5_PARALLEL=1)
  # Parallel HDF5's own dependency: hdf5.h includes <mpi.h> and the library calls MPI. io/ is the
  # one module that links HDF5 (privately), so this hands MPI's headers to io's .cpp files only.
  target_link_libraries(ht_ext_hdf5 INTERFACE MPI::MPI_C)
endif()

# Flags every target of the project compiles with (identical, so that one precompiled header
# serves them all). fmt comes header-only from libtorch's include directory (see above).
add_library(ht_flags INTERFACE)
target_compile_definitions(ht_flags INTERFACE FMT_HEADER_ONLY=1 HPCTRAIN_VERSION="${PROJECT_VERSION}")
target_compile_options(ht_flags INTERFACE -Wall -Wextra -Wno-unused-parameter)
