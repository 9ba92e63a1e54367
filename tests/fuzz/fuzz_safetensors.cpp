// Fuzz target: the safetensors reader. Input bytes are a whole file -> parse_safetensors and
// SafeTensorsFile::from_bytes; every tensor's bytes are then read in full (so that ASan sees any
// offset that escapes the buffer) and every accessor is exercised.
// Findings: an exception other than ht::Error, a sanitizer report, a header that parses but whose
// tensors do not tile the data region.
#include <string>

#include "fuzz/fuzz_support.h"
#include "io/safetensors.h"

using namespace ht;
using namespace ht::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  quiet_process();
  only_ht_errors("parse_safetensors", [&] {
    const io::SafeTensorsHeader h = io::parse_safetensors(data, size, "fuzz.safetensors");
    uint64_t covered = 0;
    for (const auto& t : h.tensors) covered += t.bytes();
    if (h.data_offset + covered != size) finding("tensors of a parsed header do not tile the data region");
  });
  only_ht_errors("SafeTensorsFile", [&] {
    const io::SafeTensorsFile f =
        io::SafeTensorsFile::from_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
    volatile uint8_t sink = 0;
    for (const auto& t : f.tensors()) {
      const uint8_t* p = f.data(t);
      for (uint64_t i = 0; i < t.bytes(); ++i) sink = sink ^ p[i];
      if (f.find(t.name) == nullptr) finding("find() misses a listed tensor");
      (void)f.at(t.name);
      (void)t.numel();
    }
    for (const auto& [k, v] : f.metadata()) (void)k, (void)v;
    (void)f.at("no such tensor \x01");
  });
  return 0;
}
