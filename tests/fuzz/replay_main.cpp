// Replays inputs through a fuzz target without libFuzzer: the `main` of the fuzz_replay_<target>
// executables of the normal (g++) build, which ctest runs over tests/fuzz/corpus/<target>/ and
// tests/fuzz/regressions/<target>/ (label "fuzz"). Each argument is a file or a directory (its
// regular files, sorted by name, so a failure names the same input on every machine); every file
// is handed to LLVMFuzzerTestOneInput once, in a buffer of exactly its size (as libFuzzer does, so
// a read past the end is a read past the allocation). A finding aborts the process (fuzz_support.h),
// after the line naming the input. Exit 0 when every input ran; 1 when an argument is missing or
// no input was found (an empty replay would prove nothing).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

// The input being replayed, for the exit check below.
const char* g_current = nullptr;
bool g_done = false;

// A target that calls exit() would end the replay early with whatever status it chose; the
// inputs after it would never run. That is a failure, naming the input.
void check_finished() {
  if (g_done) return;
  std::fprintf(stderr, "replay: the process exited while replaying %s, before the remaining inputs ran\n",
               g_current ? g_current : "(no input yet)");
  std::fflush(stderr);
  std::_Exit(1);
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The regular files directly inside dir, sorted (README files describe a directory, they are not inputs).
std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == "README.md") continue;
    if (is_file(dir + "/" + name)) out.push_back(dir + "/" + name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (is_dir(arg)) {
      const auto files = files_in(arg);
      if (files.empty()) {
        std::fprintf(stderr, "replay: directory %s holds no input files\n", arg.c_str());
        return 1;
      }
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (is_file(arg)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", arg.c_str());
      return 1;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR... (replays each file through LLVMFuzzerTestOneInput)\n", argv[0]);
    return 1;
  }
  std::atexit(check_finished);
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      g_done = true;
      return 1;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    g_current = path.c_str();
    std::printf("replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    std::fflush(stdout);
    // Exactly the input's size on the heap: no slack after the last byte.
    std::unique_ptr<uint8_t[]> buf(new uint8_t[bytes.size() ? bytes.size() : 1]);
    std::copy(bytes.begin(), bytes.end(), buf.get());
    LLVMFuzzerTestOneInput(buf.get(), bytes.size());
  }
  std::printf("replay: %zu inputs ran without a finding\n", inputs.size());
  g_done = true;
  return 0;
}
