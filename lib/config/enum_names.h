// Names of the enum values that appear in config files and on the command line: one table per
// enum (HT_ENUM_NAMES), and the generic lookups that parse and print them.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace ht::config {

// Specialised once per enum by HT_ENUM_NAMES: `static constexpr std::pair<E, std::string_view> kNames[]`.
template <typename E>
struct EnumNames;

template <typename E>
std::string_view name_of(E value) {
  for (const auto& [v, name] : EnumNames<E>::kNames)
    if (v == value) return name;
  return "?";
}

template <typename E>
std::optional<E> parse_enum(std::string_view text) {
  for (const auto& [v, name] : EnumNames<E>::kNames)
    if (name == text) return v;
  return std::nullopt;
}

// "a | b | c": the accepted spellings, for help and error messages.
template <typename E>
std::string choices() {
  std::string out;
  for (const auto& [v, name] : EnumNames<E>::kNames) {
    if (!out.empty()) out += " | ";
    out += name;
  }
  return out;
}

}  // namespace ht::config

#define HT_ENUM_NAMES(E, ...)                                                 \
  template <>                                                                 \
  struct ht::config::EnumNames<E> {                                           \
    static constexpr std::pair<E, std::string_view> kNames[] = {__VA_ARGS__}; \
  };
