#!/usr/bin/env bash
# One run on a lent GPU: every CUDA test, then every GPU figure the open runtime issues ask for, in one command
# (a lent machine's time is short and each start costs minutes). From the repository root on the GPU machine:
#
#     bash benchmarks/device_check.sh            # ogbn-products' size (scale 1.0)
#     bash benchmarks/device_check.sh 0.25       # a quarter of it, when little device time is left
#
# Wheels the machine lacks (pymetis, kaminpar, pylibwholegraph and its libraries) travel in .whl/ (an ignored
# folder; see the device tool's README) and are installed first when present. Logs go to $OUT (the device tool
# brings that folder back) or /tmp/device_check. Each stage has its own time limit, so a slow stage still leaves
# the others' figures; the stages print what they could not measure.
set -uo pipefail
scale=${1:-1.0}
out=${OUT:-/tmp/device_check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
python3 -c "import librmm; librmm.load_library()" 2>/dev/null || true  # WholeGraph's allocator, when carried
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])" | tee -a "$out/gpu.txt"

echo "== CUDA tests (the ones skipped without a GPU, and the files they live in)"
timeout 300 python3 -m pytest -q -p no:cacheprovider -n 4 -m "not multihost" -rs \
    tests/test_pinned_topology.py tests/test_row_cache.py tests/test_runtime_device.py tests/test_table_hops.py \
    tests/test_runtime_partition.py tests/test_weighted_sampling.py tests/test_temporal_loaders.py tests/test_grouped_rows.py 2>&1 | tee "$out/tests.txt"

echo "== GPU figures (benchmarks/bench_gpu_pipeline.py: issue 39's loader, issue 40's pinned topology and cache)"
timeout 480 python3 benchmarks/bench_gpu_pipeline.py --scale "$scale" --batches 20 --repeats 3 --workdir /tmp/bench_gpu_pipeline \
    2>&1 | tee "$out/bench_gpu_pipeline.txt"
echo "== done: logs in $out"
