#!/usr/bin/env bash
# The GPU check a session with a lent CUDA GPU runs, in one go (see train/README.md, "GPU memory").
#
# Here, before lending the machine: build what it lacks into the carry (trl as a wheel, ~0.6 MiB)
#     .venv/bin/pip wheel trl --no-deps -w wheels/
# then on the GPU machine, from the repository root, with wheels/ carried along:
#     bash scripts/gpu_rehearsal.sh
# It installs the wheel when trl is missing, runs `scripts/gpu_check.py --size 4b` under a timeout
# (8 minutes by default, GPU_CHECK_TIMEOUT_S), and copies the JSON and its table to $OUT when set.
# Extra arguments go to gpu_check.py (e.g. --no-full-step, --steps 1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if ! "$PY" -c "import trl" 2>/dev/null; then
    ls wheels/trl-*.whl >/dev/null 2>&1 || { echo "trl is not installed and wheels/ holds no trl wheel" >&2; exit 2; }
    "$PY" -m pip install --no-deps --no-index wheels/trl-*.whl
fi
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv || true
out=bench/results/gpu_check.json
status=0
timeout "${GPU_CHECK_TIMEOUT_S:-480}" "$PY" scripts/gpu_check.py --size 4b --out "$out" "$@" || status=$?
if [ -n "${OUT:-}" ]; then
    cp -f "$out" "${out%.json}.md" "$OUT"/ 2>/dev/null || true
fi
exit "$status"
