#!/usr/bin/env bash
# Everything that needs a GPU, for a GPU machine without network (see README "On a GPU").
#
#   bash benchmarks/gpu_session.sh                  # every stage, in order
#   bash benchmarks/gpu_session.sh tests fetch      # some stages
#
# Stages (each fits in well under 10 minutes on an H100):
#   tests      every `gpu`-marked test: kernels vs the NumPy decoder, GPU encoder, sampler
#              backends, loaders (device and UVA graphs), prefetch
#   fetch      benchmarks/fetch.py: memcpy, torch, raw gather, IBP fetch, decode-only
#   sampling   benchmarks/sampling.py on CUDA: torch ops vs the RawKernel draw
#   e2e        benchmarks/e2e.py on the bundled graphs (IBP on / off / features on the GPU)
#   synthetic  benchmarks/e2e.py on a 20M-node power-law graph whose feature rows are drawn
#              from the derived facebook SVD-100 table (needs device_data/datasets)
#
# The machine has torch, CuPy, torch-geometric, matplotlib, pytest and hypothesis, so the
# package is installed without dependencies. Data travels in ./device_data (git-ignored):
# copy ../shared/datasets to device_data/datasets for the real tables. Logs and results go to
# $OUT (default: ./gpu-out), results also to benchmarks/results/.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
if [ -d device_data/datasets ]; then export IBP_GRAPH_DATASETS=$PWD/device_data/datasets; fi
STAGES=("$@")
if [ ${#STAGES[@]} -eq 0 ]; then STAGES=(tests fetch sampling e2e synthetic); fi

python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__)" | tee -a "$OUT/gpu.txt"

for stage in "${STAGES[@]}"; do
    echo "== $stage"
    case "$stage" in
    tests)
        python3 -m pytest -m gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.log"
        ;;
    fetch)
        python3 benchmarks/fetch.py --table-gb 2 --batch 200000 --repeats 10 2>&1 \
            | tee "$OUT/fetch.log"
        cp benchmarks/results/fetch-* "$OUT/" 2>/dev/null
        ;;
    sampling)
        python3 benchmarks/sampling.py --device cuda 2>&1 | tee "$OUT/sampling.log"
        cp benchmarks/results/sampling-cuda* "$OUT/" 2>/dev/null
        ;;
    e2e)
        python3 benchmarks/e2e.py --device cuda --epochs 5 --graphs cora,citeseer 2>&1 \
            | tee "$OUT/e2e.log"
        cp benchmarks/results/e2e-* "$OUT/" 2>/dev/null
        ;;
    synthetic)
        python3 benchmarks/e2e.py --device cuda --epochs 3 --graphs "" \
            --synthetic-nodes 20000000 \
            --synthetic-features facebook-svd100-float32 \
            --out "$OUT/synthetic" 2>&1 | tee "$OUT/synthetic.log"
        ;;
    *)
        echo "unknown stage '$stage' (tests, fetch, sampling, e2e, synthetic)" >&2
        exit 2
        ;;
    esac
done
