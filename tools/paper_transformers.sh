#!/usr/bin/env bash
# The paper-scale transformers campaign (campaigns/transformers.toml): the paper's HF rows on 5.17.0
# (with xgrammar 0.2.8), the same rows on the newest release 5.24.0, and 5.12.0's length-overshoot
# control when that build is set up (python3.11 tools/setup_envs.py --builds transformers-5.12.0).
# 200,000 draws per arm and the HF17-6/HF24-6 repair confirmation on fresh seeds.
# Usage: tools/paper_transformers.sh [OUT_DIR] [DRAWS] [CONFIRM_DRAWS]
#   (defaults: badc-out/paper/transformers, 200000, 400000; the paper used 1,000,000 per unrepaired
#   confirmation arm). transformers draws at 40-200/s per core with full traces and D2 replay, so the
#   full run is roughly 18 hours on 2 cores: give it more workers (BADC_WORKERS, or BADC_EXECUTOR=ray).
# Run it again with the same arguments to resume: finished shards are kept. With BADC_PARTIAL=1 it runs
# nothing and writes OUT/report-partial.md, the configs already decided (safe while the campaign runs).
# BADC_ONLY=ID,ID runs only those configs' jobs (same seal, draws and m), e.g. the undecided ones first.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-badc-out/paper/transformers}
draws=${2:-200000}
confirm=${3:-400000}
.venv/bin/badc run campaigns/transformers.toml --draws "$draws" --confirm "$confirm" --out "$out" \
  --workers "${BADC_WORKERS:-2}" --executor "${BADC_EXECUTOR:-local}" ${BADC_PARTIAL:+--partial} ${BADC_ONLY:+--only "$BADC_ONLY"}
