#!/usr/bin/env bash
# The paper's Table 2 study with its stage S3 (campaigns/paper.toml: the 26 HF and LCP configurations on
# the paper's own builds, m = 26, alpha 0.05), 200,000 draws per arm with --anytime (looks at n/128 ..
# n, error budget spent over the looks), and the confirmation of one config per cause and build on
# fresh seeds (400,000 per arm). The finished jobs are kept in git (seal, configs, laws, one JSON of
# counts per shard; traces stay out), so the run goes on across machines and sessions.
# Set-up: python3.11 tools/setup_envs.py --builds transformers-5.12.0,llama_cpp-0.3.35,llama_cpp-0.3.19
# Usage: tools/paper_table2.sh [OUT_DIR]   (default findings/paper-table-2/campaign-anytime)
# Run it again to resume (finished shards are kept). BADC_ONLY=ID,ID runs only those configs' jobs (same
# seal, draws and m; a build's confirmation runs once every config of that build is decided, so name
# them all); BADC_PARTIAL=1 runs nothing and writes OUT/report-partial.md (safe while it runs).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-findings/paper-table-2/campaign-anytime}
.venv/bin/badc run campaigns/paper.toml --confirm 400000 --anytime --out "$out" \
  --workers "${BADC_WORKERS:-2}" --executor "${BADC_EXECUTOR:-local}" ${BADC_PARTIAL:+--partial} ${BADC_ONLY:+--only "$BADC_ONLY"}
