// The watched directories as `zerosim exec` models them: the recording replayed into SimDisk
// (the simulator's file system: unsynced data and directory entries kept, dropped or torn at
// sector granularity; a rename undone without its directory fsync), what a crash there leaves,
// and the real directories laid out as that crash state.
//
// A recording proves itself before anything is judged (verify_recording): every operation
// replayed with every write kept must give exactly the directories the program left. A
// difference means the tracer missed something the program did (or something outside the
// command changed the directories), and every crash state built from it would be a guess.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "exec/fs_recording.h"
#include "sim/sim_disk.h"

namespace zerosim {

// A directory tree: directories (absolute, sorted) and files with their bytes.
struct Tree {
  std::vector<std::string> directories;
  std::vector<std::pair<std::string, std::string>> files;
  bool has_directory(const std::string& path) const;
};

// What the real directories hold (a root that does not exist contributes nothing).
Result<Tree> snapshot_real(const std::vector<std::string>& roots);

// Replaces the real content of each roots[i] with tree's content under it, placed at
// destinations[i] instead (destinations == roots: in place; otherwise a private copy that a
// mount namespace binds over the root). A root absent from the tree is removed.
Status lay_out(const Tree& tree, const std::vector<std::string>& roots, const std::vector<std::string>& destinations);

// The recording replayed into SimDisk, one operation at a time.
class RecordingReplayer {
 public:
  RecordingReplayer(std::vector<std::string> roots, uint64_t seed);

  // The watched directories' content before the run, durable.
  Status load(const Tree& initial);
  // One recorded operation; an error names the operation.
  Status apply(const FsRecord& record);
  // What the disk shows under the roots now (with a crash applied to a clone: what survived).
  Result<Tree> visible_tree() const;

  SimDisk& disk() { return disk_; }
  const std::vector<std::string>& roots() const { return roots_; }

 private:
  Status make_durable_directory(const std::string& path);
  Status sync_everything();

  SimDisk disk_;
  std::vector<std::string> roots_;
};

// What a SimDisk shows under the roots.
Result<Tree> snapshot_sim(SimDisk& disk, const std::vector<std::string>& roots);

// The self-check: `records` replayed over `initial` with every write kept must equal `left`
// (what the uninterrupted run left). A difference is kFailedPrecondition naming the first
// path that differs and what differs (names, sizes, bytes).
Status verify_recording(const std::vector<FsRecord>& records, const std::vector<std::string>& roots, const Tree& initial,
                        const Tree& left);

}  // namespace zerosim
