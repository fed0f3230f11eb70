#!/usr/bin/env bash
# Everything that needs a GPU, for a GPU machine without network (see README "On a GPU").
#
#   bash benchmarks/gpu_session.sh fetch            # one stage per command (10-minute limit)
#   bash benchmarks/gpu_session.sh tests fetch      # several stages, in order
#   bash benchmarks/gpu_session.sh                  # every stage (far more than 10 minutes)
#
# A device command may run 10 minutes and gets back at most 8 files from $OUT: run one stage
# per command (each writes 3 to 6 files there). Install and checks take about 20 s; then each
# python command is stopped (SIGINT, then SIGKILL 30 s later) after STAGE_TIMEOUT seconds
# (default 500), and the results it wrote so far are still copied. Estimated times on an H100
# (16 cores), install and start-up included:
#   tests      every `gpu`-marked test: kernels vs the NumPy decoder, GPU encoder, sampler
#              backends, loaders (device and UVA graphs), prefetch
#   fetch      benchmarks/fetch.py (about 3-4 min): memcpy, torch, raw gather, IBP fetch and
#              decode-only GB/s with the targets, 16 synthetic cases (4 widths x 4 kinds) and
#              the 11 real tables, 4 GiB tables, batches of 100k and 1M rows (1 GiB at most);
#              no case starts after 400 s (--time-budget)
#   sampling   benchmarks/sampling.py on CUDA (about 1-2 min): torch ops vs the RawKernel,
#              graph in GPU memory and over UVA
#   e2e        benchmarks/e2e.py on the bundled Cora and CiteSeer (about 1-2 min)
#   synthetic  benchmarks/e2e.py on a 20M-node, 300M-edge power-law graph whose 8 GB of
#              feature rows are drawn from the derived facebook SVD-100 table (about 3-5 min:
#              edges drawn on the GPU, the table compressed on the GPU, 3 epochs per mode);
#              needs device_data/facebook-svd100-float32.npy or device_data/datasets
#
# The machine has torch, CuPy, torch-geometric, SciPy, matplotlib, pytest and hypothesis, so
# the package is installed without dependencies. Data travels in ./device_data (git-ignored):
# copy ../shared/datasets to device_data/datasets for the real tables; the synthetic stage
# takes device_data/facebook-svd100-float32.npy when it is there (no SciPy needed):
#   .venv/bin/python -c "import numpy as np; from benchmarks import real_tables as r; \
#       np.save('device_data/facebook-svd100-float32.npy', r.load_facebook_svd()[1])"
# Logs, stage times (stages.txt) and results go to $OUT (default: ./gpu-out); results also
# to benchmarks/results/. Compressed tables are cached in $IBP_GPU_WORK (default: a folder
# under /tmp; GBs, so not under $OUT). The exit status is 0 only when every stage succeeded.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-./gpu-out}
STAGE_TIMEOUT=${STAGE_TIMEOUT:-500}
WORK=${IBP_GPU_WORK:-${TMPDIR:-/tmp}/ibp-graph-gpu-work}
STAGES=("$@")
if [ ${#STAGES[@]} -eq 0 ]; then STAGES=(tests fetch sampling e2e synthetic); fi
for stage in "${STAGES[@]}"; do
    case "$stage" in
    tests | fetch | sampling | e2e | synthetic) ;;
    *)
        echo "unknown stage '$stage' (tests, fetch, sampling, e2e, synthetic)" >&2
        exit 2
        ;;
    esac
done
mkdir -p "$OUT" "$WORK"
if [ -d device_data/datasets ]; then export IBP_GRAPH_DATASETS=$PWD/device_data/datasets; fi

python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
if ! python3 -c "
import torch, cupy, ibp_graph.train, ibp_graph.loaders.pyg
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__)
assert torch.cuda.is_available(), 'torch sees no CUDA device'
" 2>&1 | tee -a "$OUT/gpu.txt"; then
    echo "the package, torch or CuPy does not import, or there is no GPU: see $OUT/gpu.txt" >&2
    exit 3
fi

# run LOG COMMAND...: the command with the stage timeout, its output also in $OUT/LOG.
run() {
    local log=$1
    shift
    timeout -s INT -k 30 "$STAGE_TIMEOUT" "$@" 2>&1 | tee "$OUT/$log"
}

status=0
for stage in "${STAGES[@]}"; do
    echo "== $stage"
    start=$SECONDS
    rc=0
    case "$stage" in
    tests)
        run gpu-tests.log python3 -m pytest -m gpu -q -p no:cacheprovider || rc=$?
        ;;
    fetch)
        run fetch.log python3 benchmarks/fetch.py --table-gb 4 --batch 100000,1000000 \
            --max-batch-gb 1 --repeats 10 --torch-repeats 3 --time-budget 400 || rc=$?
        cp benchmarks/results/fetch-*.json benchmarks/results/fetch-*.md "$OUT/" 2>/dev/null
        ;;
    sampling)
        run sampling.log python3 benchmarks/sampling.py --device cuda || rc=$?
        cp benchmarks/results/sampling-cuda.* "$OUT/" 2>/dev/null
        ;;
    e2e)
        run e2e.log python3 benchmarks/e2e.py --device cuda --epochs 5 --graphs cora,citeseer \
            --workdir "$WORK" || rc=$?
        cp benchmarks/results/e2e-cuda.* "$OUT/" 2>/dev/null
        ;;
    synthetic)
        if [ -f device_data/facebook-svd100-float32.npy ]; then
            features=device_data/facebook-svd100-float32.npy
        elif [ -f "${IBP_GRAPH_DATASETS:-/nonexistent}/musae/facebook/features.json" ]; then
            features=facebook-svd100-float32
        else
            echo "synthetic: needs device_data/facebook-svd100-float32.npy or" \
                "device_data/datasets (see the top of this script)" | tee "$OUT/synthetic.log"
            features=
            rc=4
        fi
        if [ -n "$features" ]; then
            run synthetic.log python3 benchmarks/e2e.py --device cuda --epochs 3 --graphs "" \
                --synthetic-nodes 20000000 --synthetic-train 100000 \
                --synthetic-features "$features" --workdir "$WORK" \
                --out "$OUT/synthetic" || rc=$?
        fi
        ;;
    esac
    echo "$stage rc=$rc $((SECONDS - start)) s" | tee -a "$OUT/stages.txt"
    if [ "$rc" -ne 0 ]; then status=1; fi
done
exit $status
