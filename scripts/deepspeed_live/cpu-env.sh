# Source on the CPU machine to run DeepSpeed's own engine there (docs/deepspeed-live.md,
# "DeepSpeed on the CPU machine"): after scripts/deepspeed_live/prepare.sh has put DeepSpeed in
# .device-deps/deepspeed, and with Debian 12's packages installed once:
#   apt-get install python3-torch libtorch-dev pybind11-dev ninja-build libaio-dev \
#                   python3-packaging python3-psutil python3-tqdm python3-msgpack
# Then run_on_gpu.sh (its bf16 cases: that accelerator has no fp16), run_ranks.sh and
# exec_on_gpu.sh run as they do on the GPU machine, with DeepSpeed's CPU accelerator and ranks
# over gloo.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "cpu-env.sh: source it (source scripts/deepspeed_live/cpu-env.sh), do not run it" >&2
  exit 2
fi
_cpu_env_here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
_cpu_env_root=$(cd "$_cpu_env_here/../.." && pwd)
if [ ! -f "$_cpu_env_root/.device-deps/deepspeed/ds-env.sh" ]; then
  echo "cpu-env.sh: no .device-deps/deepspeed/ds-env.sh: run scripts/deepspeed_live/prepare.sh first" >&2
  return 2
fi
source "$_cpu_env_root/.device-deps/deepspeed/ds-env.sh" || return 2
# The Python that has Debian's PyTorch (a pyenv or venv python3 ahead on PATH has none).
export PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "cpu-env.sh: $PYTHON has no torch: install python3-torch or set PYTHON" >&2
  return 2
fi
# ninja and safetensors stand-ins (Debian has neither Python package), torch_compat, cpu_aio.
export PYTHONPATH="$_cpu_env_here/cpu_env:$PYTHONPATH"
# One process per rank on this machine: ds_train.py sets LOCAL_SIZE (the CPU accelerator's
# device count) to the launch's world size.
export DS_ACCELERATOR=cpu DS_DIST_BACKEND=gloo
