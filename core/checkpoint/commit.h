// The checkpoint commit protocol's building blocks (docs/design.md, "What a checkpoint holds"):
// a file becomes visible under its name only once its content is durable, and the `latest`
// pointer moves atomically: write a temporary file, fsync it, rename it over the old name,
// fsync the directory. A crash at any point leaves either the old or the new file, whole.
#pragma once

#include <span>
#include <string>

#include "core/env/disk.h"

namespace zerosim {

// A tag names a checkpoint directory inside the checkpoint directory: 1 to 128 characters of
// [A-Za-z0-9._-], not "." or "..", so that it can never reach outside (no '/', no absolute path).
Status validate_checkpoint_tag(const std::string& tag);

// Creates `path` and any missing parents so that the new entries survive a power loss: each
// directory whose entries changed is fsynced (a new directory's name lives in its parent).
Status create_directories_durably(Disk& disk, const std::string& path);

// Creates `directory` (durably) and proves that files can be written there: `probe_name` is
// created, written, synced and removed. For a run to refuse a checkpoint directory it could
// never save into (read-only, another user's, a full disk) before it trains, not at its first
// save. kFailedPrecondition naming the directory and the cause.
Status check_directory_writable(Disk& disk, const std::string& directory, const std::string& probe_name);

// Writes `content` to `<directory>/<name>` durably and atomically (temporary file, fsync,
// rename, fsync of the directory).
Status write_file_atomically(Disk& disk, const std::string& directory, const std::string& name,
                             std::span<const std::byte> content);

// Points `<checkpoint_directory>/latest` at `tag`, atomically.
Status publish_latest_tag(Disk& disk, const std::string& checkpoint_directory, const std::string& tag);

// The tag `latest` names; kNotFound when there is no `latest`, kDataLoss when its content is
// not a valid tag (a torn or hostile pointer), naming the file.
Result<std::string> read_latest_tag(Disk& disk, const std::string& checkpoint_directory);

}  // namespace zerosim
