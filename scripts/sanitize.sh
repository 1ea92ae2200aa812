#!/usr/bin/env bash
# The sanitizer jobs of CI (scripts/test.sh runs both after the main suite).
#   scripts/sanitize.sh address   AddressSanitizer + UndefinedBehaviorSanitizer, every CPU test but one
#                                 (build-asan/; without debug info, so that the build fits CI's
#                                 two cores: reports name functions, rebuild with -g for lines;
#                                 the libraries at -O1, where the tests spend their time, the
#                                 tests and the CLI at -O0, which compile fastest)
#   scripts/sanitize.sh thread    ThreadSanitizer on the tests of the concurrent parts (build-tsan/):
#                                 the thread communicator, async I/O, the swappers, async saves and
#                                 checkpoints and their parallel writer, reader and snapshot copy, the simulated world, the engine's rank threads and
#                                 the resident partitions' cross-rank reads (resident_state_test),
#                                 and a rank's compute split among its threads (the products, the
#                                 transformer's stages, AdamW, the gradient norm's exact sum)
# The CUDA kernels and MPI are left out (nvcc code is not instrumented; MPI's own threads are not
# ours), and so are the benchmarks. A sanitizer report fails the test that triggered it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:?address or thread}
case "$kind" in
  address)
    build="$root/build-asan"
    flags="-O0 -g0"
    library_flags="-O1"
    sanitize="address,undefined"
    targets=()  # everything
    # Less the torch hook on a real PyTorch: its minute is Python importing and running torch;
    # the recorder and judge it drives run under ASan in the other exec tests (the fake-torch
    # hook test included), and the release run keeps it.
    tests=(-LE gpu -E "^Exec\.TheTorchHookOnARealPyTorchFindsInPlaceSavesAndPassesAtomicOnes$")
    ;;
  thread)
    build="$root/build-tsan"
    flags="-O1 -g0"
    library_flags=""
    sanitize="thread"
    targets=(comm_test async_io_test optimizer_swapper_test partition_swapper_test checkpoint_test parallel_file_writer_test parallel_file_reader_test parallel_copy_test sim_world_test engine_test
             resident_state_test vector_ops_test gpt_test exact_square_sum_test compute_backend_test)
    # Less one test whose minute under TSan is a manifest of 3 million entries parsed on one
    # thread: nothing concurrent for TSan to watch (the release and ASan runs keep it).
    tests=(-E "^CheckpointLoader\.HostileManifestsAreRefusedWithoutCrashingOrAllocating$" -R "^(ThreadComm|AsyncIo|AsyncIoProperty|FaultyDisk|OptimizerSwapper|OptimizerSwapperFault|PartitionSwapper|Checkpoint|CheckpointLoader|CheckpointProperty|CheckpointRetention|CheckpointShards|ParallelFileWriter|ParallelFileReader|ParallelCopy|ParallelCopyProperty|SimWorld|Engine|EngineProperty|ResidentState)\.|^(VectorOps\.TheProductOnSeveralThreadsHasOneThreadsBits|Gpt\.SeveralThreadsGiveOneThreadsBits|ExactSquareSumProperty\.AnArrayGivesTheBinsOfEachSquareAddedInTurn|ComputeBackend\.CpuAdamWOnSeveralThreadsHasOneThreadsBits)$")
    ;;
  *) echo "sanitize: expected address or thread, got $kind" >&2; exit 2 ;;
esac
# pack-relative-relocs: UBSan's check sites leave about a million relative relocations in each
# test binary (a third of its size, some 37 MB of 100); packed, they take a few kilobytes
# (glibc 2.36 and binutils 2.38 read and write them; the sanitizer builds run only where built).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS="-Wl,-z,pack-relative-relocs" -DZEROSIM_SANITIZE="$sanitize" \
      -DZEROSIM_LIBRARY_COMPILE_OPTIONS="$library_flags" -DZEROSIM_WITH_CUDA=OFF -DZEROSIM_WITH_MPI=OFF -DZEROSIM_BUILD_BENCH=OFF > /dev/null
if [ ${#targets[@]} -eq 0 ]; then
  cmake --build "$build" -j "$(nproc)"
else
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
fi
cd "$build"
# halt_on_error: the first report fails the test; detect_leaks stays on (ASan's default).
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
# RapidCheck properties run 25 cases here, against 100 in the main test run: the sanitizers look
# for memory errors and races along the code paths, which the first cases already take, and the
# instrumented builds run several times slower. RC_PARAMS from the caller wins.
export RC_PARAMS="${RC_PARAMS:-max_success=25}"
ctest --output-on-failure -j "$(nproc)" --timeout 1800 "${tests[@]}"
