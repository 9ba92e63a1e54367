#include "io/h5_chunks.h"

#include <hdf5.h>

#include "core/error.h"
#include "io/h5_check.h"

namespace ht::io {
namespace {

// HDF5 1.10 reports chunk addresses relative to the file's base address, which is the userblock
// size (0 for files hpctrain writes).
uint64_t base_address(hid_t file) {
  Handle fcpl(HT_H5_CHECK(H5Fget_create_plist(file)), H5Pclose);
  hsize_t userblock = 0;
  HT_H5_CHECK(H5Pget_userblock(fcpl.id(), &userblock));
  return static_cast<uint64_t>(userblock);
}

}  // namespace

ChunkStorage::ChunkStorage(Id file, const std::string& dataset)
    : file_(file), name_(dataset), dataset_(open_dataset(file, dataset)) {
  Handle dcpl(HT_H5_CHECK(H5Dget_create_plist(dataset_.id())), H5Pclose);
  chunked_ = H5Pget_layout(dcpl.id()) == H5D_CHUNKED;
  if (!chunked_) return;
  base_address_ = base_address(file);
  const int nfilters = H5Pget_nfilters(dcpl.id());
  for (int i = 0; i < nfilters && unsupported_filter_.empty(); ++i) {
    unsigned flags = 0, cfg = 0;
    size_t nelmts = 0;
    char fname[64] = {0};
    const H5Z_filter_t f = H5Pget_filter2(dcpl.id(), static_cast<unsigned>(i), &flags, &nelmts, nullptr,
                                          sizeof(fname), fname, &cfg);
    if (f == H5Z_FILTER_FLETCHER32) fletcher32_filter_ = i;
    else unsupported_filter_ = fname[0] ? fname : "?";
  }
  Handle space(HT_H5_CHECK(H5Dget_space(dataset_.id())), H5Sclose);
  chunk_dims_.resize(static_cast<size_t>(HT_H5_CHECK(H5Sget_simple_extent_ndims(space.id()))));
  HT_H5_CHECK(H5Pget_chunk(dcpl.id(), static_cast<int>(chunk_dims_.size()), chunk_dims_.data()));
}

StoredChunk ChunkStorage::chunk_at(const std::vector<Size>& offset) const {
  StoredChunk out;
  unsigned mask = 0;
  haddr_t address = HADDR_UNDEF;
  hsize_t bytes = 0;
  if (H5Dget_chunk_info_by_coord(dataset_.id(), offset.data(), &mask, &address, &bytes) < 0 ||
      address == HADDR_UNDEF)
    return out;  // never written
  out.written = true;
  out.address = static_cast<uint64_t>(address) + base_address_;
  out.stored_bytes = static_cast<uint64_t>(bytes);
  out.checksummed = fletcher32_filter_ >= 0 && !(mask & (1u << fletcher32_filter_));
  return out;
}

void ChunkStorage::read_whole(void* out) const {
  Handle type(HT_H5_CHECK(H5Dget_type(dataset_.id())), H5Tclose);
  if (H5Dread(dataset_.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) fail_read(file_, name_, "");
}

}  // namespace ht::io
