#!/usr/bin/env bash
# Everything that needs a GPU, in one command for a lent GPU machine (see README "On a GPU").
#
#   bash benchmarks/gpu_session.sh            # on the GPU machine, from the repository root
#
# The machine has torch, CuPy, torch-geometric, pytest and hypothesis but no network, so the
# package is installed without dependencies. The real datasets, if wanted, travel in
# ./device_data/datasets (git-ignored; copy ../shared/datasets there before the call).
# Logs and results go to $OUT (default: ./gpu-out) and results also to benchmarks/results/.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
if [ -d device_data/datasets ]; then export IBP_GRAPH_DATASETS=$PWD/device_data/datasets; fi

python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__)" | tee -a "$OUT/gpu.txt"

# 1. GPU behaviour: kernels against the NumPy decoder, the GPU encoder, loaders, prefetch.
python3 -m pytest -m gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.log"

# 2. Benchmarks (fetch: about 5 minutes with the defaults).
python3 benchmarks/fetch.py --table-gb 2 --batch 200000 --repeats 10 2>&1 | tee "$OUT/fetch.log"
python3 benchmarks/sampling.py 2>&1 | tee "$OUT/sampling.log"
python3 benchmarks/e2e.py --device cuda --epochs 5 --graphs cora,citeseer 2>&1 | tee "$OUT/e2e.log"
cp benchmarks/results/fetch-* benchmarks/results/sampling-cuda* benchmarks/results/e2e-* "$OUT/" \
    2>/dev/null || true
