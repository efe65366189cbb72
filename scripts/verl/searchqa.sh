#!/usr/bin/env bash
# The paper's Search-QA run on verl: bash scripts/verl/searchqa.sh MODEL [METHOD [N_GPUS]] [key=value ...]
# (scripts/verl/paper.sh says what each argument and variable does). The questions are Search-R1's parquet files in
# $SEARCHQA_DATA and the retrieval servers $RETRIEVAL_URLS (comma-separated), passed as ocsd.data and
# ocsd.retrieval_urls unless the command line names them; ocsd.data=generated: the built-in questions and BM25 server.
#   SEARCHQA_DATA=/data/searchR1_processed_direct RETRIEVAL_URLS=http://127.0.0.1:8000/retrieve \
#       bash scripts/verl/searchqa.sh /models/Qwen3-4B ocsd 8
set -euo pipefail
given() { local key=$1 arg; shift; for arg in "$@"; do [[ "$arg" == "$key="* ]] && return 0; done; return 1; }
extra=()
if [ -n "${SEARCHQA_DATA:-}" ] && ! given ocsd.data "$@"; then extra+=("ocsd.data='$SEARCHQA_DATA'"); fi
if [ -n "${RETRIEVAL_URLS:-}" ] && ! given ocsd.retrieval_urls "$@"; then
    extra+=("ocsd.retrieval_urls='$RETRIEVAL_URLS'")
fi
exec bash "$(dirname "$0")/paper.sh" searchqa "$@" "${extra[@]}"
