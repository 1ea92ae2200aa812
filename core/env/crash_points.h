// Named crash points: the engine calls hit("ckpt.shard_written", rank) at every site where a
// crash would leave interesting on-disk state. In a real run the hook does nothing; the
// simulator's hook decides, by (site, rank, occurrence), to stop the world there. Sites are
// string literals so that a scenario can name them and a report can print them.
#pragma once

#include <string_view>

namespace zerosim {

class CrashPointHook {
 public:
  virtual ~CrashPointHook() = default;
  virtual void hit(std::string_view site, int rank) = 0;
};

class NoCrashPoints final : public CrashPointHook {
 public:
  void hit(std::string_view, int) override {}
};

}  // namespace zerosim
