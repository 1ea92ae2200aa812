// What every fuzz target shares: the input as text, and a SimDisk holding it as a file, so the
// readers run exactly as zerosim runs them (the Disk seam) with no real I/O per execution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/env/disk.h"
#include "sim/sim_disk.h"

namespace zerosim::fuzz {

inline std::string text_of(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

// Puts the input at `path` on an in-memory disk (its directory created).
inline void put_input(SimDisk& disk, const std::string& path, const uint8_t* data, size_t size) {
  const size_t slash = path.find_last_of('/');
  if (!disk.create_directories(path.substr(0, slash)).ok()) __builtin_trap();
  if (!write_whole_file(disk, path, std::as_bytes(std::span<const uint8_t>(data, size)), /*sync=*/true).ok()) __builtin_trap();
}

}  // namespace zerosim::fuzz
