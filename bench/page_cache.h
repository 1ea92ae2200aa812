// Dropping the page cache between a benchmark's writes and its cold reads (checkpoint_bench,
// read_pattern_bench), so that a read measures the disk, not the memory the writes filled.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace zerosim {

// Needs root (CAP_SYS_ADMIN); the dirty pages are written first so that nothing is lost. On
// failure `error` says which call failed and why.
inline bool drop_page_cache(std::string* error) {
  ::sync();
  const int descriptor = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (descriptor < 0) {
    *error = std::string("open /proc/sys/vm/drop_caches: ") + std::strerror(errno);
    return false;
  }
  const bool written = ::write(descriptor, "3\n", 2) == 2;
  const int saved_errno = errno;
  ::close(descriptor);
  if (!written) *error = std::string("write /proc/sys/vm/drop_caches: ") + std::strerror(saved_errno);
  return written;
}

}  // namespace zerosim
