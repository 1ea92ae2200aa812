#!/usr/bin/env bash
# Fuzzes zerosim's readers with libFuzzer (clang from Debian), each target for a bounded time.
# Not part of CI. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET...]
# (the targets run side by side, one per core).
# Targets: ds_config_fuzzer scenario_fuzzer fault_plan_fuzzer manifest_fuzzer safetensors_fuzzer
# swap_header_fuzzer. Builds into build-fuzz/ (every library instrumented: ASan and
# coverage), seeds each corpus from the repository's real inputs (the DeepSpeed configs, the
# scenario library, the bad-input corpus and its checkpoints), keeps the grown corpora in
# build-fuzz/corpus/<target>/ across runs, and prints one line per target: executions, seconds,
# corpus size, crashes. A crash's input is in build-fuzz/crashes/<target>/; make it a case of
# tests/data/bad/cases.json (or a unit test) before fixing it. Exit status 1 when any crashed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(ds_config_fuzzer scenario_fuzzer fault_plan_fuzzer manifest_fuzzer safetensors_fuzzer swap_header_fuzzer)
build="$root/build-fuzz"
command -v clang++ > /dev/null || { echo "fuzz: clang++ not found (apt-get install clang)" >&2; exit 2; }
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only -fsanitize=fuzzer-no-link,address" \
    -DZEROSIM_FUZZ=ON -DZEROSIM_WITH_CUDA=OFF -DZEROSIM_WITH_MPI=OFF -DZEROSIM_BUILD_BENCH=OFF > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log" >&2; exit 2; }
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$build.build.log" 2>&1 || { tail -30 "$build.build.log" >&2; exit 2; }

seed() {  # seed TARGET FILES...: copies the files into the target's corpus (kept across runs)
  local corpus="$build/corpus/$1"; shift
  mkdir -p "$corpus"
  for file in "$@"; do [ -f "$file" ] && cp "$file" "$corpus/seed-$(basename "$(dirname "$file")")-$(basename "$file")"; done
}
bad="$root/tests/data/bad"
seed ds_config_fuzzer "$root"/tests/data/ds_configs/*.json "$root/tests/data/seed_ds_config.json" "$bad"/configs/*.json
seed scenario_fuzzer "$root"/scenarios/library/*.json "$root"/scenarios/examples/*.json "$bad"/scenarios/*.json
mkdir -p "$build/corpus/fault_plan_fuzzer"
python3 - "$build/corpus/fault_plan_fuzzer" "$root"/scenarios/library/*.json "$root"/scenarios/examples/*.json <<'PY'
import json, sys
for i, path in enumerate(sys.argv[2:]):
    plan = json.load(open(path)).get("fault_plan")
    if plan is not None:
        open(f"{sys.argv[1]}/seed-{i}.json", "w").write(json.dumps(plan))
        for j, rules in enumerate(v for v in plan.values() if isinstance(v, list)):
            open(f"{sys.argv[1]}/seed-{i}-rules-{j}.json", "w").write(json.dumps(rules))
PY
seed manifest_fuzzer "$bad"/checkpoints/*/global_step2/manifest.json
seed safetensors_fuzzer "$bad"/checkpoints/*/global_step2/*.safetensors
seed swap_header_fuzzer "$bad"/swap/*.swp

# The targets run side by side, as many at once as there are cores.
parallel=$(nproc)
run_target() {
  local target=$1 crashes="$build/crashes/$1"
  mkdir -p "$crashes"
  "$build/fuzz/$target" "$build/corpus/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/" > "$build/$target.log" 2>&1
}
running=0
for target in "${targets[@]}"; do
  run_target "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then wait -n; running=$((running - 1)); fi
done
wait
status=0
printf '%-22s %12s %8s %8s %8s\n' target executions seconds corpus crashes
for target in "${targets[@]}"; do
  executions=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$build/$target.log" | awk '{print $2}')
  found=$(find "$build/crashes/$target" -type f | wc -l)
  [ "$found" -eq 0 ] || status=1
  printf '%-22s %12s %8s %8s %8s\n' "$target" "${executions:-?}" "$seconds" "$(ls "$build/corpus/$target" | wc -l)" "$found"
done
exit $status
