// `zerosim import-ds`: a user's DeepSpeed config becomes a scenario file, the path from a bug
// report to a replayable case. The config is kept verbatim (inline, or by path); the scenario
// supplies what a DeepSpeed run takes from elsewhere (the Trainer's arguments that fill
// "auto", the world size, the model, the data) and the story: train, save every S steps,
// crash, resume, compare every component at every step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace zerosim {

struct ImportOptions {
  std::string config_path;
  std::string name;              // default: "imported from <config file name>"
  int world_size = 2;
  int resume_world_size = 0;     // 0: the same
  int64_t steps = 6;
  int64_t save_every = 2;
  int64_t saved_step = 4;        // the run is killed after this step (a multiple of save_every)
  std::string model = "13,37,29,5";
  std::string precision;         // "" : from the config's fp16/bf16 "enabled" booleans, else fp16
  uint64_t seed = 1234;
  // "SITE[@RANK][#OCCURRENCE]", e.g. "ckpt.shard_written@1#2" or "engine.step_end@0#5"; empty:
  // the run is killed after saved_step.
  std::string crash;
  bool delete_swap_directory = false;
  bool config_by_path = false;   // "config": "<path>" instead of the config inline
  // How the first run ended: "power-loss" (unsynced data lost) or "kill" (the job died, the
  // machine stayed up).
  std::string ended_by = "power-loss";
  // A crash before any save returned: "fresh-start" (the restart trains from step 0) or
  // "refusal" (it must refuse: no checkpoint).
  std::string no_checkpoint = "fresh-start";
  // The restart: the tag it asks for ("latest"), DeepSpeed's load options, its own config.
  std::string resume_tag = "latest";
  bool load_optimizer_states = true;
  bool load_lr_scheduler_states = true;
  bool load_module_only = false;
  std::string resume_config_path;
  // "newest" or "previous": the operator deleted that tag before the restart (its manifest is
  // gone, so it is no checkpoint); "": none.
  std::string delete_tag;
  // "deepspeed": switch on the defects of every entry of DeepSpeed's resume model that applies
  // (scenarios/deepspeed_model.h), so the scenario fails as the user's run did. "": zerosim's
  // engine, which must pass.
  std::string as;
  std::string training_loop = "hf";  // "hf" (the Hugging Face Trainer) or "plain"
};

// What the import says besides the scenario: the DeepSpeed model's entries that apply, and
// what the model does not cover.
struct ImportNotes {
  std::vector<std::string> lines;
};

// The scenario document (checked: it loads as a scenario, or the error names what is wrong).
Result<nlohmann::ordered_json> import_deepspeed_config(const ImportOptions& options, ImportNotes* notes = nullptr);

}  // namespace zerosim
