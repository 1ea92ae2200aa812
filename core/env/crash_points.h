// Named crash points: the engine calls hit("ckpt.shard_written", rank) at every site where a
// crash would leave interesting on-disk state. In a real run the hook does nothing; the
// simulator's hook decides, by (site, rank, occurrence), to stop the world there. Sites are
// string literals so that a scenario can name them and a report can print them.
#pragma once

#include <string_view>
#include <vector>

namespace zerosim {

class CrashPointHook {
 public:
  virtual ~CrashPointHook() = default;
  virtual void hit(std::string_view site, int rank) = 0;
};

// Every site the core hits, in the order a step, a save and a load reach them. Scenario files
// are checked against it, so a misspelt site is refused instead of never firing.
inline std::vector<std::string_view> known_crash_sites() {
  return {"engine.step_begin",     "swap.sub_group_swapped_in", "optimizer.sub_group_stepped",
          "swap.sub_group_swap_out_submitted", "engine.step_end", "ckpt.save_begin",
          "ckpt.tag_prepared",     "ckpt.shard_written",        "ckpt.manifest_written",
          "ckpt.latest_published", "ckpt.save_end",             "ckpt.load_begin",
          "ckpt.load_sub_group_restored", "ckpt.load_end"};
}

class NoCrashPoints final : public CrashPointHook {
 public:
  void hit(std::string_view, int) override {}
};

}  // namespace zerosim
