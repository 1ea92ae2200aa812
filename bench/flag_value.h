// A benchmark's numeric flag values, read strictly: atoi's silent 0 for "abc", "" or "12x"
// would turn bad input into a default and a figure measured under settings nobody asked for.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

namespace zerosim {

// `text` as a whole number, or exits with status 2 naming the flag and the value.
inline int64_t whole_number(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno != 0) {
    std::fprintf(stderr, "%s %s: expected a whole number\n", flag.c_str(), text);
    std::exit(2);
  }
  return value;
}

inline int64_t whole_number(const std::string& flag, const std::string& text) { return whole_number(flag, text.c_str()); }

// `text` as an unsigned 64-bit number (a seed), or exits with status 2 naming the flag.
inline uint64_t unsigned_number(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (*text < '0' || *text > '9' || *end != '\0' || errno != 0) {
    std::fprintf(stderr, "%s %s: expected an unsigned whole number\n", flag.c_str(), text);
    std::exit(2);
  }
  return value;
}

// Exits with status 2 when flag `index` of `argc` has no value after it.
inline void require_value(int index, int argc, const char* flag) {
  if (index + 1 < argc) return;
  std::fprintf(stderr, "%s: expected a value after it\n", flag);
  std::exit(2);
}

// Reads `--name value` pairs into the named numbers, each a positive whole number; exits with
// status 2 naming an unknown flag (with the known ones), a missing value or a bad value.
inline void read_positive_flags(int argc, char** argv,
                                std::initializer_list<std::pair<const char*, int64_t*>> flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    int64_t* target = nullptr;
    for (const auto& [name, value] : flags) {
      if (flag == name) target = value;
    }
    if (target == nullptr) {
      std::string known;
      for (const auto& entry : flags) known += std::string(known.empty() ? "" : " ") + entry.first;
      std::fprintf(stderr, "unknown flag %s (flags: %s)\n", argv[i], known.c_str());
      std::exit(2);
    }
    require_value(i, argc, argv[i]);
    *target = whole_number(flag, argv[++i]);
    if (*target <= 0) {
      std::fprintf(stderr, "%s %lld: must be positive\n", flag.c_str(), static_cast<long long>(*target));
      std::exit(2);
    }
  }
}

}  // namespace zerosim
