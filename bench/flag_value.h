// A benchmark's numeric flag values, read strictly: atoi's silent 0 for "abc", "" or "12x"
// would turn bad input into a default and a figure measured under settings nobody asked for.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace zerosim
