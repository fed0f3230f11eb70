#!/usr/bin/env bash
# Everything that needs a GPU, for a bare GPU machine without network (README "On a GPU").
#
#   bash benchmarks/gpu_session.sh prepare                 # HERE, on the CPU machine: fills
#                                                          # device_data/, prints the calls
#   IBP_GRAPH_COMMIT=<sha> bash benchmarks/gpu_session.sh smoke tests    # on the GPU machine
#   bash benchmarks/gpu_session.sh --plan smoke tests      # files and minutes, runs nothing
#
# Stages, with estimated times on an H100 (16 cores); each GPU command first installs the
# package (no dependencies, about 20 s) and logs the machine:
#   prepare    CPU machine, about 30 s: copies the datasets into device_data/ (git-ignored),
#              derives device_data/facebook-svd100-float32.npy, writes the decoder's two
#              previous versions to device_data/baseline-cuda/ and baseline-cuda-2/ (the
#              newest committed cuda/fetch_decode.cu whose code, comments and spacing aside,
#              differs from the working tree's, and the newest before it that differs from
#              both; $IBP_GRAPH_AB_VERSIONS sets how many, $IBP_GRAPH_AB_BASE names the
#              commits instead, separated by spaces) once NVRTC shows that the package's
#              launcher can launch them, copies PyG's example scripts from the checkout
#              $IBP_GRAPH_PYG (a git repository, read at $IBP_GRAPH_PYG_REV, default HEAD, or
#              a folder holding examples/) into device_data/upstream/ for the examples stage,
#              collects wheels the GPU image lacks (none: see below), checks the 64 MiB
#              limit, prints the carry list and the device commands (each under 2,000
#              characters).
#   smoke      about 1 min (< 2): tests/test_gpu_smoke.py with -x: install, 4 GiB pinned,
#              raw gather and fused fetch bit for bit, a GPU sampler batch, a loader batch.
#              Prints "SMOKE: PASS" or "SMOKE: FAIL".
#   tests      about 1-2 min (178-203 s on an H100 with one file at a time): `pytest -m gpu
#              -x`, 4 files at a time ($IBP_GPU_TEST_JOBS), each in a process of its own (a
#              sticky CUDA fault ends only its own file), at most 240 s per file; then the
#              tests marked `timing` (how work overlaps in time on the GPU), with no other
#              process beside them.
#   sanitize   about 1-3 min (121-129 s on an H100 before racecheck was split): three
#              compute-sanitizer tools at once, each in processes of its own, at most 540 s
#              each: memcheck and synccheck over the kernel tests (tests/test_gpu_kernels.py,
#              not slow, and the fused sampling hop's tests/test_sampler_hop_host.py, 43
#              tests; on an H100 each ran them in about 20 s of test time), and racecheck over
#              the tests of the one kernel with shared memory, the fused fetch
#              (test_gpu_kernels.py; its tests of other kernels skip, 32 tests; on an H100
#              about 105 s in one process), split over 3 processes ($IBP_GPU_RACECHECK_SHARDS;
#              IBP_GRAPH_TEST_SHARD=i/n keeps every n-th test from the i-th) started first.
#              The tests see IBP_GRAPH_SANITIZER (smaller batches), and memcheck runs with
#              torch's caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), so that a
#              write past a tensor is past its allocation. A process that cannot start beside
#              the others (its log has a sanitizer error and no summary) runs again alone in
#              the time left. Each process's log goes into sanitize.log as it ends.
#   decodeab   about 2-4 min: benchmarks/decode_ab.py, the fused decoder of this checkout
#              against device_data/baseline-cuda*/ (its previous versions), decode only, on
#              1 GiB tables (dense and sparse 512 B rows, then the real tables) in GPU memory,
#              their stored rows tiled past 4x the L2:
#              6 rounds, each timing every version on the same ids, the order rotating; each
#              version's GB/s, the current one's ratio to each, every output checked bit for
#              bit; no case starts after 150 s. With --double-buffer: the current source's
#              double-buffered kernel too, at the same full grid (current-db).
#   fetch      about 5-6 min: benchmarks/fetch.py, 4 GiB tables, 16 synthetic cases and the
#              real tables, with --sort-ids (raw and ibp also with the ids sorted, beside the
#              unsorted ones: the tables' sort_ids) and --double-buffer (ibp and decode-only
#              also with the double-buffered kernel: the tables' double_buffer): 8 GPU
#              timings per batch besides the baselines, 2 of them double-buffered (about 1-2 s
#              more per case, so the last real tables may not start); no case starts after
#              330 s.
#   profile    about 3-5 min: Nsight Compute (ncu --clock-control none) over
#              benchmarks/profile_fetch.py: on 4 tables of 1 GiB (dense, sparse and bf16 512 B
#              rows; 5,732 B bag-of-words rows) one batch of 100,000 ids each, fetched by the
#              raw gather, the fused fetch one-buffer and double-buffered, and both from GPU
#              memory: 20 launches, each after an unprofiled warm-up. Sections SpeedOfLight,
#              MemoryWorkloadAnalysis, WarpStateStats, SchedulerStats, Occupancy, LaunchStats,
#              InstructionStats, plus PCIe reads, global-load requests and sectors at L1, and
#              each stall reason's share of active warp cycles (run again without those
#              metrics if this ncu refuses one); then profile.md: per launch, duration,
#              throughputs, L1 and L2 hit rates, occupancy, registers, top stalls,
#              instructions, global loads and load sectors per row. The kernels are built with
#              line information (IBP_GRAPH_LINEINFO=1: the same machine code) and the
#              SourceCounters section is collected: ncu-source.csv holds each launch's
#              counts per line of the .cu source (ncu --page source), or per machine
#              instruction where ncu has no lines, where this ncu has the page.
#   pages      about 2 min: benchmarks/pages.py, the raw gather from a 4 GiB buffer of each
#              page kind (huge, small, cuda) side by side, rows of 256 B to 4 KiB, ids over
#              spans of 32 MiB to the whole buffer and sorted: whether address translation
#              (a TLB miss per row) is what holds small rows below the link's rate; each
#              buffer's share in transparent huge pages.
#   grid       about 3 min: the fetch benchmark's dense and sparse 512 B cases and the first
#              real tables (Cora's rows first) with the grid of a side-stream fetch
#              (--max-blocks 0.25: a block on a quarter of the SMs), to compare with the
#              default grid of `fetch`'s current-stream launches (every block the SMs hold):
#              what the SMs left to training cost a fetch.
#   warps      about 5-7 min: fetches in larger blocks on the same SMs. The grid caps blocks
#              (a quarter of the SMs beside training), and a block has 8 warps unless the
#              tables' block_warps says otherwise: benchmarks/fetch.py like `grid` with
#              --block-warps 8,32 (each 100,000-row batch in blocks of 8 and of 32 warps in
#              turn, on the same ids; tag grid-warps), then
#              benchmarks/overlap.py at the default grid in blocks of 8, 16 and 32 warps
#              (no other caps, no chunks, no profile; results in $OUT/warps/): whether
#              fuller SMs keep the link busy, and what they cost the training step.
#   lanes      about 3 min: the raw gather of rows that are not a multiple of 16 bytes (260 B,
#              1,028 B, 5,732 B like Cora's), run twice: the widest vectors (the default)
#              and whole 16-byte loads (--raw-kernel lines).
#   sampling   about 3-4 min: benchmarks/sampling.py on CUDA (device and UVA graphs; torch-ops
#              hops, and fused-kernel hops with the default grid and with every block the SMs
#              hold (--hop-grids default,32), and at the default grid replayed from a CUDA
#              graph (--cuda-graph), and both again with the seeds given on the host as the
#              loaders give them (--host-seeds), and again 8 batches per sample_batches call
#              (--group 8); time, host CPU, GPU busy and ops per batch, and where a batch's
#              time goes: kernels, torch ops, Python functions; replayed groups only, the
#              UVA graph also in the layout before to_uva's default, uva-separate, and the
#              device graph with sources and edge ids interleaved, device-pairs).
#   e2e        about 1-2 min: benchmarks/e2e.py on Cora and CiteSeer, 20 timed epochs a mode
#              (the modes take turns epoch by epoch: 40-50 ms epochs vary), with --thread-mode (IBP
#              on also with the prefetch thread, beside the other modes), --replay-mode
#              and --eager-mode (that mode again, one batch a sampler call, its launches
#              replayed from CUDA graphs, or eager: what the loaders' default of 8 batches a
#              call, replayed, gains) and --profile-epoch (per mode, where an epoch's time
#              goes: kernels, torch ops, Python functions);
#              neighbors drawn by the fused hop kernels, the loaders' default on a GPU.
#   overlap    about 2-4 min: benchmarks/overlap.py, fetches on a side stream beside GraphSAGE
#              training steps (dense and sparse tables, raw and IBP, grid caps, stream
#              priorities): the steps' slowdown from CUDA event timelines, and a chart.
#   ophops     about 1-2 min: the same with torch-op hops (--sampler-backend torch), to
#              compare with e2e's fused hop kernels; results in $OUT/ophops/.
#   ddp        about 1 min: benchmarks/ddp_gpu_smoke.sh, two data-parallel ranks on the one
#              GPU pin the same shared host segment and train; "DDP-GPU: PASS" or "FAIL".
#   synthetic  about 3-5 min: benchmarks/e2e.py --setting papers100m scaled to a 20M-node,
#              300M-edge power-law graph (0.18x ogbn-papers100M's nodes: what a 10-minute
#              command can build, compress and train on three ways) with 8 GB of rows drawn
#              from the derived facebook SVD-100 table; batches prepared on the loaders'
#              prefetch thread, their default on a GPU (--prefetch-thread); --chunk-mode 4096
#              as corasu's.
#   corasu     about 4-8 min: benchmarks/e2e.py --setting corasu, the IBP paper's CoraSU:
#              Cora's bag-of-words rows (5,732 B) over an ogbn-products-sized power-law graph
#              (2.45M nodes, 124M edges; 14 GB of rows), 50,000 training seeds, 6 epochs
#              (results so far written every 30 s of epochs, so a run cut short keeps them),
#              on the loaders' prefetch thread; with --chunk-mode 4096, IBP on again with
#              its fetches in kernels of 4,096 rows (the overlap target's lever), same batches.
#   gil        about 1 min: benchmarks/gil_handoff.py --device cuda, a step of 300 short ops
#              (a launch each) alone and beside a second Python thread (work without the
#              GIL, short ops, pure Python) and with Cora's loaders (batches on the prefetch
#              thread or serial): what sharing the GIL costs a launch-bound step, op by op.
#   examples   about 1 min: benchmarks/upstream_examples.py over the PyG example scripts
#              that prepare copied (reddit.py, hierarchical_sampling.py, infomax_inductive.py,
#              multi_gpu/distributed_sampling.py: a process per GPU, NCCL, DDP; ogbn_train.py
#              needs ogb, which the image lacks, and is reported as skipped), each with only
#              its NeighborLoader import changed to ours, on synthetic data: on a GPU they put
#              data.x (infomax: data.edge_index too) on the device and pass num_workers, so our
#              CUDA path runs them.
#
# A device command runs at most 10 minutes and returns at most 8 files from $OUT, 2 folders
# deep: every stage writes straight under $OUT as it goes (so a stage cut off still returns
# what it wrote), and a command whose stages would write more than 8 files is refused before
# it starts (--plan shows the count). Files: summary.txt (machine, versions, commit, stage
# times: always), then smoke: smoke.log; tests: tests.log; sanitize: sanitize.log;
# decodeab: decodeab.log + decode-ab-*.json + decode-ab-*.md;
# fetch and grid: their log + fetch-*.json + fetch-*.md; pages:
# pages.log + pages-*.json + pages-*.md; lanes: lanes.log + 2 of each; sampling:
# sampling.log + 2; gil: gil.log + 2; e2e: e2e.log + 3;
# profile: profile.log + profile-manifest.json + ncu-fetch.ncu-rep + ncu-fetch.csv +
# ncu-source.csv + profile.md;
# ddp: ddp.log + ddp_gpu_smoke.log + ddp-gpu.json; synthetic: synthetic.log + 3 in synthetic/;
# corasu: corasu.log + 3 in corasu/; warps: warps.log + fetch-*-grid-warps.{json,md} + 3 in
# warps/;
# overlap: overlap.log + overlap-<gpu>.{json,md,png} (<gpu>: the GPU name as a slug, e.g.
# nvidia-h100-80gb-hbm3, as every benchmark names its results); ophops: ophops.log + 3 in
# ophops/.
#
# The GPU image has torch, CuPy, torch-geometric, SciPy, matplotlib, pytest, pytest-xdist
# (pyproject's addopts pass --dist) and hypothesis, so the package is installed without
# dependencies and no wheel travels (dgl and ogb are missing there: their tests skip).
# Wheels put in device_data/wheels/ are installed first.
# The commit comes from $IBP_GRAPH_COMMIT (the device copy has no .git). Compressed tables
# are cached in $IBP_GPU_WORK (default: /tmp/ibp-graph-gpu-work; GBs, so not under $OUT).
# $IBP_GRAPH_HOST_MEMORY (default here: 128G, the machines' size) is the host memory the
# pinning and table-size checks allow, since a VM whose memory grows on demand starts with a
# lower MemTotal; summary.txt logs MemTotal and MemAvailable beside it.
# Every command is stopped in time for the script to end $IBP_GPU_DEADLINE seconds (default
# 585) after it started, under the device's 600 s; what did not start is logged as such.
# Exit status: 0 when every stage passed, 1 when one failed, 2 for a usage error, 3 when the
# install or the GPU check failed.
set -o pipefail
export PYTHONUNBUFFERED=1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=device_data
ALL_STAGES=(smoke tests sanitize decodeab fetch profile pages grid warps lanes sampling e2e
    overlap ophops ddp synthetic corasu gil examples)
MAX_FILES=8
MAX_COMMAND=2000

# files STAGE: how many files the stage writes under $OUT.
files() {
    case "$1" in
    smoke | tests | sanitize) echo 1 ;;
    ddp) echo 3 ;;
    decodeab | fetch | pages | grid | sampling | gil | examples) echo 3 ;;
    lanes) echo 5 ;;
    profile) echo 6 ;;
    e2e | overlap | ophops | synthetic | corasu) echo 4 ;;
    warps) echo 6 ;;
    esac
}

# minutes STAGE: the estimated upper bound, install excluded.
minutes() {
    case "$1" in
    smoke | gil | examples) echo 1 ;;
    tests) echo 2 ;;
    sanitize | decodeab) echo 3 ;;
    fetch) echo 6 ;;
    synthetic | profile) echo 5 ;;
    corasu) echo 8 ;;
    overlap | warps) echo 7 ;;
    pages | e2e | ophops | ddp) echo 2 ;;
    lanes | grid) echo 3 ;;
    sampling) echo 4 ;;
    esac
}

usage() {
    sed -n '2,/^set -o pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# check_stages STAGE...: refuse unknown stages and commands writing more than MAX_FILES files.
check_stages() {
    local total=1 stage
    for stage in "$@"; do
        if [ -z "$(files "$stage")" ]; then
            echo "unknown stage '$stage' (prepare, ${ALL_STAGES[*]})" >&2
            exit 2
        fi
        total=$((total + $(files "$stage")))
    done
    if [ "$total" -gt "$MAX_FILES" ]; then
        echo "stages '$*' would write $total files under \$OUT, more than the $MAX_FILES that" \
            "come back from a device command: split them over several commands" >&2
        exit 2
    fi
}

# plan STAGE...: one line with the file count and the minutes of the stages.
plan() {
    local nfiles=1 mins=1 stage
    for stage in "$@"; do
        nfiles=$((nfiles + $(files "$stage")))
        mins=$((mins + $(minutes "$stage")))
    done
    echo "stages: $* | files under \$OUT: $nfiles (max $MAX_FILES) | at most about $mins min"
}

# The device commands `prepare` prints, one per call, most important first (each under 10
# minutes; on an H100 the calls took 2-5 minutes each, machine start and transfers included).
# A task is now lent 15 minutes of device time, machine start included, which gets through
# the first two (at a9cb4c1 the first took 5 minutes, the machine started in half a minute).
# First the smoke test, every GPU test, the decoder against its previous version side by
# side (bit for bit on every table, and what the last change to it is worth) and the
# sanitizers over every kernel test; then PyG's own example scripts on our loader (a minute:
# the drop-in promise on the GPU path) and CoraSU (first run on an H200 at 10f18c7, with
# chunked fetches as a mode of its own); the sampler's batches in groups (host time per batch,
# the largest gap, against one batch a call) with the epochs; the profile, whose counts per
# source line say where
# the decoder's time goes (the narrow tables that miss the decode-only goal decode as many
# rows a second whatever their width: a chain of loads per row); the fetch beside training
# (chunked fetches now launch from one DLPack view), side-stream fetches in larger blocks
# (fetch rate and the step beside it), the fetch at the current defaults; then the rest again
# (ophops: the epochs with torch-op hops, for comparison, what sharing the GIL costs a
# launch-bound step, and the others).
CALLS=("smoke tests decodeab sanitize" "examples corasu" "sampling e2e" "profile" "overlap ddp"
    "warps" "fetch" "ophops grid" "gil synthetic" "pages" "lanes")

# previous_decoders PYTHON N: the N newest commits whose cuda/fetch_decode.cu has other code
# than the working tree's and than each other's, comments and spacing aside (a change to
# comments alone is no version to measure against), newest first; fewer, or nothing, when the
# history holds fewer.
previous_decoders() {
    "$1" - "$2" <<'EOF'
import re
import subprocess
import sys

PATH = "cuda/fetch_decode.cu"


def code(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return " ".join(re.sub(r"//[^\n]*", " ", text).split())


seen = {code(open(PATH).read())}
wanted = int(sys.argv[1])
git = ["git", "rev-list", "HEAD", "--", PATH]
for commit in subprocess.run(git, capture_output=True, text=True, check=True).stdout.split():
    shown = subprocess.run(["git", "show", f"{commit}:{PATH}"], capture_output=True, text=True)
    if shown.returncode == 0 and code(shown.stdout) not in seen:
        print(commit)
        seen.add(code(shown.stdout))
        if len(seen) > wanted:
            break
EOF
}

# baseline_dir I: the folder of the decoder's I-th previous version (1: the newest), which
# prepare_baseline fills and the decodeab stage reads.
baseline_dir() {
    if [ "$1" -eq 1 ]; then echo "$DATA/baseline-cuda"; else echo "$DATA/baseline-cuda-$1"; fi
}

# prepare_baseline PYTHON: device_data/baseline-cuda/ holds the fused decoder's previous
# version (fetch_decode.cu, and its commit in COMMIT) for the decodeab stage, and
# device_data/baseline-cuda-2/ the version before that ($IBP_GRAPH_AB_VERSIONS versions in
# all, default 2; $IBP_GRAPH_AB_BASE names the commits instead, newest first, separated by
# spaces), or nothing (said why) when there is none that the package's launcher can launch
# as it is.
prepare_baseline() {
    local py=$1 dir base bases=() dirs=() missing="" accepted="" i
    rm -rf "$DATA"/baseline-cuda "$DATA"/baseline-cuda-*
    if ! git rev-parse --git-dir >/dev/null 2>&1; then
        echo "baseline: not a git checkout; the decodeab stage will refuse"
        return 0
    fi
    if [ -n "${IBP_GRAPH_AB_BASE:-}" ]; then
        read -r -a bases <<<"$IBP_GRAPH_AB_BASE"
    else
        mapfile -t bases < <(previous_decoders "$py" "${IBP_GRAPH_AB_VERSIONS:-2}")
    fi
    if [ "${#bases[@]}" -eq 0 ]; then
        bases=("")
    fi
    # Each version's source in its folder, up to the first that is missing.
    for i in "${!bases[@]}"; do
        base=${bases[$i]} dir=$(baseline_dir $((i + 1)))
        mkdir -p "$dir"
        if [ -z "$base" ] || ! git show "$base:cuda/fetch_decode.cu" >"$dir/fetch_decode.cu" \
            2>/dev/null; then
            rm -rf "$dir"
            missing="no cuda/fetch_decode.cu at '${base:-an earlier commit with other code}'"
            break
        fi
        git rev-parse --short "$base" >"$dir/COMMIT"
        dirs+=("$dir")
    done
    # One process checks them all (the package imported and the current source compiled
    # once), newest first, printing each it accepts; it stops at the first it refuses.
    if [ "${#dirs[@]}" -gt 0 ]; then
        accepted=$("$py" - "${dirs[@]}" <<'EOF'
import sys
from pathlib import Path

sys.path.insert(0, ".")
from benchmarks.decode_ab import check_sources

for folder in sys.argv[1:]:
    try:
        check_sources(Path(folder))
    except SystemExit as exc:
        sys.exit(str(exc))
    print(folder, flush=True)
EOF
        )
    fi
    # What a missing or refused version leaves: no decodeab, or the newer versions alone.
    for i in "${!dirs[@]}"; do
        dir=${dirs[$i]}
        if ! grep -qxF "$dir" <<<"$accepted"; then
            rm -rf "${dirs[@]:$i}"
            echo "baseline: refused (above); $(baseline_outcome "$i")"
            return 0
        fi
        echo "baseline: cuda/fetch_decode.cu at $(cat "$dir/COMMIT") -> $dir"
    done
    if [ -n "$missing" ]; then
        echo "baseline: $missing; $(baseline_outcome "${#dirs[@]}")"
    fi
}

# baseline_outcome I: what the decodeab stage does where the I-th version (0: the newest) is
# missing or refused.
baseline_outcome() {
    if [ "$1" -eq 0 ]; then
        echo "the decodeab stage will refuse"
    else
        echo "the decodeab stage compares the newer version(s) alone"
    fi
}

# prepare_examples PYTHON: device_data/upstream/pyg/examples/ holds the PyG example scripts
# the examples stage runs, as they are upstream, copied from the checkout $IBP_GRAPH_PYG.
prepare_examples() {
    local pyg=${IBP_GRAPH_PYG:-} rev=()
    rm -rf "$DATA/upstream"
    if [ -z "$pyg" ]; then
        echo "examples: IBP_GRAPH_PYG is not set (a PyG checkout); the examples stage will refuse"
        return 0
    fi
    if [ -d "$pyg/objects" ] || [ -f "$pyg/HEAD" ] && [ ! -d "$pyg/examples" ]; then
        rev=(--pyg-rev "${IBP_GRAPH_PYG_REV:-HEAD}")  # a bare git repository
    fi
    "$1" benchmarks/upstream_examples.py --pyg "$pyg" "${rev[@]}" --export "$DATA/upstream" ||
        { echo "prepare: could not copy PyG's example scripts from $pyg" >&2; exit 1; }
}

prepare() {
    cd "$REPO" || exit 3
    local py=${PYTHON:-$REPO/.venv/bin/python}
    local shared=${IBP_GRAPH_SHARED_DATASETS:-$REPO/../shared/datasets}
    mkdir -p "$DATA"
    if [ -d "$shared" ]; then
        if [ -d "$DATA/datasets" ]; then chmod -R u+w "$DATA/datasets" && rm -rf "$DATA/datasets"; fi
        cp -r "$shared" "$DATA/datasets"
        chmod -R u+w "$DATA/datasets"
        echo "datasets: $shared -> $DATA/datasets ($(du -sh "$DATA/datasets" | cut -f1))"
        if [ ! -f "$DATA/facebook-svd100-float32.npy" ]; then
            IBP_GRAPH_DATASETS=$REPO/$DATA/datasets "$py" -c "
import numpy as np
from benchmarks import real_tables as r
np.save('$DATA/facebook-svd100-float32.npy', r.load_facebook_svd()[1])
" || echo "prepare: could not derive the facebook SVD-100 table (synthetic will skip)" >&2
        fi
    else
        echo "prepare: no datasets folder at $shared (set IBP_GRAPH_SHARED_DATASETS);" \
            "the real-table cases and the synthetic stage will skip" >&2
    fi
    prepare_baseline "$py"
    prepare_examples "$py"
    mkdir -p "$DATA/wheels"
    echo "wheels: $(find "$DATA/wheels" -name '*.whl' | wc -l) in $DATA/wheels (the GPU image" \
        "has every package the GPU stages need)"
    local size tree
    size=$(du -sb "$DATA" | cut -f1)
    tree=$(git ls-files -z --cached --others --exclude-standard 2>/dev/null |
        du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    echo "carry: $DATA, $((size >> 20)) MiB; working tree $((${tree:-0} >> 20)) MiB;" \
        "limit 64 MiB together"
    if [ $((size + ${tree:-0})) -gt $((64 << 20)) ]; then
        echo "prepare: over the 64 MiB a device call carries" >&2
        exit 1
    fi
    local commit
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
        commit="$commit-dirty"
    fi
    echo
    echo "device calls, in order (carry: [\"$DATA\"]; timeout_s: 600):"
    local stages cmd
    for stages in "${CALLS[@]}"; do
        # shellcheck disable=SC2086
        check_stages $stages
        cmd="IBP_GRAPH_COMMIT=$commit bash benchmarks/gpu_session.sh $stages"
        if [ ${#cmd} -gt $MAX_COMMAND ]; then
            echo "prepare: the command for '$stages' is ${#cmd} characters" >&2
            exit 1
        fi
        # shellcheck disable=SC2086
        echo "  # $(plan $stages)"
        echo "  run(command='$cmd', carry=['$DATA'], timeout_s=600)"
    done
    echo "then, with the results copied into benchmarks/results/: python benchmarks/scoreboard.py"
}

if [ $# -eq 0 ]; then usage; fi
if [ "$1" = "-h" ] || [ "$1" = "--help" ]; then usage; fi
if [ "$1" = "prepare" ]; then
    if [ $# -ne 1 ]; then
        echo "prepare runs alone (on the CPU machine)" >&2
        exit 2
    fi
    prepare
    exit $?
fi
if [ "$1" = "--plan" ]; then
    shift
    check_stages "$@"
    plan "$@"
    exit 0
fi
check_stages "$@"
STAGES=("$@")

DEADLINE=${IBP_GPU_DEADLINE:-585}
WORK=${IBP_GPU_WORK:-${TMPDIR:-/tmp}/ibp-graph-gpu-work}
mkdir -p "${OUT:=./gpu-out}" "$WORK"
OUT=$(cd "$OUT" && pwd)  # absolute: the stages run from the checkout's root
cd "$REPO" || exit 3
SUMMARY=$OUT/summary.txt
if [ -d "$DATA/datasets" ]; then export IBP_GRAPH_DATASETS=$REPO/$DATA/datasets; fi
export IBP_GRAPH_COMMIT=${IBP_GRAPH_COMMIT:-unknown}
# These machines have 128 GiB, but a VM whose memory grows on demand starts with a lower
# MemTotal (the device notes): the pinning and table-size checks take the machine's size.
export IBP_GRAPH_HOST_MEMORY=${IBP_GRAPH_HOST_MEMORY:-128G}
# The image's g++ may warn where CI's does not: the GPU tests that compare with the kernels'
# host harness must not fail on a warning (tests/simt/harness.py).
export IBP_GRAPH_SIMT_WERROR=0

{
    echo "ibp-graph GPU run: $(plan "${STAGES[@]}")"
    echo "commit: $IBP_GRAPH_COMMIT"
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "host: $(uname -srm), $(nproc) cores"
    echo "memory: $(grep -E '^(MemTotal|MemAvailable):' /proc/meminfo | tr -s ' ' | paste -sd ';')," \
        "IBP_GRAPH_HOST_MEMORY=$IBP_GRAPH_HOST_MEMORY"
    echo "transparent huge pages: enabled $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)," \
        "defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>&1)"
} | tee "$SUMMARY"
if compgen -G "$DATA/wheels/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/ibp-site "$DATA"/wheels/*.whl 2>&1 | tail -3 | tee -a "$SUMMARY"
    export PYTHONPATH=/tmp/ibp-site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3 | tee -a "$SUMMARY"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv
    nvidia-smi -q | grep -A12 -i "GPU Link Info" | grep -iE "generation|width|current|max" |
        head -12
    command -v compute-sanitizer >/dev/null && compute-sanitizer --version | tail -1
} 2>&1 | tee -a "$SUMMARY"
if ! python3 -c "
import torch, cupy, ibp_graph, ibp_graph.train, ibp_graph.loaders.pyg
print('python', __import__('sys').version.split()[0], '| torch', torch.__version__,
      '| CUDA', torch.version.cuda, '| CuPy', cupy.__version__, '| numpy',
      __import__('numpy').__version__)
assert torch.cuda.is_available(), 'torch sees no CUDA device'
p = torch.cuda.get_device_properties(0)
print('device:', p.name, '|', p.multi_processor_count, 'SMs |', p.total_memory >> 30, 'GiB')
" 2>&1 | tee -a "$SUMMARY"; then
    echo "the package, torch or CuPy does not import, or there is no GPU: see $SUMMARY" >&2
    exit 3
fi

# run SECONDS LOG COMMAND...: the command with a time limit, its output appended to $OUT/LOG
# (or to LOG itself where it is an absolute path). The limit is cut so that the whole script
# ends DEADLINE seconds after its start (the device kills a command at 600 s); a command with
# no time left is not started (rc 124).
run() {
    local limit log=$2
    limit=$(capped "$1")
    shift 2
    if [[ $log != /* ]]; then log=$OUT/$log; fi
    if [ "$limit" -le 10 ]; then
        echo "not started, no time left before the ${DEADLINE} s deadline: $*" |
            tee -a "$log"
        return 124
    fi
    timeout -s INT -k 15 "$limit" "$@" 2>&1 | tee -a "$log"
}

# sanitize_one SECONDS JOB: compute-sanitizer over the kernel tests (not slow), at most
# SECONDS, into $WORK/sanitize/JOB.log; its exit status. JOB is a tool, or TOOL.i for the i-th
# of its $SHARDS shards (IBP_GRAPH_TEST_SHARD: every SHARDS-th test from the i-th).
sanitize_one() {
    local budget=$1 job=$2 tool=${2%%.*} tests
    export IBP_GRAPH_SANITIZER=$tool  # the tests take fewer ids under a tool
    if [ "$job" != "$tool" ]; then
        export IBP_GRAPH_TEST_SHARD=${job#*.}/$SHARDS
    else
        unset IBP_GRAPH_TEST_SHARD
    fi
    # memcheck sees a write past a tensor only if the tensor is its own allocation: torch's
    # caching allocator is off for it.
    if [ "$tool" = memcheck ]; then
        export PYTORCH_NO_CUDA_MEMORY_CACHING=1
    else
        unset PYTORCH_NO_CUDA_MEMORY_CACHING
    fi
    # racecheck checks shared memory, which only the fused fetch kernel uses: it skips the
    # sampler's kernels, and test_gpu_kernels.py skips its tests of other kernels.
    tests=(tests/test_gpu_kernels.py)
    if [ "$tool" != racecheck ]; then tests+=(tests/test_sampler_hop_host.py); fi
    run "$budget" "$WORK/sanitize/$job.log" compute-sanitizer --tool "$tool" --error-exitcode 86 \
        --print-limit 50 "${PYTEST[@]}" -x -m "gpu and not slow" "${tests[@]}"
}

# sanitizers SECONDS JOB...: every compute-sanitizer JOB (a tool, or TOOL.i: the i-th of its
# $SHARDS shards) over the kernel tests at the same time, each in a process of its own
# (started a few seconds apart, so that each has taken its port to its target before the next
# starts) and at most SECONDS; a job whose log has a sanitizer error but no summary (it could
# not run beside the others) runs again alone in the time left. Each job logs to a file of its
# own under $WORK, appended to $OUT/sanitize.log (one file back) as the job ends. 4 without
# compute-sanitizer, 1 when a job fails.
sanitizers() {
    local budget=$1 job trc status=0 pids=() alone=() logs=$WORK/sanitize
    shift
    if ! command -v compute-sanitizer >/dev/null; then
        echo "sanitize: compute-sanitizer is not on the PATH" | tee -a "$OUT/sanitize.log"
        return 4
    fi
    rm -rf "$logs"
    mkdir -p "$logs"
    for job in "$@"; do
        (sanitize_one "$budget" "$job" >/dev/null) &
        pids+=($!)
        sleep "${IBP_GPU_SANITIZER_STAGGER:-5}"
    done
    local i=0
    for job in "$@"; do
        trc=0
        wait "${pids[$i]}" || trc=$?
        i=$((i + 1))
        { echo "-- $job rc=$trc"; cat "$logs/$job.log"; } >>"$OUT/sanitize.log"
        if [ "$trc" -ne 0 ] && grep -q "^========= Error" "$logs/$job.log" &&
            ! grep -q "ERROR SUMMARY\|RACECHECK SUMMARY" "$logs/$job.log"; then
            echo "$job rc=$trc beside the others; again alone" | tee -a "$SUMMARY"
            alone+=("$job")
            continue
        fi
        if [ "$trc" -ne 0 ]; then status=1; fi
        echo "$job rc=$trc" | tee -a "$SUMMARY"
    done
    for job in "${alone[@]}"; do
        trc=0
        : >"$logs/$job.log"
        (sanitize_one "$budget" "$job" >/dev/null) || trc=$?
        { echo "-- $job rc=$trc, again alone"; cat "$logs/$job.log"; } >>"$OUT/sanitize.log"
        if [ "$trc" -ne 0 ]; then status=1; fi
        echo "$job rc=$trc (alone)" | tee -a "$SUMMARY"
    done
    for job in "$@"; do
        grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$logs/$job.log" | sed "s/^/$job: /" |
            tee -a "$SUMMARY"
    done
    return "$status"
}

# gpu_tests: `pytest -m gpu -x` over every GPU test file, IBP_GPU_TEST_JOBS files at a time
# (default 4; one at a time under bash before 5.1, which has no `wait -n -p`), each in a
# process of its own (a sticky CUDA fault ends only its own file), at most 240 s each; a
# file's log is appended to $OUT/tests.log as its process ends. Then the tests marked
# `timing` (they assert how work on the GPU overlaps in time, which another process's kernels
# would disturb) in one process, with no other. 1 when a file fails.
gpu_tests() {
    local jobs=${IBP_GPU_TEST_JOBS:-4} logs=$WORK/tests f done_pid frc status=0 running=0
    local -A file_of=()
    if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501)); then jobs=1; fi
    rm -rf "$logs"
    mkdir -p "$logs"
    for f in $(gpu_test_files) ""; do
        while [ "$running" -ge "$jobs" ] || { [ -z "$f" ] && [ "$running" -gt 0 ]; }; do
            frc=0
            wait -n -p done_pid || frc=$?
            running=$((running - 1))
            tests_ended "${file_of[$done_pid]}" "$frc" || status=1
        done
        if [ -z "$f" ]; then break; fi
        (run 240 "$logs/$(basename "$f").log" "${PYTEST[@]}" -x -m "gpu and not timing" "$f" \
            >/dev/null) &
        file_of[$!]=$f
        running=$((running + 1))
        if [ "$jobs" -le 1 ]; then  # one at a time: this one, with no `wait -n -p`
            frc=0
            wait "$!" || frc=$?
            running=0
            tests_ended "$f" "$frc" || status=1
        fi
    done
    # shellcheck disable=SC2046
    f=$(files_marking timing $(gpu_test_files) | paste -sd ' ')
    if [ -n "$f" ]; then
        echo "-- timing: $f" >>"$OUT/tests.log"
        frc=0
        # shellcheck disable=SC2086
        run 120 tests.log "${PYTEST[@]}" -x -m "gpu and timing" $f >/dev/null || frc=$?
        if [ "$frc" -ne 0 ] && [ "$frc" -ne 5 ]; then status=1; fi
        echo "timing: $f rc=$frc" | tee -a "$SUMMARY"
    fi
    return "$status"
}

# tests_ended FILE RC: FILE's log appended to $OUT/tests.log, its status to the summary; 1
# when it failed (5, no test collected, is every GPU test of the file deselected).
tests_ended() {
    { echo "-- $1"; cat "$WORK/tests/$(basename "$1").log"; } >>"$OUT/tests.log"
    echo "$1 rc=$2" | tee -a "$SUMMARY"
    [ "$2" -eq 0 ] || [ "$2" -eq 5 ]
}

# capped SECONDS: SECONDS, or less so that the script ends DEADLINE seconds after its start.
capped() {
    local left=$((DEADLINE - SECONDS - 25))
    if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# find_ncu: the Nsight Compute command line (on the PATH, or where CUDA images put it).
find_ncu() {
    local c
    for c in "$(command -v ncu)" /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
        if [ -n "$c" ] && [ -x "$c" ]; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

# ncu_csv NCU REPORT CSV: the report's details page as CSV into CSV (with the sections'
# bodies where this ncu prints them: --print-details), ncu's errors into profile.log.
ncu_csv() {
    local ncu=$1 report=$2 csv=$3 limit details
    limit=$(capped 120)
    if [ "$limit" -le 10 ]; then
        echo "not started, no time left: the CSV of $report" | tee -a "$OUT/profile.log"
        return 124
    fi
    for details in all ""; do
        if timeout -k 10 "$limit" "$ncu" --import "$report" --csv --page details \
            --print-units base ${details:+--print-details "$details"} \
            >"$csv" 2>>"$OUT/profile.log"; then
            return 0
        fi
    done
    return 1
}

# ncu_source NCU REPORT CSV: the report's source page as CSV, where this ncu prints it: per
# line of the .cu source (--print-source cuda), else per machine instruction (sass; cut to
# SOURCE_BYTES, the size a file may come back at). A failure is logged, not fatal (the details
# stand alone).
SOURCE_BYTES=15000000
ncu_source() {
    local ncu=$1 report=$2 csv=$3 limit view
    for view in cuda sass; do
        limit=$(capped 120)
        if [ "$limit" -le 10 ]; then
            break
        fi
        # Judged by what it wrote: a page cut to size ends ncu with SIGPIPE.
        { timeout -k 10 "$limit" "$ncu" --import "$report" --csv --page source \
            --print-source "$view" 2>>"$OUT/profile.log" | head -c "$SOURCE_BYTES" >"$csv"; } ||
            true
        if [ -s "$csv" ] && ! grep -q "^==ERROR==" "$csv"; then
            echo "-- source page: per $view line" >>"$OUT/profile.log"
            return 0
        fi
        [ -f "$csv" ] && head -n 20 "$csv" >>"$OUT/profile.log"  # what it printed instead
    done
    echo "-- no source page from this ncu (see above); the details stand alone" |
        tee -a "$OUT/profile.log"
    rm -f "$csv"
    return 0
}

# files_marking MARK FILE...: the FILEs that mark tests MARK (a decorator, an item of a
# module's pytestmark list, or a `gpu = pytest.mark.gpu` alias; not the words in a string).
files_marking() {
    local mark=$1
    shift
    grep -lE "^\s*(@|gpu = )?pytest\.mark\.$mark\b" "$@"
}

# gpu_test_files: the test files marking tests gpu, the smoke file aside: it has its stage.
gpu_test_files() {
    files_marking gpu tests/test_*.py | grep -v "tests/test_gpu_smoke.py"
}

PYTEST=(python3 -m pytest -p no:cacheprovider -q -rfEs)
# The processes racecheck's tests are split over in the sanitize stage.
SHARDS=${IBP_GPU_RACECHECK_SHARDS:-3}
# The profile stage's ncu: the clocks left alone (--clock-control none); only launches inside
# benchmarks/profile_fetch.py's cudaProfilerStart/Stop windows (--profile-from-start off), so
# not its warm-ups, and of those only the fetch kernels.
NCU_ARGS=(--clock-control none --profile-from-start off --target-processes all
    --kernel-name "regex:ibp_(fetch_decode|raw_gather)" --section SpeedOfLight
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats
    --section Occupancy --section LaunchStats --section InstructionStats
    --section SourceCounters --import-source yes)
# Besides the sections: PCIe reads, DRAM reads, global-load requests and 32-byte sectors at
# L1 (to set beside benchmarks/results/decode-loads-cpu.md), and each stall reason's share of
# active warp cycles.
NCU_METRICS=pcie__read_bytes.sum,pcie__read_bytes.sum.per_second
NCU_METRICS+=,pcie__read_bytes.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
NCU_METRICS+=,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
NCU_METRICS+=,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
for reason in barrier branch_resolving dispatch_stall drain imc_miss lg_throttle \
    long_scoreboard math_pipe_throttle membar mio_throttle misc no_instruction not_selected \
    short_scoreboard sleeping tex_throttle wait; do
    NCU_METRICS+=,smsp__warp_issue_stalled_${reason}_per_warp_active.pct
done
status=0
for stage in "${STAGES[@]}"; do
    echo "== $stage" | tee -a "$SUMMARY"
    start=$SECONDS
    rc=0
    case "$stage" in
    smoke)
        run 110 smoke.log "${PYTEST[@]}" -x -v tests/test_gpu_smoke.py || rc=$?
        if [ "$rc" -eq 0 ]; then verdict=PASS; else verdict=FAIL; fi
        echo "SMOKE: $verdict" | tee -a "$OUT/smoke.log" "$SUMMARY"
        ;;
    tests)
        gpu_tests || rc=$?
        ;;
    sanitize)
        # racecheck, the slowest (105 s of its tests on an H100, against about 20 s for
        # each of the others), in $SHARDS shards, started first.
        shards=()
        for ((i = 1; i <= SHARDS; i++)); do shards+=("racecheck.$i"); done
        sanitizers 540 "${shards[@]}" memcheck synccheck || rc=$?
        ;;
    decodeab)
        if [ -f "$(baseline_dir 1)/fetch_decode.cu" ]; then
            baselines=()
            for ((i = 1; ; i++)); do  # newest first, as many as prepare wrote
                dir=$(baseline_dir "$i")
                [ -f "$dir/fetch_decode.cu" ] || break
                baselines+=(--baseline "$dir")
            done
            run 240 decodeab.log python3 benchmarks/decode_ab.py "${baselines[@]}" \
                --table-gb 1 --batch 100000 --rounds 6 --repeats 5 --time-budget 150 \
                --double-buffer --out "$OUT" || rc=$?
        else
            echo "decodeab: needs $DATA/baseline-cuda/fetch_decode.cu (run 'prepare' on the" \
                "CPU machine, carry $DATA)" | tee "$OUT/decodeab.log"
            rc=4
        fi
        ;;
    fetch)
        run 420 fetch.log python3 benchmarks/fetch.py --table-gb 4 --batch 100000,1000000 \
            --max-batch-gb 1 --repeats 10 --torch-repeats 3 --time-budget 330 --sort-ids \
            --double-buffer --out "$OUT" || rc=$?
        ;;
    profile)
        if ! ncu=$(find_ncu); then
            echo "profile: ncu (Nsight Compute) is not on the PATH" | tee -a "$OUT/profile.log"
            rc=4
        else
            "$ncu" --version 2>&1 | tail -1 | tee -a "$SUMMARY"
            rm -f "$OUT/ncu-fetch.ncu-rep"
            nrc=0
            IBP_GRAPH_LINEINFO=1 run 360 profile.log "$ncu" "${NCU_ARGS[@]}" \
                --metrics "$NCU_METRICS" \
                --export "$OUT/ncu-fetch" --force-overwrite \
                python3 benchmarks/profile_fetch.py --manifest "$OUT/profile-manifest.json" ||
                nrc=$?
            if [ ! -s "$OUT/ncu-fetch.ncu-rep" ] &&
                grep -qi "==ERROR==.*metric" "$OUT/profile.log"; then
                # A metric this ncu does not know stops it before any result.
                echo "-- ncu rc=$nrc, no report: again with the sections alone" |
                    tee -a "$OUT/profile.log"
                nrc=0
                IBP_GRAPH_LINEINFO=1 run 300 profile.log "$ncu" "${NCU_ARGS[@]}" \
                    --export "$OUT/ncu-fetch" \
                    --force-overwrite python3 benchmarks/profile_fetch.py \
                    --manifest "$OUT/profile-manifest.json" || nrc=$?
            fi
            if [ "$nrc" -ne 0 ]; then rc=1; fi
            if [ -s "$OUT/ncu-fetch.ncu-rep" ]; then
                ncu_csv "$ncu" "$OUT/ncu-fetch.ncu-rep" "$OUT/ncu-fetch.csv" || rc=1
                ncu_source "$ncu" "$OUT/ncu-fetch.ncu-rep" "$OUT/ncu-source.csv"
                run 60 profile.log python3 benchmarks/profile_fetch.py --summarise \
                    "$OUT/ncu-fetch.csv" "$OUT/profile-manifest.json" --out "$OUT/profile.md" ||
                    rc=$?
            else
                echo "profile: ncu wrote no report (see profile.log)" | tee -a "$SUMMARY"
                rc=1
            fi
        fi
        ;;
    pages)
        run 200 pages.log python3 benchmarks/pages.py --table-gb 4 --batch 100000 \
            --repeats 5 --time-budget 150 --out "$OUT" || rc=$?
        ;;
    grid)
        run 240 grid.log python3 benchmarks/fetch.py --max-blocks 0.25 --table-gb 4 \
            --batch 100000,1000000 --widths 512 --kinds dense-normal,sparse-5pct \
            --max-batch-gb 1 --repeats 10 --torch-repeats 1 --time-budget 180 --tag grid \
            --out "$OUT" || rc=$?
        ;;
    warps)
        run 210 warps.log python3 benchmarks/fetch.py --max-blocks 0.25 --block-warps 8,32 \
            --table-gb 4 --batch 100000 --widths 512 --kinds dense-normal,sparse-5pct \
            --max-batch-gb 1 --repeats 10 --torch-repeats 1 --time-budget 140 \
            --tag grid-warps --out "$OUT" || rc=$?
        orc=0
        run 330 warps.log python3 benchmarks/overlap.py --device cuda --max-blocks \
            --chunk-rows --block-warps 16 32 --profile-case none --workdir "$WORK/overlap" \
            --out "$OUT/warps" || orc=$?
        if [ "$orc" -ne 0 ]; then rc=$orc; fi
        ;;
    lanes)
        for raw_kernel in auto lines; do
            run 200 lanes.log python3 benchmarks/fetch.py --raw-kernel "$raw_kernel" \
                --table-gb 4 --batch 100000,1000000 --widths 260,1028,5732 \
                --kinds random-bits --no-real --max-batch-gb 1 --repeats 10 \
                --torch-repeats 1 --time-budget 100 --tag lanes --out "$OUT" || rc=$?
        done
        ;;
    sampling)
        run 360 sampling.log python3 benchmarks/sampling.py --device cuda \
            --graph-memory device,uva,uva-separate,device-pairs --hop-grids default,32 \
            --cuda-graph --host-seeds --group 8 --out "$OUT" || rc=$?
        ;;
    e2e)
        run 200 e2e.log python3 benchmarks/e2e.py --device cuda --epochs 21 \
            --graphs cora,citeseer --thread-mode --replay-mode --eager-mode --profile-epoch \
            --workdir "$WORK" --out "$OUT" || rc=$?
        ;;
    overlap)
        run 450 overlap.log python3 benchmarks/overlap.py --device cuda \
            --workdir "$WORK/overlap" --out "$OUT" || rc=$?
        ;;
    ophops)
        run 200 ophops.log python3 benchmarks/e2e.py --device cuda --epochs 21 \
            --graphs cora,citeseer --sampler-backend torch --thread-mode --profile-epoch \
            --workdir "$WORK" --out "$OUT/ophops" || rc=$?
        ;;
    ddp)
        OUT=$OUT run 150 ddp.log bash benchmarks/ddp_gpu_smoke.sh || rc=$?
        ;;
    synthetic)
        if [ -f "$DATA/facebook-svd100-float32.npy" ]; then
            features=$DATA/facebook-svd100-float32.npy
        elif [ -f "${IBP_GRAPH_DATASETS:-/nonexistent}/musae/facebook/features.json" ]; then
            features=facebook-svd100-float32
        else
            echo "synthetic: needs $DATA/facebook-svd100-float32.npy or $DATA/datasets" \
                "(run 'prepare' on the CPU machine, carry $DATA)" | tee "$OUT/synthetic.log"
            features=
            rc=4
        fi
        if [ -n "$features" ]; then
            run 420 synthetic.log python3 benchmarks/e2e.py --device cuda --epochs 3 \
                --graphs "" --setting papers100m --synthetic-nodes 20000000 \
                --synthetic-edges 300000000 --synthetic-train 100000 \
                --synthetic-features "$features" --prefetch-thread --chunk-mode 4096 \
                --workdir "$WORK" --out "$OUT/synthetic" || rc=$?
        fi
        ;;
    gil)
        run 100 gil.log python3 benchmarks/gil_handoff.py --device cuda --out "$OUT" || rc=$?
        ;;
    examples)
        if [ -d "$DATA/upstream/pyg/examples" ]; then
            run 150 examples.log python3 benchmarks/upstream_examples.py \
                --pyg "$DATA/upstream/pyg" --timeout 60 --out "$OUT" || rc=$?
        else
            echo "examples: needs $DATA/upstream/pyg/examples (run 'prepare' with" \
                "IBP_GRAPH_PYG set on the CPU machine, carry $DATA)" | tee "$OUT/examples.log"
            rc=1
        fi
        ;;
    corasu)
        # Cora is bundled with the package: nothing to carry.
        run 540 corasu.log python3 benchmarks/e2e.py --device cuda --epochs 6 --graphs "" \
            --setting corasu --synthetic-train 50000 --prefetch-thread --chunk-mode 4096 \
            --workdir "$WORK" --out "$OUT/corasu" || rc=$?
        ;;
    esac
    echo "$stage rc=$rc $((SECONDS - start)) s" | tee -a "$SUMMARY"
    if [ "$rc" -ne 0 ]; then status=1; fi
done
echo "all stages rc=$status" | tee -a "$SUMMARY"
exit $status
