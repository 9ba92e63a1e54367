// Private to lib/io/: helpers that the io/*.cpp files share. Include after <hdf5.h>.
#pragma once
#include <cstddef>

#include "io/h5.h"

namespace ht::io::detail {

// Elements in a dataspace (scalar: 1; -1 when it cannot be read), for reads into fixed-size buffers.
long long element_count(Id space);
// The class of an HDF5 datatype.
TypeClass type_class(Id type);
// A fixed-length, NUL-padded C string type of `bytes` (at least 1) bytes.
Handle fixed_string_type(size_t bytes);

}  // namespace ht::io::detail
