// Documents from text inputs, for `hpctrain prepare`:
//  - a fortune file (some line is exactly "%") is a list of entries separated by "%" lines;
//  - any other text file is one document per paragraph (paragraphs are separated by blank lines);
//  - a directory contributes its regular files (not symlinks, not recursive, sorted by name,
//    skipping hidden files and fortune index files *.dat / *.u8 / *.pos).
// Documents keep their bytes exactly (no decoding); empty or whitespace-only documents are dropped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ht::data {

bool is_fortune_text(const std::string& content);
std::vector<std::string> split_fortunes(const std::string& content);
std::vector<std::string> split_paragraphs(const std::string& content);

// The files an input path stands for (a regular file itself, or a directory's files as above).
std::vector<std::string> input_files(const std::string& path);

// The documents of one regular file (none when it holds only whitespace).
std::vector<std::string> file_documents(const std::string& file, uint64_t* bytes_read = nullptr);

// All documents of one input path; throws kData when the path is missing or yields none.
// bytes_read (optional) receives the size of the files read.
std::vector<std::string> read_documents(const std::string& path, uint64_t* bytes_read = nullptr);

// A label input "NAME=PATH" names its label; plain "PATH" uses the path's basename.
struct LabelInput {
  std::string label;
  std::string path;
};
LabelInput parse_label_input(const std::string& spec);

}  // namespace ht::data
