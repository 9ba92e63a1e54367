// Private to lib/config (included by config.cpp only): how each C++ field type of Config is read
// from TOML and from --set text, printed as a TOML literal and named in the help. One Codec per
// type, so the key table stays one row per key.
#pragma once
#include <toml++/toml.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "config/config.h"
#include "config/path_list.h"
#include "config/enum_names.h"
#include "core/error.h"

namespace ht::config::detail {

[[noreturn]] inline void bad(const std::string& name, const std::string& why) {
  HT_FAIL(ExitCode::kUsage, "config key '{}': {}", name, why);
}

// How one C++ field type is read from TOML and from --set text, printed as a TOML literal, and named in help.
template <typename T, typename = void>
struct Codec;

template <>
struct Codec<int64_t> {
  static const char* type() { return "int"; }
  static int64_t from_toml(const std::string& key, const toml::node& n) {
    if (!n.is_integer()) bad(key, "expected an integer");
    return n.as_integer()->get();
  }
  static int64_t from_text(const std::string& key, const std::string& s) {
    try {
      size_t used = 0;
      const long long v = std::stoll(s, &used);
      if (used == s.size()) return v;
    } catch (const std::logic_error&) {
    }
    bad(key, fmt::format("cannot parse '{}' as an integer", s));
  }
  static std::string literal(int64_t v) { return std::to_string(v); }
};

// A count that may also be "auto" (local_sgd.steps, local_sgd.fragments): stored as 0, which no count
// takes (LocalSgdConfig::kAutoSteps, kAutoFragments), and printed back as "auto".
struct CountOrAutoCodec {
  static_assert(LocalSgdConfig::kAutoSteps == 0 && LocalSgdConfig::kAutoFragments == 0);
  static const char* type() { return "int >= 1 | auto"; }
  static int64_t from_toml(const std::string& key, const toml::node& n) {
    if (n.is_string() && n.as_string()->get() == "auto") return LocalSgdConfig::kAutoSteps;
    if (!n.is_integer()) bad(key, "expected an integer >= 1 or \"auto\"");
    return checked(key, n.as_integer()->get());
  }
  static int64_t from_text(const std::string& key, const std::string& s) {
    return s == "auto" ? LocalSgdConfig::kAutoSteps : checked(key, Codec<int64_t>::from_text(key, s));
  }
  static std::string literal(int64_t v) { return v == LocalSgdConfig::kAutoSteps ? "\"auto\"" : std::to_string(v); }

 private:
  static int64_t checked(const std::string& key, int64_t v) {
    if (v < 1) bad(key, fmt::format("{} is not a count >= 1 (or \"auto\")", v));
    return v;
  }
};

template <>
struct Codec<double> {
  static const char* type() { return "float"; }
  static double from_toml(const std::string& key, const toml::node& n) {
    if (n.is_integer()) return static_cast<double>(n.as_integer()->get());
    if (n.is_floating_point()) return n.as_floating_point()->get();
    bad(key, "expected a number");
  }
  static double from_text(const std::string& key, const std::string& s) {
    try {
      size_t used = 0;
      const double v = std::stod(s, &used);
      if (used == s.size()) return v;
    } catch (const std::logic_error&) {
    }
    bad(key, fmt::format("cannot parse '{}' as a number", s));
  }
  static std::string literal(double v) {
    std::string s = fmt::format("{}", v);
    // TOML needs a float to look like one ("1" would read back as an integer, which is accepted, but be exact).
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
};

template <>
struct Codec<bool> {
  static const char* type() { return "bool"; }
  static bool from_toml(const std::string& key, const toml::node& n) {
    if (!n.is_boolean()) bad(key, "expected true or false");
    return n.as_boolean()->get();
  }
  static bool from_text(const std::string& key, const std::string& s) {
    if (s == "true" || s == "1") return true;
    if (s == "false" || s == "0") return false;
    bad(key, fmt::format("expected true or false, got '{}'", s));
  }
  static std::string literal(bool v) { return v ? "true" : "false"; }
};

// Config strings are paths and names: valid UTF-8 without control characters. Anything else would
// not survive the round trip through the TOML stored in checkpoints (TOML escapes a raw byte >= 0x80
// as the code point, which reads back as two bytes) and a NUL would cut the path short in C APIs.
inline void require_plain_text(const std::string& key, const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f)
      bad(key, fmt::format("control character 0x{:02x} at byte {}; strings must be plain text", c, i));
    // The length of a UTF-8 sequence from its lead byte, then its continuation bytes, then the
    // code point (no overlong forms, no surrogates, nothing above U+10FFFF).
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1fu) : len == 3 ? (c & 0x0fu) : (c & 0x07u);
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[len] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    if (!ok) bad(key, fmt::format("invalid UTF-8 at byte {}; strings must be valid UTF-8", i));
    i += len;
  }
}

template <>
struct Codec<std::string> {
  static const char* type() { return "string"; }
  static std::string from_toml(const std::string& key, const toml::node& n) {
    if (!n.is_string()) bad(key, "expected a string");
    require_plain_text(key, n.as_string()->get());
    return n.as_string()->get();
  }
  static std::string from_text(const std::string& key, const std::string& s) {
    require_plain_text(key, s);
    return s;
  }
  static std::string literal(const std::string& v) {
    std::ostringstream out;
    out << toml::value<std::string>(v);
    return out.str();
  }
};

// A list of paths (data.path): a TOML array of strings, or one string that may list several
// entries separated by ',' (what --set takes: data.path=a.h5,b.h5). Printed as a TOML array.
template <>
struct Codec<std::vector<std::string>> {
  static const char* type() { return "path | glob | [paths]"; }
  static std::vector<std::string> from_toml(const std::string& key, const toml::node& n) {
    if (!n.is_array()) return from_text(key, Codec<std::string>::from_toml(key, n));
    std::vector<std::string> out;
    for (const auto& e : *n.as_array()) {
      auto one = from_text(key, Codec<std::string>::from_toml(key, e));
      if (one.size() != 1) bad(key, "each entry of the array must be one path or glob");
      out.push_back(one.front());
    }
    return out;
  }
  static std::vector<std::string> from_text(const std::string& key, const std::string& s) {
    require_plain_text(key, s);
    return split_path_list(key, s);
  }
  static std::string literal(const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + Codec<std::string>::literal(v[i]);
    return out + "]";
  }
};

template <>
struct Codec<StepRange> {
  static const char* type() { return "steps A:B"; }
  static StepRange from_text(const std::string& key, const std::string& s) {
    if (s.empty()) return {};
    const auto colon = s.find(':');
    StepRange r;
    try {
      size_t used_a = 0, used_b = 0;
      if (colon == std::string::npos || colon == 0 || colon + 1 >= s.size()) throw std::invalid_argument("form");
      r.first = std::stoll(s.substr(0, colon), &used_a);
      r.last = std::stoll(s.substr(colon + 1), &used_b);
      if (used_a != colon || used_b != s.size() - colon - 1) throw std::invalid_argument("trailing");
    } catch (const std::logic_error&) {
      bad(key, fmt::format("'{}' is not a step range A:B (e.g. 10:12; empty = none)", s));
    }
    if (r.first < 1 || r.last < r.first) bad(key, fmt::format("'{}' needs 1 <= A <= B", s));
    return r;
  }
  static StepRange from_toml(const std::string& key, const toml::node& n) {
    if (!n.is_string()) bad(key, "expected a string \"A:B\"");
    return from_text(key, n.as_string()->get());
  }
  static std::string literal(const StepRange& r) {
    return Codec<std::string>::literal(r.empty() ? std::string() : fmt::format("{}:{}", r.first, r.last));
  }
};

template <typename E>
struct Codec<E, std::enable_if_t<std::is_enum_v<E>>> {
  static std::string type() { return choices<E>(); }
  static E from_text(const std::string& key, const std::string& s) {
    if (auto v = parse_enum<E>(s)) return *v;
    bad(key, fmt::format("'{}' is not one of: {}", s, choices<E>()));
  }
  static E from_toml(const std::string& key, const toml::node& n) {
    if (!n.is_string()) bad(key, fmt::format("expected a string, one of: {}", choices<E>()));
    return from_text(key, n.as_string()->get());
  }
  static std::string literal(E v) { return Codec<std::string>::literal(std::string(name_of(v))); }
};

// TOML `true`/`false` or the string "auto".
template <>
struct Codec<AutoBool> {
  static std::string type() { return choices<AutoBool>(); }
  static AutoBool from_text(const std::string& key, const std::string& s) {
    if (auto v = parse_enum<AutoBool>(s)) return *v;
    bad(key, fmt::format("'{}' is not one of: {}", s, choices<AutoBool>()));
  }
  static AutoBool from_toml(const std::string& key, const toml::node& n) {
    if (n.is_boolean()) return n.as_boolean()->get() ? AutoBool::kTrue : AutoBool::kFalse;
    if (!n.is_string()) bad(key, "expected true, false or \"auto\"");
    return from_text(key, n.as_string()->get());
  }
  static std::string literal(AutoBool v) {
    return v == AutoBool::kAuto ? "\"auto\"" : v == AutoBool::kTrue ? "true" : "false";
  }
};

}  // namespace ht::config::detail
