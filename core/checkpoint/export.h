// The consolidated model of a checkpoint as one safetensors file: what DeepSpeed's
// zero_to_fp32.py and PyTorch's dcp_to_torch_save do for their formats.
//
// Each parameter's full tensor, under its PyTorch name (layers.<i>.weight, layers.<i>.bias, the
// MLP as an nn.ModuleList of nn.Linear), in the checkpoint's parameter order, from the fp32
// masters (any world size: the fragments of every shard, reassembled), in the dtype asked for
// (fp16 and bf16 rounded to nearest even, as the engine rounds its 16-bit parameters: for the
// model's own dtype the bits are those of the checkpoint's 16-bit parameters). Streamed: the
// header first, then the data one chunk at a time, so memory stays below one chunk of one
// parameter whatever the model's size. Every shard of the tag is verified (size, checksum,
// header, tensor set), also one the export reads nothing from.
//
// The file is written beside its final name and renamed into place after an fsync, then the
// directory is fsynced: a crash leaves the old file or the new one, never a torn export. An
// existing file is never overwritten (kAlreadyExists).
//
// The metadata block: "format": "pt" (what Hugging Face's loaders look for), and where it came
// from: "zerosim_checkpoint" (the tag directory), "zerosim_tag", "global_steps",
// "source_world_size", "source_precision", "manifest_xxh3_128" (the manifest's seal), "dtype",
// "zerosim_version", and "excluded_parameters" (comma-separated) when there are any. A frozen
// parameter (its value alone in the checkpoint) is exported from that value, which is exactly
// what its master would be. A transformer's tied embedding is written twice, as
// transformer.wte.weight and lm_head.weight (the names GPT2LMHeadModel's state dict has; its
// loader ties them again); its buffers are not parameters and are not exported (the causal mask
// is derived, lm_head.target_frequency is zerosim's own training state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/checkpoint/manifest.h"
#include "core/env/disk.h"

namespace zerosim {

struct ExportSummary {
  int64_t tensor_count = 0;
  int64_t element_count = 0;
  uint64_t file_size_bytes = 0;
  // Frozen parameters the checkpoint does not hold (exclude_frozen_parameters): left out of the
  // file, as zero_to_fp32.py leaves them out, and named in its metadata ("excluded_parameters").
  std::vector<std::string> excluded_parameters;
};

Result<ExportSummary> export_consolidated_safetensors(Disk& disk, const std::string& tag_directory,
                                                      const CheckpointManifest& manifest, DType dtype,
                                                      const std::string& output_path);

}  // namespace zerosim
