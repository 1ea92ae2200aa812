#!/usr/bin/env bash
# The GPU checks, on the GPU machine (one or two H200s), after a build into build-gpu:
#   1. the GPU-labelled tests (kernels, NCCL communicator, the engine with --device cuda);
#   2. resume equivalence through the CLI: for W in 1 and (with two GPUs) 2, the digest of an
#      uninterrupted `train --device cuda` run against save at step 6 and resume to step 12 at
#      the same world size and at the other one, and against the CPU run;
#   3. the scenario library (alone, and with each defect switched on) on --device cuda against
#      --device cpu: the same verdict and diagnosis for every scenario;
#   4. (two GPUs; run before 3) `train --rendezvous` as two processes, one GPU each, against the
#      threads' digest, and a save by two processes resumed by one and the other way; and the
#      same under `mpiexec -n 2 train --mpi` when mpiexec is found (or given as $MPIEXEC);
#   5. `explore --real-kill` with the killed children computing on the GPU, against the same
#      exploration on the CPU: the same crash points, passed, refused and failed.
# Usage: scripts/gpu-check.sh BUILD_DIR OUT_DIR. Exit status 0 when everything agrees.
set -uo pipefail
build=${1:?build directory}
out=${2:?output directory}
zerosim="$build/tools/zerosim"
work=$(mktemp -d /tmp/zerosim-gpu-check-XXXXXX)
status=0
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs: $gpus"; nvidia-smi -L

echo "== 1. ctest -L gpu"
(cd "$build" && ctest -L gpu --output-on-failure --timeout 900) > "$out/gpu-tests.txt" 2>&1 || status=1
tail -n 4 "$out/gpu-tests.txt"

echo "== 2. resume equivalence through the CLI (model 64,512,256,10, fp16, optimizer on NVMe)"
common="--model 64,512,256,10 --set train_batch_size=16 --micro-batch-size 2 --json"
digest() { python3 -c 'import json,sys; t=sys.stdin.read(); print(json.loads(t[t.index("{"):])["state_digest"])'; }
world_sizes="1"; [ "$gpus" -ge 2 ] && world_sizes="1 2"
for w in $world_sizes; do
  other=$(( w == 1 ? 2 : 1 ))
  cpu=$("$zerosim" train $common --steps 12 --world-size "$w" --device cpu --run-id cpu-$w | digest)
  gpu=$("$zerosim" train $common --steps 12 --world-size "$w" --device cuda --run-id gpu-$w | digest)
  "$zerosim" train $common --steps 6 --world-size "$w" --device cuda --run-id save-$w \
      --save-dir "$work/ckpt-$w" > /dev/null || status=1
  same=$("$zerosim" train $common --steps 12 --world-size "$w" --device cuda --run-id same-$w --resume "$work/ckpt-$w" | digest)
  elastic=$("$zerosim" train $common --steps 12 --world-size "$other" --device cuda --run-id elastic-$w --resume "$work/ckpt-$w" | digest)
  verdict=ok
  for d in "$gpu" "$same" "$elastic"; do [ "$d" = "$cpu" ] || verdict=DIFFERS; done
  [ "$verdict" = ok ] || status=1
  printf 'W=%s  cpu %s  cuda %s  resumed W=%s %s  resumed W=%s %s  %s\n' "$w" "$cpu" "$gpu" "$w" "$same" "$other" "$elastic" "$verdict"
done | tee "$out/resume-equivalence.txt"
grep -q DIFFERS "$out/resume-equivalence.txt" && status=1

echo "== 4. several processes, one GPU each, NCCL through a rendezvous file (two GPUs)"
if [ "$gpus" -ge 2 ]; then
  # Each launch: two processes with RANK/WORLD_SIZE/LOCAL_RANK, as a launcher would start them.
  launch() {
    local rendezvous="$work/rendezvous-$RANDOM" pids=() rc=0
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r timeout 300 "$zerosim" train $common --device cuda --rendezvous "$rendezvous" "$@" \
          > "$work/process-$r.out" 2> "$work/process-$r.err" &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    [ $rc = 0 ] || { echo "a process failed:" >&2; tail -3 "$work"/process-*.err >&2; }
    cat "$work/process-0.out"
  }
  reference=$("$zerosim" train $common --steps 12 --world-size 2 --device cpu --run-id mp-cpu | digest)
  two=$(launch --steps 12 --run-id mp-two | digest)
  launch --steps 6 --run-id mp-save --save-dir "$work/mp-ckpt" > /dev/null
  one_from_two=$("$zerosim" train $common --steps 12 --world-size 1 --device cuda --run-id mp-one --resume "$work/mp-ckpt" | digest)
  "$zerosim" train $common --steps 6 --world-size 1 --device cuda --run-id sp-save --save-dir "$work/sp-ckpt" > /dev/null
  two_from_one=$(launch --steps 12 --run-id mp-resume --resume "$work/sp-ckpt" | digest)
  verdict=ok
  for d in "$two" "$one_from_two" "$two_from_one"; do [ "$d" = "$reference" ] || verdict=DIFFERS; done
  [ "$verdict" = ok ] || status=1
  printf 'cpu W=2 (threads) %s  2 processes %s  saved by 2 processes, resumed by 1 %s  saved by 1, resumed by 2 processes %s  %s\n' \
      "$reference" "$two" "$one_from_two" "$two_from_one" "$verdict" | tee "$out/multi-process.txt"
  # The same under MPI (`train --mpi`: MPI only shares the NCCL id), when this build has MPI.
  mpiexec=${MPIEXEC:-$(command -v mpiexec || true)}
  if [ -n "$mpiexec" ] && "$zerosim" train --help | grep -q -- "--mpi"; then
    mpi_run() { OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 "$mpiexec" -n 2 --oversubscribe \
        "$zerosim" train $common --device cuda --mpi "$@" 2> "$work/mpi.err"; }
    mpi_two=$(mpi_run --steps 12 --run-id mpi-two | digest) || tail -5 "$work/mpi.err" >&2
    mpi_run --steps 6 --run-id mpi-save --save-dir "$work/mpi-ckpt" > /dev/null || tail -5 "$work/mpi.err" >&2
    one_from_mpi=$("$zerosim" train $common --steps 12 --world-size 1 --device cuda --run-id mpi-one --resume "$work/mpi-ckpt" | digest)
    verdict=ok
    for d in "$mpi_two" "$one_from_mpi"; do [ "$d" = "$reference" ] || verdict=DIFFERS; done
    [ "$verdict" = ok ] || status=1
    printf 'mpiexec -n 2 train --mpi %s  saved under MPI, resumed by 1 process %s  %s\n' \
        "$mpi_two" "$one_from_mpi" "$verdict" | tee -a "$out/multi-process.txt"
  else
    echo "MPI: skipped (no mpiexec, or built without MPI)" | tee -a "$out/multi-process.txt"
  fi
else
  echo "skipped: one GPU" | tee "$out/multi-process.txt"
fi

echo "== 3. the scenario library on cuda against cpu"
verdicts() { python3 -c '
import json,sys
t=sys.stdin.read(); d=json.loads(t[t.index("{"):])
for s in d["scenarios"]: print(s["scenario"], "|", "PASS" if s["passed"] else "FAIL", "|", s["outcome"], "|", s["diagnosis"])'; }
for defect in "" $("$zerosim" defects | awk '{print $1}'); do
  flag=${defect:+--defect $defect}
  "$zerosim" suite scenarios/library --json $flag --device cpu 2>/dev/null | verdicts > "$work/cpu.txt"
  start=$(date +%s.%N)
  "$zerosim" suite scenarios/library --json $flag --device cuda --report-dir "$work/report-$defect" 2>/dev/null | verdicts > "$work/cuda.txt"
  end=$(date +%s.%N)
  same=$(cmp -s "$work/cpu.txt" "$work/cuda.txt" && echo "same verdicts" || echo "VERDICTS DIFFER")
  [ "$same" = "same verdicts" ] || { status=1; diff "$work/cpu.txt" "$work/cuda.txt" | head -20; }
  printf "%-32s %2d scenarios, %2d pass on cuda; %s (cuda suite %s s)\n" "${defect:-no defect}" \
      "$(wc -l < "$work/cuda.txt")" "$(grep -c '| PASS |' "$work/cuda.txt")" "$same" "$(python3 -c "print(f\"{$end - $start:.1f}\")")"
done | tee "$out/suite-verdicts.txt"
grep -q "VERDICTS DIFFER" "$out/suite-verdicts.txt" && status=1
cp "$work/report-/report.md" "$out/suite-cuda-report.md" 2>/dev/null

echo "== 5. explore --real-kill: children on the GPU against children on the CPU"
counts() { python3 -c '
import json,sys
t=sys.stdin.read(); d=json.loads(t[t.index("{"):])
print("crash_points", d["crash_points"], "passed", d["passed"], "refused", d["refused"], "failed", d["failed"])'; }
for scenario in seed_crash_while_saving async_save_then_crash class_i_elastic_3_to_2_odd_sizes; do
  cpu=$("$zerosim" explore "scenarios/library/$scenario.json" --real-kill "$work/kill-cpu-$scenario" --json --device cpu 2>/dev/null | counts)
  cuda=$("$zerosim" explore "scenarios/library/$scenario.json" --real-kill "$work/kill-cuda-$scenario" --json --device cuda 2>/dev/null | counts)
  verdict=ok; [ -n "$cuda" ] && [ "$cpu" = "$cuda" ] || { verdict=DIFFERS; status=1; }
  printf '%-36s cpu: %s | cuda: %s | %s\n' "$scenario" "$cpu" "$cuda" "$verdict"
done | tee "$out/real-kill.txt"
grep -q DIFFERS "$out/real-kill.txt" && status=1
rm -rf "$work"
echo "gpu-check: $([ $status = 0 ] && echo all agree || echo FAILED)"
exit $status
