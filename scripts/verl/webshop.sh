#!/usr/bin/env bash
# The paper's WebShop run on verl: bash scripts/verl/webshop.sh MODEL [METHOD [N_GPUS]] [key=value ...]
# (scripts/verl/paper.sh says what each argument and variable does). The goals come from the WebShop server at
# $WEBSHOP_URL (as the paper; passed as ocsd.webshop_url unless the command line names one), or ocsd.data=generated
# (the built-in offline catalogue).
#   WEBSHOP_URL=http://127.0.0.1:3000 N_GPUS=4 bash scripts/verl/webshop.sh qwen2.5-coder-0.5b
set -euo pipefail
given() { local key=$1 arg; shift; for arg in "$@"; do [[ "$arg" == "$key="* ]] && return 0; done; return 1; }
extra=()
if [ -n "${WEBSHOP_URL:-}" ] && ! given ocsd.webshop_url "$@"; then extra+=("ocsd.webshop_url='$WEBSHOP_URL'"); fi
exec bash "$(dirname "$0")/paper.sh" webshop "$@" "${extra[@]}"
