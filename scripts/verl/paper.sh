#!/usr/bin/env bash
# The paper's runs on verl (one node, several GPUs), from the repository root of a machine with the GPU stack
# (bash scripts/gpu_stack.sh download DIR --verl on a connected machine, then install there):
#
#   bash scripts/verl/paper.sh ENV MODEL_DIR [METHOD] [key=value ...]
#
#   ENV        alfworld | webshop | searchqa: the setting of training/configs/<ENV>_paper.yaml (ALFWorld and WebShop
#              16 tasks x 8 rollouts, Search-QA 128 x 8; lr 1e-6, clip 0.2, KL 0.01 (Search-QA 0.001) low_var_kl,
#              512 response tokens, 150 steps, rho 0.2, beta 0.5), through training/verl/config/ocsd_trainer.yaml
#   MODEL_DIR  the policy's Hugging Face folder (the paper: Qwen3-1.7B, Qwen3-4B, Qwen3-8B)
#   METHOD     ocsd (default), grpo, rlsd or an OCSD ablation (ocsd_no_ablated, ocsd_random_select, ...)
#   key=value  more Hydra overrides, e.g. the task data: ocsd.data=$ALFWORLD_DATA (ALFWorld's release folder),
#              ocsd.webshop_url=http://... (a WebShop server), ocsd.data=DIR ocsd.retrieval_urls=[http://...]
#              (Search-QA's parquet files and a retrieval server)
#
# Variables: GPUS (8, the paper's 8 A100s), TP (the rollout's tensor parallelism: 1 for 1.7B and 4B, 2 for 8B by
# default), SEED (0), RUN_ROOT (checkpoints/verl). The run folder is RUN_ROOT/<METHOD>_<ENV>_<model>_s<SEED>:
# verl's global_step_N/ checkpoints with replay/ beside each, run.json and metrics.jsonl, which every diagnostic
# and figure command reads (python -m diagnostics.report --run ...).
set -euo pipefail
env=${1:?usage: bash scripts/verl/paper.sh alfworld|webshop|searchqa MODEL_DIR [METHOD] [key=value ...]}
model=${2:?name the model folder (e.g. Qwen3-4B)}
method=${3:-ocsd}
shift $(( $# < 3 ? $# : 3 ))
case "$env" in alfworld | webshop | searchqa) ;; *) echo "paper.sh: ENV must be alfworld, webshop or searchqa" >&2; exit 2 ;; esac
[ -d "$model" ] || { echo "paper.sh: model folder $model does not exist" >&2; exit 2; }
name=$(basename "$model")
tp=${TP:-1}
case "$name" in *8B* | *8b*) tp=${TP:-2} ;; esac
seed=${SEED:-0}
run="${method}_${env}_${name}_s${seed}"
python -m training.verl.main "ocsd=$env" "ocsd.method=$method" "ocsd.seed=$seed" "ocsd.run_name=$run" \
    "ocsd.run_dir=${RUN_ROOT:-checkpoints/verl}/$run" "actor_rollout_ref.model.path=$model" \
    "trainer.n_gpus_per_node=${GPUS:-8}" "actor_rollout_ref.rollout.tensor_model_parallel_size=$tp" "$@"
