#!/usr/bin/env bash
# The paper-scale llama-cpp-python campaigns: 200,000 draws per arm, repair confirmation on fresh seeds.
# 0.3.36 always; 0.3.35 and 0.3.19 when their builds are set up
# (python3.11 tools/setup_envs.py --builds llama_cpp-0.3.35,llama_cpp-0.3.19).
# Usage: tools/paper_llama_cpp.sh [OUT_DIR] [CONFIRM_DRAWS]   (defaults: badc-out/paper, 400000; the paper
# used 1,000,000 per unrepaired confirmation arm). About 40 minutes for 0.3.36 on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-badc-out/paper}
confirm=${2:-400000}
# badc run exits 1 on a FAILS and 3 when something was left unchecked: results here, not errors
rc=0
.venv/bin/badc run campaigns/llama_cpp.toml --draws 200000 --confirm "$confirm" --out "$out/llama_cpp-0.3.36" || rc=$?
[ "$rc" = 0 ] || [ "$rc" = 1 ] || [ "$rc" = 3 ]
if [ -f .venvs/llama_cpp-0.3.35/.badc-ready ]; then
  .venv/bin/badc run campaigns/llama_cpp-0.3.35.toml --draws 200000 --confirm "$confirm" --out "$out/llama_cpp-0.3.35"
fi
