// Writes the bad (and one good) dataset files the CLI suite feeds to the real binary:
//   make_bad_files DIR
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "unit/test_data_fixtures.h"

using namespace ht::data;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_bad_files DIR\n");
    return 1;
  }
  const std::string d = argv[1];
  auto lm = [&](const std::string& name, int64_t tokens = 1001) {
    fixtures::write_lm(d + "/" + name, tokens, 200);
    return d + "/" + name;
  };
  lm("good.h5");
  std::ofstream(d + "/nothdf5.h5") << "plain text, not HDF5\n";
  {
    const std::string p = lm("truncated.h5", 40000);
    struct stat st {};
    ::stat(p.c_str(), &st);
    if (::truncate(p.c_str(), st.st_size / 2) != 0) return 1;
  }
  {
    ht::io::File f = ht::io::File::open_rw(lm("names.h5"));
    H5Lmove(f.id(), "/train/tokens", f.id(), "/train/tokenz", H5P_DEFAULT, H5P_DEFAULT);
  }
  fixtures::replace_dataset(lm("dtype.h5"), "/train/tokens", std::vector<float>(1001, 1.0f));
  fixtures::replace_dataset(lm("twod.h5"), "/train/tokens", std::vector<uint16_t>(1000, 1), {100, 10});
  fixtures::write_lm(d + "/zero.h5", 0, 0);
  lm("few.h5", 9);  // one sample of seq_len 8: fewer than 2 ranks
  {
    std::vector<uint16_t> tokens(1001, 7);
    tokens[777] = 4000;
    tokens[100] = 4000;  // two places: one sample of the epoch remainder may be dropped
    fixtures::replace_dataset(lm("vocab.h5"), "/train/tokens", tokens);
  }
  {
    fixtures::write_cls(d + "/labels.h5", 40, 4, 6, 3);
    std::vector<int32_t> labels(40, 0);
    labels[21] = 9;
    fixtures::replace_dataset(d + "/labels.h5", "/train/labels", labels);
  }
  {
    const std::string p = lm("corrupt.h5", 4001);
    fixtures::flip_byte(p, fixtures::chunk_address(p, "/train/tokens", 640) + 6);
  }
  {  // a damaged chunk of the document table, which HDF5 itself reads (and verifies) at open
    const std::string p = lm("offsets_chunk.h5");
    fixtures::flip_byte(p, fixtures::chunk_address(p, "/train/doc_offsets", 0) + 3);
  }
  {  // a vocabulary no uint32 token id can reach: must not size an embedding
    ht::io::File f = ht::io::File::open_rw(lm("huge_vocab.h5"));
    ht::io::set_attr(f.id(), "vocab_size", int64_t{1} << 40);
  }
  {  // a root attribute with 64 values where one is read (used to overrun a one-element buffer)
    ht::io::File f = ht::io::File::open_rw(lm("attr64.h5"));
    H5Adelete(f.id(), "vocab_size");
    const hsize_t n = 64;
    ht::io::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    ht::io::Handle a(H5Acreate2(f.id(), "vocab_size", H5T_NATIVE_INT64, space.id(), H5P_DEFAULT, H5P_DEFAULT),
                     H5Aclose);
    std::vector<int64_t> values(64, 258);
    H5Awrite(a.id(), H5T_NATIVE_INT64, values.data());
  }
  {  // document offsets that decrease and point past the tokens
    fixtures::replace_dataset(lm("offsets.h5"), "/train/doc_offsets", std::vector<uint64_t>{0, 900, 500, 5000});
  }
  {  // 2^40 declared tokens and no chunk written: nothing may build a table of that size
    const std::string p = lm("huge_dims.h5");
    ht::io::File f = ht::io::File::open_rw(p);
    H5Ldelete(f.id(), "/train/tokens", H5P_DEFAULT);
    const hsize_t dims = hsize_t{1} << 40, chunk = 1024;
    ht::io::Handle space(H5Screate_simple(1, &dims, nullptr), H5Sclose);
    ht::io::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl.id(), 1, &chunk);
    H5Pset_fletcher32(dcpl.id());
    ht::io::Handle ds(H5Dcreate2(f.id(), "/train/tokens", H5T_NATIVE_UINT16, space.id(), H5P_DEFAULT, dcpl.id(),
                                 H5P_DEFAULT),
                      H5Dclose);
  }
  {  // 12-bit integers in a 16-bit datatype: HDF5 reads other values than the raw bytes
    const std::string p = lm("precision.h5");
    ht::io::File f = ht::io::File::open_rw(p);
    H5Ldelete(f.id(), "/train/tokens", H5P_DEFAULT);
    ht::io::Handle type(H5Tcopy(H5T_STD_U16LE), H5Tclose);
    H5Tset_precision(type.id(), 12);
    const hsize_t dims = 1001, chunk = 64;
    ht::io::Handle space(H5Screate_simple(1, &dims, nullptr), H5Sclose);
    ht::io::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl.id(), 1, &chunk);
    H5Pset_fletcher32(dcpl.id());
    ht::io::Handle ds(H5Dcreate2(f.id(), "/train/tokens", type.id(), space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT),
                      H5Dclose);
    std::vector<uint16_t> tokens(1001, 7);
    H5Dwrite(ds.id(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data());
  }
  {  // a valid file behind a 512-byte userblock: chunk addresses are relative to it
    const std::string src = lm("plain_for_userblock.h5");
    const std::string dst = d + "/userblock.h5";
    ht::io::Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    H5Pset_userblock(fcpl.id(), 512);
    hid_t out = H5Fcreate(dst.c_str(), H5F_ACC_TRUNC, fcpl.id(), H5P_DEFAULT);
    ht::io::File in = ht::io::File::open_read(src);
    for (const char* obj : {"train", "val"}) H5Ocopy(in.id(), obj, out, obj, H5P_DEFAULT, H5P_DEFAULT);
    fixtures::write_root(out, "causal-lm", kByteVocab);
    ht::io::set_attr(out, "num_tokens", int64_t{1201});
    H5Fclose(out);
  }
  return 0;
}
