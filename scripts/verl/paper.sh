#!/usr/bin/env bash
# The paper's runs on verl (one node, several GPUs), from the repository root of a machine with the GPU stack
# (bash scripts/gpu_stack.sh download DIR --verl on a connected machine, then install there):
#
#   bash scripts/verl/paper.sh ENV MODEL [METHOD [N_GPUS]] [key=value ...]
#   bash scripts/verl/alfworld.sh | webshop.sh | searchqa.sh MODEL [METHOD [N_GPUS]] [key=value ...]
#
#   ENV        alfworld | webshop | searchqa: the setting of training/configs/<ENV>_paper.yaml (ALFWorld and WebShop
#              16 tasks x 8 rollouts, Search-QA 128 x 8; lr 1e-6, clip 0.2, KL 0.01 (Search-QA 0.001) low_var_kl,
#              512 response tokens, 150 steps, rho 0.2, beta 0.5), through training/verl/config/ocsd_trainer.yaml
#   MODEL      a model of the suite's catalogue, installed once (python -m ocsd.replay.catalog fetch NAME, or
#              convert NAME --gguf FILE offline): qwen2.5-coder-0.5b, qwen2.5-coder-1.5b (or smollm2); or the
#              policy's Hugging Face folder (the paper: Qwen3-1.7B, Qwen3-4B, Qwen3-8B)
#   METHOD     ocsd (default), grpo, rlsd or an OCSD ablation (ocsd_no_ablated, ocsd_random_select, ...)
#   N_GPUS     GPUs of the node (default $N_GPUS, else $GPUS, else 8, the paper's 8 A100s)
#   key=value  more Hydra overrides, e.g. the task data: ocsd.data=$ALFWORLD_DATA (ALFWorld's release folder),
#              ocsd.webshop_url=http://... (a WebShop server), ocsd.data=DIR ocsd.retrieval_urls=http://...
#              (Search-QA's parquet files and a retrieval server); --dry-run prints the composed config and
#              starts nothing
#
# The three per-environment scripts add their task source from the environment (alfworld.sh: $ALFWORLD_DATA, which
# the ALFWorld task source reads itself; webshop.sh: $WEBSHOP_URL; searchqa.sh: $SEARCHQA_DATA and
# $RETRIEVAL_URLS) and run this one.
#
# Variables: TP (the rollout's tensor parallelism: 1, and 2 for a model named *8B*), SEED (0), RUN_ROOT
# (checkpoints/verl), DRY_RUN=1 (the same as --dry-run). The run folder is RUN_ROOT/<METHOD>_<ENV>_<model>_s<SEED>:
# verl's global_step_N/ checkpoints with replay/ beside each, run.json and metrics.jsonl, which every diagnostic
# and figure command reads (python -m diagnostics.report --run ...).
set -euo pipefail
usage="usage: bash scripts/verl/paper.sh alfworld|webshop|searchqa MODEL [METHOD [N_GPUS]] [key=value ...]"
env=${1:?$usage}
model=${2:?name the model: a catalogue name (qwen2.5-coder-0.5b) or a folder (e.g. Qwen3-4B)}
shift 2
positional() { [ $# -gt 0 ] && [[ "$1" != *=* ]] && [[ "$1" != -* ]]; }
method=ocsd
if positional "$@"; then method=$1; shift; fi
gpus=${N_GPUS:-${GPUS:-8}}
if positional "$@"; then gpus=$1; shift; fi
case "$env" in alfworld | webshop | searchqa) ;; *) echo "paper.sh: ENV must be alfworld, webshop or searchqa" >&2; exit 2 ;; esac
[[ "$gpus" =~ ^[1-9][0-9]*$ ]] || { echo "paper.sh: N_GPUS must be a count >= 1, not '$gpus'" >&2; exit 2; }
if [[ "$model" == */* ]] || [ -e "$model" ]; then  # a folder (a catalogue name has no slash)
    [ -d "$model" ] || { echo "paper.sh: model folder $model does not exist" >&2; exit 2; }
fi
name=$(basename "$model")
tp=${TP:-1}
case "$name" in *8B* | *8b*) tp=${TP:-2} ;; esac
seed=${SEED:-0}
run="${method}_${env}_${name}_s${seed}"
dry=()
[ "${DRY_RUN:-0}" = 1 ] && dry=(--dry-run)
exec python -m training.verl.main "${dry[@]}" "ocsd=$env" "ocsd.method=$method" "ocsd.seed=$seed" \
    "ocsd.run_name=$run" "ocsd.run_dir=${RUN_ROOT:-checkpoints/verl}/$run" "actor_rollout_ref.model.path=$model" \
    "trainer.n_gpus_per_node=$gpus" "actor_rollout_ref.rollout.tensor_model_parallel_size=$tp" "$@"
