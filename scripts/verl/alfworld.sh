#!/usr/bin/env bash
# The paper's ALFWorld run on verl: bash scripts/verl/alfworld.sh MODEL [METHOD [N_GPUS]] [key=value ...]
# (scripts/verl/paper.sh says what each argument and variable does). The games are ALFWorld's release folder,
# $ALFWORLD_DATA (read by the ALFWorld task source itself) or ocsd.data=DIR; ocsd.data=generated: generated games.
#   N_GPUS=4 bash scripts/verl/alfworld.sh qwen2.5-coder-1.5b grpo
#   bash scripts/verl/alfworld.sh /models/Qwen3-4B ocsd 8 ocsd.data=/data/alfworld
set -euo pipefail
exec bash "$(dirname "$0")/paper.sh" alfworld "$@"
