// A model of what DeepSpeed's ZeRO-3 loses or mishandles when a run saved with
// engine.save_checkpoint is resumed in a new process with engine.load_checkpoint, at DeepSpeed
// commit edaa722, expressed with zerosim's named defects (core/env/defects.h).
//
// It comes from reading DeepSpeed's source at that commit (engine.py, runtime/zero/stage3.py,
// swap_tensor/, the checkpoint engine), not from running DeepSpeed: every entry names the lines
// it rests on, and says where a step of it is inferred rather than read. `zerosim import-ds
// --as deepspeed` switches the defects of every entry that applies to a scenario on, so that the
// scenario fails the way the user's run did and names the first state that departs; the same
// scenario without them shows what a correct engine does.
//
// What the model does not cover (inferred only, so left out; `zerosim import-ds --as deepspeed`
// says so or refuses): a fresh-optimizer or module-only load with the optimizer on NVMe
// (DeepSpeed raises or overwrites the weights on paths read but not run), a resume at another
// world size with the optimizer on NVMe (no world-size check; missing files or an unchecked
// resize), and an optimizer offload device that changes between the runs.
#pragma once

#include <string>
#include <vector>

#include "core/env/defects.h"
#include "scenarios/scenario_runner.h"

namespace zerosim {

// The training loop around the engine: the Hugging Face Trainer restores the data position and
// the RNG itself (it saves rng_state_<rank>.pth and skips the batches of the resumed epoch);
// a plain loop over a DataLoader restores neither (DeepSpeed saves no sampler state outside
// curriculum learning, engine.py:4592, 4908-4915).
enum class TrainingLoop { kHfTrainer, kPlain };

struct DeepSpeedModelEntry {
  std::string id;          // "nvme-optimizer-not-loaded"
  std::string condition;   // when it applies, in a user's words
  std::string effect;      // what DeepSpeed restores wrong or loses
  std::vector<Defect> defects;
  std::string source;      // file:line ranges at edaa722
  // What running DeepSpeed's engine showed against the entry (version, date, case; or why it has
  // not been run yet): the model is read from code, and code changes between releases.
  std::string measured;
};

// The DeepSpeed commit the model was read from.
inline constexpr const char* kDeepSpeedModelCommit = "edaa722";

// Every entry of the model, in a fixed order (`zerosim deepspeed-model`; docs/scenarios.md).
const std::vector<DeepSpeedModelEntry>& deepspeed_model_entries();

// The entries that apply to this scenario's story (its config, world sizes, load options, the
// tag the restart asks for) under `loop`, in the order above.
std::vector<DeepSpeedModelEntry> deepspeed_model_for(const Scenario& scenario, TrainingLoop loop);

// The same, for the DeepSpeed release the loading config names (zerosim.deepspeed_release), where
// the model is known to differ by release: with the optimizer on NVMe, releases 0.13.0 to 0.16.4
// read the zero checkpoint on load (measured on 0.14.5 with every sub-group in memory: bit for
// bit), so the three NVMe entries do not apply. What is not known is refused, naming it
// (kFailedPrecondition): a release before NVMe checkpoints, a release after 0.16.4 (PR #7613's
// skip may or may not be in it), a swapped sub-group on an older release. Without the key: as
// deepspeed_model_for.
Result<std::vector<DeepSpeedModelEntry>> deepspeed_model_for_release(const Scenario& scenario, TrainingLoop loop);

}  // namespace zerosim
