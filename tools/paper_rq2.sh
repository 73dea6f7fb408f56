#!/usr/bin/env bash
# The paper's held-out transfer study RQ2 (campaigns/rq2.toml: its three confirmed probes on 6 held-out
# variants each, m = 18, alpha 0.05), 200,000 draws per arm with --anytime, and stage S3's confirmation
# (one attempt per cause and build: at most 3) on fresh seeds, 400,000 per arm. Finished jobs are kept
# in git (seal, configs, laws, one JSON of counts per shard; traces stay out), so the run goes on across
# machines and sessions.
# Set-up: python3.11 tools/setup_envs.py --builds llama_cpp-0.3.19,llama_cpp-0.3.35  (transformers 5.17.0 is a default build)
# Usage: tools/paper_rq2.sh [OUT_DIR]   (default findings/paper-rq2/campaign-anytime)
# BADC_ONLY=ID,ID runs only those configs' jobs (same seal, draws and m); BADC_PARTIAL=1 runs nothing and
# writes OUT/report-partial.md (safe while it runs). badc run exits 1 on a FAILS and 3 while anything is
# unchecked or pending: results here, not errors.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-findings/paper-rq2/campaign-anytime}
.venv/bin/badc run campaigns/rq2.toml --confirm 400000 --anytime --out "$out" \
  --workers "${BADC_WORKERS:-2}" --executor "${BADC_EXECUTOR:-local}" ${BADC_PARTIAL:+--partial} ${BADC_ONLY:+--only "$BADC_ONLY"}
rc=$?
[ "$rc" = 0 ] || [ "$rc" = 1 ] || [ "$rc" = 3 ] || exit "$rc"
