#!/usr/bin/env bash
# Two data-parallel ranks on ONE GPU pin the same shared host segment and train (Cora).
#
#   bash benchmarks/ddp_gpu_smoke.sh            # on the GPU machine, package installed
#
# What it checks (and prints as "DDP-GPU: PASS" or "DDP-GPU: FAIL"):
#   - torch's launcher starts 2 ranks of `ibp-graph train` on cuda:0 (both ranks share the
#     GPU, so the process group is gloo: NCCL refuses two ranks on one GPU);
#   - each host has one segment of compressed rows, and both ranks read it: the rows are
#     pinned in place by each rank (CudaIBPTable host_rows=), not copied per rank;
#   - the replicas are identical after training (equal parameter digests);
#   - nothing is left in /dev/shm.
# Writes under $OUT (default: ./ddp-gpu-out): ddp_gpu_smoke.log and ddp-gpu.json.
# About 1 minute on an H100 machine. Exit status 0 on PASS, 1 on FAIL. DEVICE=cpu runs the
# same steps on a machine without a GPU (the check "trained on the GPU" then fails).
set -o pipefail
OUT=${OUT:-ddp-gpu-out}
WORK=${IBP_GPU_WORK:-/tmp/ibp-graph-gpu-work}
mkdir -p "$OUT" "$WORK"
LOG="$OUT/ddp_gpu_smoke.log"
RUN_ID="gpusmoke$$"
export IBP_GRAPH_RUN_ID=$RUN_ID

{
    echo "== ddp_gpu_smoke $(date -u +%FT%TZ) =="
    echo "commit: ${IBP_GRAPH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
    echo "command: python3 -m ibp_graph train --config cora-sage --nproc-per-node 2" \
        "--set epochs=3 device=${DEVICE:-cuda} workdir=$WORK --json $OUT/ddp-gpu.json"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    echo "/dev/shm: $(df -h /dev/shm | tail -1)"
    echo "ulimit -l: $(ulimit -l)"
    python3 -m ibp_graph train --config cora-sage --nproc-per-node 2 \
        --set epochs=3 "device=${DEVICE:-cuda}" "workdir=$WORK" --json "$OUT/ddp-gpu.json"
    echo "launcher exit status: $?"
    python3 - "$OUT/ddp-gpu.json" "$RUN_ID" <<'EOF'
import json, sys
from pathlib import Path

result = json.loads(Path(sys.argv[1]).read_text())
d = result["distributed"]
rows = [[s for s in per_rank if s.endswith("-rows")] for per_rank in d["segments"]]
checks = {
    "world size 2": result["world_size"] == 2,
    "trained on the GPU": result["device"].startswith("cuda"),
    "one rows segment, read by both ranks": len(rows) == 2 and rows[0] == rows[1] != [],
    "replicas identical": len(set(d["param_digests"])) == 1,
    "no /dev/shm leftovers": not list(Path("/dev/shm").glob(f"ibp-graph-{sys.argv[2]}-*")),
}
for name, ok in checks.items():
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
print("losses", result["losses"], "test acc", result["final_test_acc"], "backend", d["backend"])
print("DDP-GPU: PASS" if all(checks.values()) else "DDP-GPU: FAIL")
sys.exit(0 if all(checks.values()) else 1)
EOF
} 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
exit "$status"
