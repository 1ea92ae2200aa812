// zero_optimization (with offload_optimizer and offload_param), checkpoint, zerosim and aio of a
// DeepSpeed config.
#include "core/config/ds_config_keys.h"
#include "core/config/ds_config_reading.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace zerosim::ds_config_detail {

namespace {

// A pydantic alias pair (stage3_prefetch_bucket_size / prefetch_bucket_size): the value given
// under either name, the alias winning when both are given. Returns the path actually used.
const json* find_aliased(Context& context, const Block& block, std::string_view alias, std::string_view name,
                         std::string* used_path) {
  const json* by_alias = block.find(alias);
  const json* by_name = alias == name ? nullptr : block.find(name);
  if (by_alias != nullptr && by_name != nullptr) {
    context.warn(block.at(name) + " is ignored because " + block.at(alias) + " is also given (the same setting)");
  }
  if (by_alias != nullptr) {
    *used_path = block.at(alias);
    return by_alias;
  }
  *used_path = block.at(name);
  return by_name;
}

int64_t get_aliased_int(Context& context, const Block& block, std::string_view alias, std::string_view name,
                        int64_t fallback, Bound bound) {
  std::string path;
  const json* value = find_aliased(context, block, alias, name, &path);
  if (value == nullptr) return fallback;
  if (is_auto(*value)) {
    unfilled_auto_means_default(context, block, path, std::to_string(fallback));
    return fallback;
  }
  return parse_int(context, *value, path, true, bound).value_or(fallback);
}

// A zero_optimization size that the HF Trainer fills from the hidden size when "auto"
// (trainer_config_finalize); otherwise "auto" is dropped by DeepSpeed and the default is used.
int64_t get_hidden_size_key(Context& context, const Block& zero, std::string_view alias, std::string_view name,
                            int64_t fallback, bool trainer_fills, int64_t (*formula)(int64_t),
                            const char* formula_text) {
  std::string path;
  const json* value = find_aliased(context, zero, alias, name, &path);
  if (value == nullptr) return fallback;
  if (!is_auto(*value)) return parse_int(context, *value, path, true, Bound::kNonNegative).value_or(fallback);
  const int64_t hidden = context.settings.hidden_size;
  if (trainer_fills && has_positive(hidden) && !checked_product({hidden, hidden, 10})) {
    context.error(path, "is \"auto\" and --hidden-size " + std::to_string(hidden) + " is too large to fill it");
    return fallback;
  }
  if (trainer_fills && has_positive(hidden)) {
    const int64_t filled = formula(hidden);
    context.warn(path + " is \"auto\"; filled with " + std::to_string(filled) + " = " + formula_text + " from " +
                 kHiddenSizeSetting.flag + " " + std::to_string(hidden));
    return filled;
  }
  context.warn(path + " is \"auto\"; DeepSpeed drops \"auto\" here and uses the default " +
               std::to_string(fallback) +
               (trainer_fills ? " (give " + std::string(kHiddenSizeSetting.flag) + " for the HF Trainer's value " +
                                    formula_text + ")"
                              : std::string(" (the HF Trainer fills it only at stage 3)")));
  return fallback;
}

// offload_optimizer / offload_param.
void read_offload(Context& context, const Block& zero, std::string_view key, bool is_optimizer,
                  OffloadConfig& offload, json& resolved_zero) {
  const Block block = object_block(context, zero.find(key), zero.at(key), true, true);
  const std::span<const KeySpec> specs =
      is_optimizer ? std::span<const KeySpec>(kOffloadOptimizerKeys) : std::span<const KeySpec>(kOffloadParamKeys);
  json resolved_block = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, specs, Unknown::kRefuse, &resolved_block);

  offload.buffer_count = is_optimizer ? 4 : 5;
  if (const json* value = block.find("device")) {
    const std::string path = block.at("device");
    const std::string text = value->is_string() ? value->get<std::string>() : std::string();
    if (is_auto(*value)) {
      unfilled_auto_means_default(context, block, path, "\"none\"");
    } else if (text == "none") {
      offload.device = OffloadDevice::kNone;
    } else if (text == "cpu") {
      offload.device = OffloadDevice::kCpu;
    } else if (text == "nvme") {
      offload.device = OffloadDevice::kNvme;
    } else {
      context.error(path, "expected one of \"none\", \"cpu\", \"nvme\" (case-sensitive), found " + show(*value));
    }
  }
  if (const json* value = block.find("nvme_path"); value != nullptr && !value->is_null()) {
    if (value->is_string() && !is_auto(*value)) {
      offload.nvme_path = value->get<std::string>();
    } else {
      context.error(block.at("nvme_path"), "expected a path (a string), found " + show(*value));
    }
  }
  offload.buffer_count = get_int(context, block, "buffer_count", offload.buffer_count, Bound::kPositive);
  offload.pin_memory = get_bool(context, block, "pin_memory", offload.pin_memory);
  if (is_optimizer) {
    offload.pipeline_read = get_bool(context, block, "pipeline_read", offload.pipeline_read);
    offload.pipeline_write = get_bool(context, block, "pipeline_write", offload.pipeline_write);
    offload.fast_init = get_bool(context, block, "fast_init", offload.fast_init);
    offload.ratio = get_number(context, block, "ratio", offload.ratio, Bound::kNonNegative);
    if (offload.ratio > 1.0) {
      context.error(block.at("ratio"), "expected a number in [0, 1], found " + show_number(offload.ratio));
    }
  } else {
    offload.buffer_size = get_int(context, block, "buffer_size", offload.buffer_size, Bound::kPositive);
    offload.max_in_cpu = get_int(context, block, "max_in_cpu", offload.max_in_cpu, Bound::kNonNegative);
  }
  if (offload.device == OffloadDevice::kNvme && offload.nvme_path.empty()) {
    context.warn(block.at("nvme_path") + ": missing with device \"nvme\"; DeepSpeed accepts this at config time "
                                         "and fails at run time, zerosim needs a swap folder");
  }

  resolved_block["device"] = offload_device_name(offload.device);
  resolved_block["nvme_path"] = offload.nvme_path.empty() ? json() : json(offload.nvme_path);
  resolved_block["buffer_count"] = offload.buffer_count;
  resolved_block["pin_memory"] = offload.pin_memory;
  if (is_optimizer) {
    resolved_block["pipeline_read"] = offload.pipeline_read;
    resolved_block["pipeline_write"] = offload.pipeline_write;
    resolved_block["fast_init"] = offload.fast_init;
    resolved_block["ratio"] = offload.ratio;
  } else {
    resolved_block["buffer_size"] = offload.buffer_size;
    resolved_block["max_in_cpu"] = offload.max_in_cpu;
  }
  resolved_zero[std::string(key)] = std::move(resolved_block);
}

void read_checkpoint_writer(Context& context, const Block& checkpoint_block, CheckpointConfig& checkpoint,
                            json& resolved_checkpoint) {
  const Block block =
      object_block(context, checkpoint_block.find("writer"), checkpoint_block.at("writer"), false, true);
  if (block.object == nullptr) return;  // DeepSpeed: no writer, torch.save
  json& resolved_writer = resolved_object(resolved_checkpoint, "writer");
  resolved_writer = *block.object;
  check_keys(context, block, kCheckpointWriterKeys, Unknown::kIgnore, &resolved_writer);
  // DeepSpeed upper-cases the type (default FAST once a writer is given); MOCK writes nothing.
  checkpoint.writer = CheckpointWriterType::kFast;
  if (const json* type = block.find("type")) {
    const std::string text = type->is_string() ? uppercase(type->get<std::string>()) : std::string();
    if (text == "FAST") {
      checkpoint.writer = CheckpointWriterType::kFast;
    } else if (text == "PYTHON") {
      checkpoint.writer = CheckpointWriterType::kPython;
    } else if (text == "MOCK") {
      context.error(block.at("type"), "\"mock\" writes nothing (DeepSpeed's MockFileWriter, for benchmarks): a "
                                      "checkpoint saved with it cannot be loaded; use \"fast\" or \"python\"");
    } else {
      context.error(block.at("type"), "expected \"fast\", \"python\" or \"mock\" (any case, as DeepSpeed "
                                      "upper-cases it), found " + show(*type));
    }
  }
  resolved_writer["type"] = checkpoint_writer_type_name(checkpoint.writer);
  checkpoint.io_buffer_size = get_int(context, block, "io_buffer_size", checkpoint.io_buffer_size, Bound::kPositive);
  checkpoint.io_buffer_double = get_bool(context, block, "io_buffer_double", checkpoint.io_buffer_double);
  // O_DIRECT moves whole 4096-byte blocks from aligned buffers: each half of a double buffer too.
  const int64_t unit_bytes = checkpoint.io_buffer_double ? 2 * 4096 : 4096;
  if (block.find("io_buffer_size") != nullptr && checkpoint.io_buffer_size % unit_bytes != 0) {
    context.error(block.at("io_buffer_size"),
                  "expected a multiple of " + std::to_string(unit_bytes) + " bytes (O_DIRECT moves whole 4096-byte " +
                      "blocks" + (checkpoint.io_buffer_double ? ", from each half of the double buffer" : "") +
                      "), found " + std::to_string(checkpoint.io_buffer_size));
  }
  if (const json* decoupled = block.find("decoupled"); decoupled != nullptr && *decoupled == json(true)) {
    context.warn(block.at("decoupled") + " is true: DeepSpeed then writes from a separate process; zerosim writes " +
                 "each shard from its rank (checkpoint.async_save moves the write off the training step)");
  }
  resolved_writer["io_buffer_size"] = checkpoint.io_buffer_size;
  resolved_writer["io_buffer_double"] = checkpoint.io_buffer_double;
}

}  // namespace

void read_zero(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  ZeroConfig& zero = out.zero;
  const json* value = find_or_null(document, "zero_optimization");
  json bool_form;  // the very old "zero_optimization": true/false
  if (value != nullptr && value->is_boolean()) {
    const bool enabled = value->get<bool>();
    bool_form = json::object();
    bool_form["stage"] = enabled ? 1 : 0;
    if (enabled) {
      int64_t allgather = 500000000;
      if (const json* size = find_or_null(document, "allgather_size")) {
        allgather = parse_int(context, *size, "allgather_size", false, Bound::kNonNegative).value_or(allgather);
      }
      bool_form["allgather_bucket_size"] = allgather;
    }
    context.warn(std::string("zero_optimization: the boolean form is deprecated; ") + (enabled ? "true" : "false") +
                 " means stage " + (enabled ? "1" : "0") + " (DeepSpeed reads it the same way)");
    value = &bool_form;
  }
  const Block block = object_block(context, value, "zero_optimization", true, false);
  json& resolved_zero = resolved["zero_optimization"];
  resolved_zero = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, kZeroKeys, Unknown::kRefuse, &resolved_zero);

  if (const json* stage = block.find("stage")) {
    if (is_auto(*stage)) {
      unfilled_auto_means_default(context, block, "zero_optimization.stage", "0");
    } else {
      // Checked by hand so that the message says which stages exist.
      Context scratch(context.settings);
      std::optional<int64_t> parsed = parse_int(scratch, *stage, "zero_optimization.stage", true, Bound::kAny);
      if (!parsed || *parsed < 0 || *parsed > 3) {
        context.error("zero_optimization.stage", "expected 0, 1, 2 or 3, found " + show(*stage));
      } else {
        zero.stage = *parsed;
      }
    }
  }
  const bool stage3 = zero.stage == 3;
  // DeepSpeed's validator (zero/config.py elastic_checkpoint_deprecated) warns at stage 3, and its
  // stage-3 state_dict raises NotImplementedError (stage3.py, "Use Universal Checkpointing");
  // zerosim's checkpoints load at any world size whatever the key says.
  if (const json* elastic = block.find("elastic_checkpoint"); stage3 && elastic != nullptr && elastic->is_boolean() &&
                                                               elastic->get<bool>()) {
    context.warn("zero_optimization.elastic_checkpoint: ZeRO-3 elastic checkpointing is deprecated and no longer "
                 "supported by DeepSpeed (its stage-3 save raises NotImplementedError; use Universal Checkpointing); "
                 "zerosim ignores the key: its checkpoints load at any world size");
  }

  zero.sub_group_size = get_int(context, block, "sub_group_size", zero.sub_group_size, Bound::kNonNegative);
  zero.reduce_bucket_size = get_hidden_size_key(
      context, block, "reduce_bucket_size", "reduce_bucket_size", zero.reduce_bucket_size, true,
      [](int64_t hidden) { return hidden * hidden; }, "hidden_size^2");
  zero.allgather_bucket_size =
      get_int(context, block, "allgather_bucket_size", zero.allgather_bucket_size, Bound::kNonNegative);
  zero.prefetch_bucket_size = get_hidden_size_key(
      context, block, "stage3_prefetch_bucket_size", "prefetch_bucket_size", zero.prefetch_bucket_size, stage3,
      [](int64_t hidden) {
        const double h = static_cast<double>(hidden);
        return static_cast<int64_t>(0.9 * h * h);  // int(0.9 * hidden_size * hidden_size)
      },
      "int(0.9 x hidden_size^2)");
  zero.param_persistence_threshold = get_hidden_size_key(
      context, block, "stage3_param_persistence_threshold", "param_persistence_threshold",
      zero.param_persistence_threshold, stage3, [](int64_t hidden) { return 10 * hidden; }, "10 x hidden_size");
  zero.max_live_parameters = get_aliased_int(context, block, "stage3_max_live_parameters", "max_live_parameters",
                                             zero.max_live_parameters, Bound::kNonNegative);
  zero.max_reuse_distance = get_aliased_int(context, block, "stage3_max_reuse_distance", "max_reuse_distance",
                                            zero.max_reuse_distance, Bound::kNonNegative);
  zero.contiguous_gradients = get_bool(context, block, "contiguous_gradients", zero.contiguous_gradients);

  // overlap_comm: None (absent, null or "auto") means True for stage 3, else False.
  zero.overlap_comm = stage3;
  if (const json* overlap = block.find("overlap_comm"); overlap != nullptr && !overlap->is_null()) {
    if (is_auto(*overlap)) {
      context.warn("zero_optimization.overlap_comm is \"auto\"; DeepSpeed drops \"auto\" here and uses its "
                   "default (true for stage 3, else false)");
    } else {
      zero.overlap_comm = parse_bool(context, *overlap, "zero_optimization.overlap_comm", true).value_or(stage3);
    }
  }

  {
    std::string path;
    const json* gather = find_aliased(context, block, "stage3_gather_16bit_weights_on_model_save",
                                      "gather_16bit_weights_on_model_save", &path);
    const json* legacy = block.find("stage3_gather_fp16_weights_on_model_save");
    if (gather != nullptr && legacy != nullptr) {
      context.error("zero_optimization.stage3_gather_fp16_weights_on_model_save",
                    "cannot be given together with its replacement " + path.substr(path.find('.') + 1) +
                        " (DeepSpeed refuses both)");
    } else if (legacy != nullptr) {
      context.warn("zero_optimization.stage3_gather_fp16_weights_on_model_save is deprecated; read as "
                   "stage3_gather_16bit_weights_on_model_save");
      if (is_auto(*legacy)) {
        unfilled_auto_means_default(context, block, "zero_optimization.stage3_gather_fp16_weights_on_model_save",
                                    "false");
      } else {
        zero.gather_16bit_weights_on_model_save =
            parse_bool(context, *legacy, "zero_optimization.stage3_gather_fp16_weights_on_model_save", true)
                .value_or(false);
      }
    } else if (gather != nullptr) {
      if (is_auto(*gather)) {
        unfilled_auto_means_default(context, block, path, "false");
      } else {
        zero.gather_16bit_weights_on_model_save = parse_bool(context, *gather, path, true).value_or(false);
      }
    }
  }

  read_offload(context, block, "offload_optimizer", true, zero.offload_optimizer, resolved_zero);
  read_offload(context, block, "offload_param", false, zero.offload_param, resolved_zero);

  // Deprecated booleans that DeepSpeed maps onto the offload blocks.
  struct LegacyOffload {
    const char* key;
    const char* replacement;
    OffloadConfig* target;
  };
  for (const LegacyOffload& legacy : {LegacyOffload{"cpu_offload", "offload_optimizer", &zero.offload_optimizer},
                                      LegacyOffload{"cpu_offload_param", "offload_param", &zero.offload_param}}) {
    const json* flag = block.find(legacy.key);
    if (flag == nullptr) continue;
    const std::string path = block.at(legacy.key);
    if (block.find(legacy.replacement) != nullptr) {
      context.error(path, std::string("cannot be given together with its replacement ") + legacy.replacement +
                              " (DeepSpeed refuses both)");
      continue;
    }
    bool enabled = false;
    if (is_auto(*flag)) {
      unfilled_auto_means_default(context, block, path, "null");
    } else if (!flag->is_null()) {
      enabled = parse_bool(context, *flag, path, true).value_or(false);
    }
    context.warn(path + " is deprecated; " +
                 (enabled ? std::string("read as ") + legacy.replacement + ".device \"cpu\""
                          : std::string("false leaves ") + legacy.replacement + " off") +
                 " (use " + legacy.replacement + " instead)");
    if (enabled) {
      legacy.target->device = OffloadDevice::kCpu;
      resolved_zero[legacy.replacement]["device"] = "cpu";
    }
  }
  if (const json* pin = block.find("cpu_offload_use_pin_memory")) {
    const std::string path = block.at("cpu_offload_use_pin_memory");
    if (!pin->is_null() && !is_auto(*pin)) parse_bool(context, *pin, path, true);
    context.warn(path + " is deprecated and has no effect in DeepSpeed; use offload_optimizer.pin_memory or "
                        "offload_param.pin_memory");
    context.mark_inactive(path);
  }

  // Stage-dependent meaning.
  if (zero.offload_optimizer.ratio < 1.0 && !stage3) {
    context.error("zero_optimization.offload_optimizer.ratio",
                  "partial offloading (ratio < 1) needs stage 3, found stage " + std::to_string(zero.stage));
  }
  if (zero.offload_param.device != OffloadDevice::kNone && !stage3) {
    context.warn("zero_optimization.offload_param: ignored at stage " + std::to_string(zero.stage) +
                 " (parameter offload exists only at stage 3, as in DeepSpeed)");
    zero.offload_param.device = OffloadDevice::kNone;
    resolved_zero["offload_param"]["device"] = "none";
  }

  // The resolved block uses DeepSpeed's JSON names and drops the legacy and field-name forms.
  for (const char* key : {"cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory",
                          "stage3_gather_fp16_weights_on_model_save", "prefetch_bucket_size",
                          "param_persistence_threshold", "max_live_parameters", "max_reuse_distance",
                          "gather_16bit_weights_on_model_save"}) {
    resolved_zero.erase(key);
  }
  for (const auto& [alias, name] : std::initializer_list<std::pair<const char*, const char*>>{
           {"stage3_model_persistence_threshold", "model_persistence_threshold"},
           {"stage3_module_granularity_threshold", "module_granularity_threshold"},
           {"stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params"},
           {"stage3_allgather_sequential", "allgather_sequential"},
           {"stage3_partition_stream_chunk_size", "partition_stream_chunk_size"}}) {
    if (resolved_zero.contains(name)) {
      if (!resolved_zero.contains(alias)) resolved_zero[alias] = resolved_zero[name];
      resolved_zero.erase(name);
    }
  }
  resolved_zero["stage"] = zero.stage;
  resolved_zero["sub_group_size"] = zero.sub_group_size;
  resolved_zero["reduce_bucket_size"] = zero.reduce_bucket_size;
  resolved_zero["allgather_bucket_size"] = zero.allgather_bucket_size;
  resolved_zero["stage3_prefetch_bucket_size"] = zero.prefetch_bucket_size;
  resolved_zero["stage3_param_persistence_threshold"] = zero.param_persistence_threshold;
  resolved_zero["stage3_max_live_parameters"] = zero.max_live_parameters;
  resolved_zero["stage3_max_reuse_distance"] = zero.max_reuse_distance;
  resolved_zero["overlap_comm"] = zero.overlap_comm;
  resolved_zero["contiguous_gradients"] = zero.contiguous_gradients;
  resolved_zero["stage3_gather_16bit_weights_on_model_save"] = zero.gather_16bit_weights_on_model_save;
}

void read_checkpoint(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  CheckpointConfig& checkpoint = out.checkpoint;
  const Block block = object_block(context, find_or_null(document, "checkpoint"), "checkpoint", false, true);
  json& resolved_checkpoint = resolved["checkpoint"];
  resolved_checkpoint = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, kCheckpointKeys, Unknown::kIgnore, &resolved_checkpoint);
  // DeepSpeedConfig: tag_validation.upper() must be WARN, IGNORE or FAIL (default WARN); anything
  // else is a DeepSpeedConfigError (a non-string fails on .upper()).
  if (const json* validation = block.find("tag_validation")) {
    const std::string text = validation->is_string() ? uppercase(validation->get<std::string>()) : std::string();
    if (text == "WARN" || text == "IGNORE" || text == "FAIL") {
      resolved_checkpoint["tag_validation"] = text;
    } else {
      context.error(block.at("tag_validation"),
                    "expected \"Warn\", \"Ignore\" or \"Fail\" (any case, as DeepSpeed upper-cases it), found " +
                        show(*validation));
    }
  }
  read_checkpoint_writer(context, block, checkpoint, resolved_checkpoint);
  checkpoint.async_save = get_bool(context, block, "async_save", checkpoint.async_save);
  checkpoint.keep_last = get_int(context, block, "keep_last", checkpoint.keep_last, Bound::kNonNegative);
  resolved_checkpoint["async_save"] = checkpoint.async_save;
  resolved_checkpoint["keep_last"] = checkpoint.keep_last;
}

void read_zerosim(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  const Block block = object_block(context, find_or_null(document, "zerosim"), "zerosim", false, true);
  json& resolved_block = resolved["zerosim"];
  resolved_block = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, kZerosimKeys, Unknown::kRefuse, &resolved_block);
  if (const json* numerics = block.find("numerics")) {
    const std::string text = numerics->is_string() ? numerics->get<std::string>() : std::string();
    if (text == "portable") {
      out.numerics = NumericsMode::kPortable;
    } else if (text == "deepspeed") {
      out.numerics = NumericsMode::kDeepSpeed;
    } else {
      context.error(block.at("numerics"), "expected \"portable\" or \"deepspeed\", found " + show(*numerics));
    }
  }
  resolved_block["numerics"] = numerics_mode_name(out.numerics);
  if (const json* release = block.find("deepspeed_release")) {
    Result<DeepSpeedRelease> parsed = release->is_string()
                                          ? parse_deepspeed_release(release->get<std::string>())
                                          : Result<DeepSpeedRelease>(invalid_argument("expected a string"));
    if (parsed.ok()) {
      out.deepspeed_release = *parsed;
    } else {
      context.error(block.at("deepspeed_release"),
                    "expected a DeepSpeed release as \"X.Y.Z\" (e.g. \"0.14.5\"), found " + show(*release));
    }
  }
}

void read_aio(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  AioConfig& aio = out.aio;
  const Block block = object_block(context, find_or_null(document, "aio"), "aio", false, true);
  json& resolved_aio = resolved["aio"];
  resolved_aio = block.object != nullptr ? *block.object : json::object();
  check_keys(context, block, kAioKeys, Unknown::kIgnore, &resolved_aio);

  aio.block_size = get_int(context, block, "block_size", aio.block_size, Bound::kPositive);
  aio.queue_depth = get_int(context, block, "queue_depth", aio.queue_depth, Bound::kPositive);
  aio.single_submit = get_bool(context, block, "single_submit", aio.single_submit);
  aio.overlap_events = get_bool(context, block, "overlap_events", aio.overlap_events);
  aio.use_gds = get_bool(context, block, "use_gds", aio.use_gds);
  if (block.find("intra_op_parallelism") != nullptr) {
    aio.intra_op_parallelism =
        get_int(context, block, "intra_op_parallelism", aio.intra_op_parallelism, Bound::kPositive);
    if (block.find("thread_count") != nullptr) {
      context.warn("aio.thread_count is ignored because aio.intra_op_parallelism is given (thread_count is its old "
                   "name)");
      context.mark_inactive("aio.thread_count");
    }
  } else if (block.find("thread_count") != nullptr) {
    aio.intra_op_parallelism = get_int(context, block, "thread_count", aio.intra_op_parallelism, Bound::kPositive);
    context.warn("aio.thread_count is the old name of aio.intra_op_parallelism (renamed in DeepSpeed #7056); zerosim "
                 "reads it as intra_op_parallelism = " +
                 std::to_string(aio.intra_op_parallelism) +
                 ", while DeepSpeed HEAD ignores thread_count and uses intra_op_parallelism = 1");
  }
  resolved_aio.erase("thread_count");
  resolved_aio["block_size"] = aio.block_size;
  resolved_aio["queue_depth"] = aio.queue_depth;
  resolved_aio["intra_op_parallelism"] = aio.intra_op_parallelism;
  resolved_aio["single_submit"] = aio.single_submit;
  resolved_aio["overlap_events"] = aio.overlap_events;
  resolved_aio["use_gds"] = aio.use_gds;
}

}  // namespace zerosim::ds_config_detail
