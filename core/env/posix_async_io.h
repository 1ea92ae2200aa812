// Async queues over POSIX descriptors (File::native_descriptor): libaio, and a pread/pwrite
// engine for files where O_DIRECT is refused. Internal to core/env; reach them through
// Disk::make_async_queue.
#pragma once

#include <memory>

#include "core/env/async_io.h"

namespace zerosim {

Result<std::unique_ptr<AsyncIoQueue>> make_posix_async_queue(const AsyncIoOptions& options, bool use_libaio);

}  // namespace zerosim
