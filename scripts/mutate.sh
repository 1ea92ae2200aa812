#!/usr/bin/env bash
# Mutation testing of the save/restore path: how many plausible bugs (tests/mutants/*.patch)
# do the scenario suite and a short fuzz campaign catch?
#
#   scripts/mutate.sh [--jobs N] [--fuzz-minutes M] [--seed S] [--build-type Release] [--out DIR]
#                     [--suite-timeout SEC] [MUTANT.patch ...]
#
# Defaults: every tests/mutants/*.patch, --jobs nproc/2 (at least 1), --fuzz-minutes 2 (0: suite
# only), --seed 1, --build-type Release, --out build-mutants/, --suite-timeout 900 (a run past
# its limit, the suite's or the fuzz campaign's plus 15 minutes, is an error, not a hang).
#
# Each job slot K gets its own copy of the source tree in DIR/work-K/src (the files git knows,
# tracked or untracked but not ignored; without .git everything but build*/ and .device-deps),
# configured once into DIR/work-K/build (Ninja, CUDA/MPI/benchmarks off) and built incrementally:
# per mutant the patch is applied (patch -p1, dry run first), `zerosim` rebuilt, then
#   zerosim suite <src>/scenarios/library       exit 1: killed by the suite (first FAIL scenario)
#   zerosim fuzz --seed S --minutes M ...       exit 1: killed by fuzz (the failing case)
# (a run that dies of a signal, an internal check's abort, is a kill too, shown as "crashed")
# and otherwise the mutant survived; any other exit status is an error (with the last lines).
# The patch is reverted (patch -R) afterwards, so the next build is incremental again.
#
# A mutant of `zerosim exec` (header "Tests: exec") is judged by exec's own tests instead: the
# worker builds exec_test (with the writers it runs) and runs it; a failing test kills it
# ("killed by exec tests", the first failing test), a pass is a survivor.
#
# A mutant file is a few header lines, then a `git diff` from the repository root:
#   Description: the plausible bug, one line
#   Class: at-rest-damage | retention-fallback | scheduler | elastic-padding | storage-faults |
#          durability | operator | fp16 | mid-write-crash | exec-recorder | exec-judge | general
#   Tests: exec (only for a mutant of zerosim exec: judged by tests/exec_test.cpp)
#   Equivalent: why (only for an equivalent mutant: still run, left out of the kill rate)
#
# Output: one line per mutant as it finishes (seconds: testing time to the verdict, build not
# included), then a Markdown table and the kill rate
# (killed / (mutants - equivalent - did not apply - did not build); errors count as not killed),
# also written to DIR/mutation-table.md and DIR/mutation-results.tsv; logs in DIR/logs/.
# Exits 0 whatever the verdicts (a measurement, not a test); non-zero only when the script
# itself cannot run (bad flags, a baseline that does not configure or build).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)

die() {
  echo "mutate.sh: $*" >&2
  exit 2
}
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

cpus=$(nproc 2>/dev/null || echo 2)
jobs=$((cpus / 2))
((jobs >= 1)) || jobs=1
fuzz_minutes=2
seed=1
build_type=Release
out="$root/build-mutants"
suite_timeout=900
patches=()
while (($#)); do
  case "$1" in
    --jobs | -j) [[ $# -ge 2 ]] || die "$1 needs a value"; jobs=$2; shift 2 ;;
    --jobs=*) jobs=${1#*=}; shift ;;
    --fuzz-minutes) [[ $# -ge 2 ]] || die "$1 needs a value"; fuzz_minutes=$2; shift 2 ;;
    --fuzz-minutes=*) fuzz_minutes=${1#*=}; shift ;;
    --seed) [[ $# -ge 2 ]] || die "$1 needs a value"; seed=$2; shift 2 ;;
    --seed=*) seed=${1#*=}; shift ;;
    --build-type) [[ $# -ge 2 ]] || die "$1 needs a value"; build_type=$2; shift 2 ;;
    --build-type=*) build_type=${1#*=}; shift ;;
    --out) [[ $# -ge 2 ]] || die "$1 needs a value"; out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --suite-timeout) [[ $# -ge 2 ]] || die "$1 needs a value"; suite_timeout=$2; shift 2 ;;
    --suite-timeout=*) suite_timeout=${1#*=}; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; patches+=("$@"); break ;;
    -*) die "unknown flag $1 (see --help)" ;;
    *) patches+=("$1"); shift ;;
  esac
done

[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs: expected a positive integer, found '$jobs'"
[[ $fuzz_minutes =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--fuzz-minutes: expected a number of minutes (0 skips fuzz), found '$fuzz_minutes'"
[[ $seed =~ ^[0-9]+$ ]] || die "--seed: expected a non-negative integer, found '$seed'"
[[ $suite_timeout =~ ^[1-9][0-9]*$ ]] || die "--suite-timeout: expected seconds > 0, found '$suite_timeout'"
[[ -n $build_type ]] || die "--build-type: empty"
for tool in cmake ninja patch tar timeout awk cmp; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed (needed to build and run the mutants)"
done

if ((${#patches[@]} == 0)); then
  shopt -s nullglob
  patches=("$root"/tests/mutants/*.patch)
  shopt -u nullglob
  ((${#patches[@]})) || die "no mutant in $root/tests/mutants/ (*.patch)"
fi
for i in "${!patches[@]}"; do
  p=${patches[$i]}
  [[ -f $p ]] || die "mutant $p: no such file"
  patches[$i]=$(cd "$(dirname "$p")" && pwd)/$(basename "$p")
done
count=${#patches[@]}
((jobs <= count)) || jobs=$count

mkdir -p "$out"
out=$(cd "$out" && pwd)
logs="$out/logs"
results="$out/results"
rm -rf "$results" "$out/queue.lock"
mkdir -p "$logs" "$results"

# The header fields of a mutant file (before its first "diff --git").
header_field() {
  awk -v key="$2" '/^diff --git /{exit} index($0, key ": ") == 1 {print substr($0, length(key) + 3); exit}' "$1"
}

# ---------------------------------------------------------------- worker copies
# The files to copy, NUL-separated, relative to the root (never anything under the output directory).
out_rel=""
case "$out/" in "$root"/*) out_rel=${out#"$root"/} ;; esac
source_files() {
  if [[ -e $root/.git ]] && command -v git >/dev/null; then
    (cd "$root" && git ls-files -z --cached --others --exclude-standard) |
      while IFS= read -r -d '' f; do
        [[ -f $root/$f ]] || continue
        [[ -n $out_rel && $f == "$out_rel"/* ]] && continue
        printf '%s\0' "$f"
      done
  else
    local prune=(-path './build*' -o -path ./.device-deps -o -path ./.git)
    [[ -z $out_rel ]] || prune+=(-o -path "./$out_rel")
    (cd "$root" && find . \( "${prune[@]}" \) -prune -o -type f -print0)
  fi
}
# This run's tree, extracted once; the workers are synchronised from it by content.
tree="$out/tree"
rm -rf "$tree"
mkdir -p "$tree"
source_files >"$out/source-files"
[[ -s $out/source-files ]] || die "no source files found under $root"
(cd "$root" && tar --null -T "$out/source-files" -cf -) | (cd "$tree" && tar -xf -)

cmake_flags=(-G Ninja "-DCMAKE_BUILD_TYPE=$build_type")
for option in ZEROSIM_WITH_CUDA ZEROSIM_WITH_MPI ZEROSIM_BUILD_BENCH ZEROSIM_FUZZ; do
  grep -q "option($option " "$root/CMakeLists.txt" && cmake_flags+=("-D$option=OFF")
done
build_jobs=$((cpus / jobs))
((build_jobs >= 1)) || build_jobs=1

# Worker K's copy is brought to this run's tree by content: only a file that differs is copied,
# and it gets a new time, so the build is incremental and never older than its sources (a file
# left mutated by an interrupted run, or reverted after its mutant was built, is rebuilt).
prepare_worker() {
  local k=$1 work="$out/work-$1" f
  mkdir -p "$work/src"
  (cd "$tree" && find . -type f -print0) | while IFS= read -r -d '' f; do
    if ! cmp -s -- "$tree/$f" "$work/src/$f"; then
      mkdir -p -- "$(dirname -- "$work/src/$f")"
      rm -f -- "$work/src/$f"
      cp -- "$tree/$f" "$work/src/$f"
    fi
  done
  cmake -S "$work/src" -B "$work/build" "${cmake_flags[@]}" >"$logs/work-$k-configure.log" 2>&1 || {
    echo "mutate.sh: worker $k: cmake configure failed:" >&2
    tail -n 20 "$logs/work-$k-configure.log" >&2
    return 1
  }
  cmake --build "$work/build" --target zerosim -- -j "$build_jobs" >"$logs/work-$k-baseline-build.log" 2>&1 || {
    echo "mutate.sh: worker $k: the unmutated tree does not build:" >&2
    tail -n 20 "$logs/work-$k-baseline-build.log" >&2
    return 1
  }
}

echo "mutate.sh: $count mutant(s), $jobs worker(s) x -j$build_jobs, fuzz $fuzz_minutes min (seed $seed), $build_type, out $out"
echo "mutate.sh: preparing the worker copies (first build of each; minutes)"
pids=()
for ((k = 1; k <= jobs; k++)); do
  prepare_worker "$k" &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
((failed == 0)) || die "could not prepare the workers (logs in $logs)"

# ---------------------------------------------------------------- one mutant
# Writes results/<name>.tsv: name, class, equivalent (yes/no), kind, detail, build s, test s.
# kind: killed-suite | killed-fuzz | killed-exec | survived | not-applied | not-built | error
run_mutant() {
  local k=$1 patch_file=$2
  local work="$out/work-$k" name class equivalent
  name=$(basename "$patch_file" .patch)
  class=$(header_field "$patch_file" Class)
  [[ -n $class ]] || class="?"
  equivalent=no
  [[ -n $(header_field "$patch_file" Equivalent) ]] && equivalent=yes
  local log="$logs/$name"
  rm -rf "$log"
  mkdir -p "$log"
  local kind detail="" build_seconds=0 test_seconds=0 started rc
  local zerosim="$work/build/tools/zerosim"

  if ! (cd "$work/src" && patch -p1 --dry-run --force --silent <"$patch_file") >"$log/patch.log" 2>&1; then
    kind=not-applied
    detail=$(tail -n 3 "$log/patch.log" | tr '\t\n' '  ')
  else
    (cd "$work/src" && patch -p1 --force --silent --no-backup-if-mismatch <"$patch_file") >>"$log/patch.log" 2>&1 ||
      die "worker $k: $name: applying failed after a clean dry run (see $log/patch.log)"
    started=$SECONDS
    if ! cmake --build "$work/build" --target zerosim -- -j "$build_jobs" >"$log/build.log" 2>&1; then
      kind=not-built
      detail=$(grep -m1 -E 'error' "$log/build.log" | cut -c1-200 | tr '\t' ' ' || true)
    fi
    build_seconds=$((SECONDS - started))
    if [[ -z ${kind:-} && $(header_field "$patch_file" Tests) == exec ]]; then
      # zerosim exec's mutants: its tests judge them.
      started=$SECONDS
      if ! cmake --build "$work/build" --target exec_test -- -j "$build_jobs" >>"$log/build.log" 2>&1; then
        kind=not-built
        detail=$(grep -m1 -E 'error' "$log/build.log" | cut -c1-200 | tr '\t' ' ' || true)
      else
        rc=0
        (cd "$work/build" && timeout --kill-after=30 "$suite_timeout" "$work/build/tests/exec_test") \
          >"$log/exec_test.log" 2>&1 </dev/null || rc=$?
        if ((rc == 0)); then
          kind=survived
        elif ((rc == 1)) && grep -q '^\[  FAILED  \]' "$log/exec_test.log"; then
          kind=killed-exec
          detail=$(grep -m1 '^\[  FAILED  \] [A-Za-z]' "$log/exec_test.log" | sed 's/^\[  FAILED  \] //; s/ (.*//' || true)
        elif ((rc > 128 && rc != 137)); then
          kind=killed-exec
          detail="(crashed: signal $((rc - 128)))"
        else
          kind=error
          detail="exec_test exit $rc: $(tail -n 3 "$log/exec_test.log" | cut -c1-160 | tr '\t\n' '  ')"
        fi
      fi
      test_seconds=$((SECONDS - started))
    fi
    if [[ -z ${kind:-} ]]; then
      started=$SECONDS
      rc=0
      (cd "$work/src" && timeout --kill-after=30 "$suite_timeout" "$zerosim" suite "$work/src/scenarios/library") \
        >"$log/suite.log" 2>&1 </dev/null || rc=$?
      if ((rc == 1)); then
        kind="killed-suite"
        # The scenario: the first FAIL among the verdict lines, by its file (they run in sorted order).
        local index
        index=$(awk '/^(PASS|FAIL)  /{n++} /^FAIL  /{print n; exit}' "$log/suite.log")
        if [[ -n $index ]]; then
          detail=$(cd "$work/src/scenarios/library" && LC_ALL=C ls -1 -- *.json | sed -n "${index}p" | sed 's/\.json$//')
          [[ -n $detail ]] || detail=$(grep -m1 '^FAIL  ' "$log/suite.log" | cut -c7-80)
        else
          detail="(no FAIL line)"
        fi
      elif ((rc > 128 && rc != 137)); then
        # The suite died of a signal (an internal check's abort, a segfault): the mutant broke
        # it as surely as a FAIL line does.
        kind="killed-suite"
        detail="(crashed: signal $((rc - 128)): $(grep -m1 -E 'internal check failed|Assertion|Segmentation' "$log/suite.log" | cut -c1-120 | tr '\t' ' ' || true))"
      elif ((rc != 0)); then
        kind=error
        local why=""
        ((rc == 124 || rc == 137)) && why=" (timed out after ${suite_timeout}s)"
        detail="suite exit $rc$why: $(tail -n 3 "$log/suite.log" | cut -c1-160 | tr '\t\n' '  ')"
      elif [[ $fuzz_minutes =~ ^0+([.]0*)?$ ]]; then
        kind=survived
      else
        rc=0
        local fuzz_limit
        fuzz_limit=$(awk -v m="$fuzz_minutes" 'BEGIN { printf "%d", m * 60 + 900 }')
        (cd "$log" && timeout --kill-after=30 "$fuzz_limit" "$zerosim" fuzz --seed "$seed" --minutes "$fuzz_minutes" \
          --stop-after-failures 1 --shrink-attempts 0 --failures-dir "$log/fuzz-failures") \
          >"$log/fuzz.log" 2>&1 </dev/null || rc=$?
        if ((rc == 0)); then
          kind=survived
        elif ((rc == 1)); then
          kind="killed-fuzz"
          detail=$(grep -m1 '^FAIL  ' "$log/fuzz.log" | grep -o 'case [0-9][0-9]*' | head -n 1 || true)
          [[ -n $detail ]] || detail="(no FAIL line)"
        elif ((rc > 128 && rc != 137)); then
          kind="killed-fuzz"
          detail="(crashed: signal $((rc - 128)))"
        else
          kind=error
          local why=""
          ((rc == 124 || rc == 137)) && why=" (timed out after ${fuzz_limit}s)"
          detail="fuzz exit $rc$why: $(tail -n 3 "$log/fuzz.log" | cut -c1-160 | tr '\t\n' '  ')"
        fi
      fi
      test_seconds=$((SECONDS - started))
    fi
    # Revert, so that the worker's tree is the unmutated one again (its build stays incremental).
    if ! (cd "$work/src" && patch -p1 -R --force --silent --no-backup-if-mismatch <"$patch_file") >>"$log/patch.log" 2>&1; then
      echo "mutate.sh: worker $k: $name: patch -R failed; restoring the files it touches from $tree" >&2
      local touched
      for touched in $(awk '/^\+\+\+ b\//{print substr($2, 3)}' "$patch_file"); do
        rm -f -- "$work/src/$touched" && cp -- "$tree/$touched" "$work/src/$touched"
      done
    fi
  fi
  [[ -n $detail ]] || detail="-"  # never an empty field: read splits on runs of tabs
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$class" "$equivalent" "$kind" "$detail" "$build_seconds" \
    "$test_seconds" >"$results/$name.tsv"
  local shown
  case $kind in
    killed-suite) shown="killed by suite $detail" ;;
    killed-fuzz) shown="killed by fuzz $detail" ;;
    killed-exec) shown="killed by exec tests $detail" ;;
    survived) shown=SURVIVED ;;
    not-applied) shown="does not apply" ;;
    not-built) shown="did not build" ;;
    *) shown="error: $detail" ;;
  esac
  [[ $equivalent == yes ]] && shown="$shown (equivalent)"
  printf '[%d/%d] %-48s %s (%ss)\n' "$(find "$results" -name '*.tsv' | wc -l)" "$count" "$name" "$shown" "$test_seconds"
}

# ---------------------------------------------------------------- the queue
# Worker K takes the next mutant under a mkdir lock until none is left.
next_index_file="$out/queue.next"
echo 0 >"$next_index_file"
take_next() {
  while ! mkdir "$out/queue.lock" 2>/dev/null; do sleep 0.05; done
  local n
  n=$(<"$next_index_file")
  echo $((n + 1)) >"$next_index_file"
  rmdir "$out/queue.lock"
  echo "$n"
}
worker() {
  local k=$1 n
  while :; do
    n=$(take_next)
    ((n < count)) || return 0
    run_mutant "$k" "${patches[$n]}"
  done
}
pids=()
for ((k = 1; k <= jobs; k++)); do
  worker "$k" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
((failed == 0)) || die "a worker failed (see above; logs in $logs)"

# ---------------------------------------------------------------- the table
tsv="$out/mutation-results.tsv"
table="$out/mutation-table.md"
printf 'mutant\tclass\tequivalent\tverdict\tdetail\tbuild_seconds\ttest_seconds\tdescription\n' >"$tsv"
md_escape() { sed 's/|/\\|/g'; }
{
  echo "| mutant | class | description | verdict | seconds |"
  echo "|---|---|---|---|---|"
} >"$table"
killed=0 equivalent_count=0 not_applied=0 not_built=0 survived=0 errors=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  description=$(header_field "$p" Description)
  line=$(cat "$results/$name.tsv" 2>/dev/null || printf '%s\t?\tno\terror\tno result\t0\t0' "$name")
  IFS=$'\t' read -r _ class equivalent kind detail build_seconds test_seconds <<<"$line"
  printf '%s\t%s\n' "$line" "$description" >>"$tsv"
  case $kind in
    killed-suite) verdict="killed by suite $detail" ;;
    killed-fuzz) verdict="killed by fuzz $detail" ;;
    killed-exec) verdict="killed by exec tests $detail" ;;
    survived) verdict="SURVIVED" ;;
    not-applied) verdict="did not apply" ;;
    not-built) verdict="did not build" ;;
    *) verdict="error: $detail" ;;
  esac
  if [[ $kind == not-applied ]]; then
    not_applied=$((not_applied + 1))
  elif [[ $kind == not-built ]]; then
    not_built=$((not_built + 1))
  elif [[ $equivalent == yes ]]; then
    equivalent_count=$((equivalent_count + 1))
    if [[ $kind == survived ]]; then verdict="equivalent"; else verdict="equivalent ($verdict)"; fi
  elif [[ $kind == killed-* ]]; then
    killed=$((killed + 1))
  elif [[ $kind == survived ]]; then
    survived=$((survived + 1))
  else
    errors=$((errors + 1))
  fi
  seconds=$test_seconds
  printf '| %s | %s | %s | %s | %s |\n' "$name" "$class" "$(md_escape <<<"$description")" "$(md_escape <<<"$verdict")" \
    "$seconds" >>"$table"
done
counted=$((count - equivalent_count - not_applied - not_built))
if ((counted > 0)); then
  rate=$(awk -v k="$killed" -v n="$counted" 'BEGIN { printf "%.1f%%", 100 * k / n }')
else
  rate="n/a"
fi
summary="Kill rate: $killed / $counted = $rate ($count mutants: $killed killed, $survived survived, $errors error(s) counted as not killed, $equivalent_count equivalent, $not_applied did not apply, $not_built did not build; fuzz $fuzz_minutes min, seed $seed)"
{
  echo
  echo "$summary"
} >>"$table"
echo
cat "$table"
echo
echo "table: $table; results: $tsv; logs: $logs"
exit 0
