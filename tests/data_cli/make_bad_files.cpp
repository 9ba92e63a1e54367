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
  return 0;
}
