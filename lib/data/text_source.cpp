#include "data/text_source.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ht::data {
namespace {

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// Lines without their '\n' (a final line without newline included).
std::vector<std::string> lines_of(const std::string& content) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < content.size()) {
    const size_t nl = content.find('\n', pos);
    const size_t end = nl == std::string::npos ? content.size() : nl;
    lines.push_back(content.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

bool is_separator(const std::string& line) { return line == "%" || line == "%\r"; }

std::vector<std::string> join_groups(const std::vector<std::string>& lines, bool (*is_break)(const std::string&)) {
  std::vector<std::string> docs;
  std::string cur;
  bool have = false;
  auto flush = [&] {
    if (have && !blank(cur)) docs.push_back(cur);
    cur.clear();
    have = false;
  };
  for (const auto& l : lines) {
    if (is_break(l)) { flush(); continue; }
    if (have) cur += '\n';
    cur += l;
    have = true;
  }
  flush();
  return docs;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HT_REQUIRE(in, ExitCode::kData, "{}: cannot read: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool is_fortune_text(const std::string& content) {
  for (const auto& l : lines_of(content))
    if (is_separator(l)) return true;
  return false;
}

std::vector<std::string> split_fortunes(const std::string& content) { return join_groups(lines_of(content), is_separator); }

std::vector<std::string> split_paragraphs(const std::string& content) {
  return join_groups(lines_of(content), [](const std::string& l) { return blank(l); });
}

std::vector<std::string> input_files(const std::string& path) {
  struct stat st {};
  HT_REQUIRE(::stat(path.c_str(), &st) == 0, ExitCode::kData, "{}: input not found", path);
  if (S_ISREG(st.st_mode)) return {path};
  HT_REQUIRE(S_ISDIR(st.st_mode), ExitCode::kData, "{}: input is neither a file nor a directory", path);
  DIR* dir = ::opendir(path.c_str());
  HT_REQUIRE(dir != nullptr, ExitCode::kData, "{}: cannot list directory: {}", path, std::strerror(errno));
  std::vector<std::string> files;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || ends_with(name, ".dat") || ends_with(name, ".u8") || ends_with(name, ".pos"))
      continue;
    const std::string full = path + (ends_with(path, "/") ? "" : "/") + name;
    struct stat fs {};
    // lstat: Debian links other languages' files into the English fortune directory.
    if (::lstat(full.c_str(), &fs) == 0 && S_ISREG(fs.st_mode)) files.push_back(full);
  }
  ::closedir(dir);
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> file_documents(const std::string& file, uint64_t* bytes_read) {
  const std::string content = read_file(file);
  if (bytes_read) *bytes_read += content.size();
  return is_fortune_text(content) ? split_fortunes(content) : split_paragraphs(content);
}

std::vector<std::string> read_documents(const std::string& path, uint64_t* bytes_read) {
  std::vector<std::string> docs;
  for (const auto& file : input_files(path)) {
    auto part = file_documents(file, bytes_read);
    docs.insert(docs.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  HT_REQUIRE(!docs.empty(), ExitCode::kData, "{}: no documents found (empty files or directory?)", path);
  return docs;
}

LabelInput parse_label_input(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq != std::string::npos && eq > 0 && spec.find('/') > eq) return {spec.substr(0, eq), spec.substr(eq + 1)};
  std::string p = spec;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return {slash == std::string::npos ? p : p.substr(slash + 1), spec};
}

}  // namespace ht::data
