#!/bin/bash
# The paper-scale runs (Qwen2.5-Coder policies on ALFWorld, training/configs/alfworld_paper.yaml) on GPU machines
# without network, from the repository root. What the machine needs travels as one bundle cut into parts:
#
#   here:  bash results/paper_scale_on_gpu.sh bundle DIR     packs into DIR/ps.NN + SUMS (PART_SIZE, default 50M):
#            $STACK_PARTS  vLLM's wheels (bash scripts/gpu_stack.sh download D: D/parts)
#            $MODEL_PARTS  the models' GGUFs and the gguf wheel (bash scripts/gpu_stack.sh models D
#                          qwen2.5-coder-0.5b qwen2.5-coder-1.5b: D)
#            $CARRY        the ALFWorld engine's packages for Python 3.12 (bash benchmarks/gpu_trainer.sh build)
#            $GAMES        generated training games (python -m training.envs.alfworld generate --out GAMES ...)
#            $EVAL_DATA    a folder with json_2.1.1/valid_seen (the ALFWorld release's valid_seen games)
#   there: bash results/paper_scale_on_gpu.sh install DIR    checks the parts gathered in DIR, installs vLLM, the
#                                                            engine and the games, converts the models into $CACHE
#   here:  git archive -o SNAP.tar HEAD                      the commit to run, so that what runs does not change
#   there: bash results/paper_scale_on_gpu.sh code SNAP.tar  unpacks it into /tmp/repo; run the commands below from
#                                                            there (cd /tmp/repo && bash results/...)
# Then, there (each job in the background, outliving the command, one GPU each, round the machine's GPUs):
#   bash results/paper_scale_on_gpu.sh zeroshot MODEL...     each catalogue MODEL on valid_seen with the paper's
#                                                            prompt and settings (python -m training.evaluate),
#                                                            REPEATS (2) episodes per game, into $OUT/zeroshot_*.json
#   bash results/paper_scale_on_gpu.sh steps NAME MODEL [key=value...]
#                                                            a training run of the paper's config on the generated
#                                                            games for STEPS (2) steps, to time its phases; the run
#                                                            folder without weights into $OUT/NAME.tgz
#   bash results/paper_scale_on_gpu.sh poll SECONDS          wait up to SECONDS for the jobs; print their progress and
#                                                            copy what they finished into $OUT
# Settings: CACHE (/tmp/ocsd_cache), WORKERS (12) environment processes per job, VLLM_MEM (0.35) the share of GPU
# memory each vLLM engine takes, GPUS (all of the machine's), MICRO (8192) update micro-batch tokens and
# SCORING_TOKENS (16384) replay-scoring batch tokens (a 152k-token vocabulary makes the logits of 32k tokens 20 GB).
set -e
export PYTHONUNBUFFERED=1
T0=$(date +%s)
ASSETS=/tmp/ps_assets
CACHE=${CACHE:-/tmp/ocsd_cache}
JOBS=/tmp/ps_jobs

bundle() {
    local dir=${1:?bundle: name the folder} work
    work=$(mktemp -d)
    mkdir -p "$work/stack" "$work/models" "$work/site" "$work/valid" "$dir"
    cp "${STACK_PARTS:?set STACK_PARTS to the stack parts folder}"/* "$work/stack/"
    cp "${MODEL_PARTS:?set MODEL_PARTS to the models parts folder}"/* "$work/models/"
    cp "${CARRY:-checkpoints/gpu_carry}/site312.tar.xz" "$work/site/"
    cp -r "${GAMES:?set GAMES to the generated games}" "$work/games"
    cp -r "${EVAL_DATA:?set EVAL_DATA to a folder with json_2.1.1/valid_seen}/json_2.1.1" "$work/valid/"
    rm -f "$dir"/ps.* "$dir/SUMS"
    tar -cf - -C "$work" stack models site games valid | split -b "${PART_SIZE:-50M}" -d -a 2 - "$dir/ps."
    (cd "$dir" && sha256sum ps.* > SUMS)
    rm -rf "$work"
    ls "$dir" | wc -l
    du -sh "$dir"
}

install() {
    local dir=${1:?install: name the folder with the parts}
    (cd "$dir" && sha256sum --quiet -c SUMS) || { echo "install: a part in $dir is missing or damaged" >&2; exit 2; }
    rm -rf $ASSETS && mkdir -p $ASSETS /root/gpu_site
    cat "$dir"/ps.* | tar -xf - -C $ASSETS
    tar -xJf $ASSETS/site/site312.tar.xz -C /root/gpu_site
    PY=python3 bash scripts/gpu_stack.sh install $ASSETS/stack /tmp/gpu 2>&1 | grep -v "^INFO\|^WARNING" | tail -2
    PY=python3 bash scripts/gpu_stack.sh models-install $ASSETS/models "$CACHE" 2>&1 | tail -3
    rm -rf $ASSETS/stack $ASSETS/models
    echo "installed in $(( $(date +%s) - T0 )) s"
}

case "${1:-}" in
    bundle) bundle "$2"; exit 0 ;;
    install) install "$2"; exit 0 ;;
    code) rm -rf /tmp/repo && mkdir -p /tmp/repo && tar -xf "${2:?code SNAP.tar}" -C /tmp/repo && echo /tmp/repo
          exit 0 ;;
esac
[ -f /tmp/gpu/gpu_stack.env ] && . /tmp/gpu/gpu_stack.env
export PYTHONPATH=$PYTHONPATH:$CACHE/site:/root/gpu_site/site312:$PWD OCSD_CACHE=$CACHE

start() {  # NAME CMD: CMD in the background (setsid) on the next GPU, its output in $JOBS/NAME.log
    local gpus slot
    gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
    mkdir -p $JOBS/out
    slot=$(ls $JOBS/*.log 2>/dev/null | wc -l)
    CUDA_VISIBLE_DEVICES=$(( slot % gpus )) setsid bash -c "$2" > $JOBS/$1.log 2>&1 < /dev/null &
    echo "started $1 on GPU $(( slot % gpus ))"
}

case "$1" in
zeroshot)
    shift
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    for model in "$@"; do
        start "zeroshot_$model" "python3 -m training.evaluate --ckpt $CACHE/$model-instruct \
            --config training/configs/alfworld_paper.yaml --data $ASSETS/valid --split valid_seen \
            --repeats ${REPEATS:-2} --json --out-file $JOBS/out/zeroshot_$model.json device=cuda \
            rollout_engine=vllm env_workers=${WORKERS:-12} vllm_gpu_memory_utilization=${VLLM_MEM:-0.35} \
            progress=false > /dev/null"
    done ;;
steps)
    name=${2:?steps NAME MODEL [key=value...]} model=${3:?steps NAME MODEL [key=value...]}
    shift 3
    start "$name" "python3 -m training.train --config training/configs/alfworld_paper.yaml run_dir=/tmp/runs/$name \
        run_name=$name model=$model data=generated games_dir=$ASSETS/games n_train_games=64 n_val_games=2 \
        total_steps=${STEPS:-2} save_freq=${STEPS:-2} test_freq=0 rollout_engine=vllm env_workers=${WORKERS:-12} \
        micro_batch_tokens=${MICRO:-8192} scoring_token_budget=${SCORING_TOKENS:-16384} \
        vllm_gpu_memory_utilization=${VLLM_MEM:-0.35} progress=false $* && \
        cd /tmp/runs && tar czf $JOBS/out/$name.tgz --exclude=actor $name" ;;
poll)
    end=$(( T0 + ${2:-500} ))
    while pgrep -f "training\.(evaluate|train)" > /dev/null && [ "$(date +%s)" -lt $end ]; do sleep 10; done
    for log in $JOBS/*.log; do
        echo "== $(basename "$log" .log)"
        grep -v "Loading weights\|Writing model shards" "$log" | grep -m3 -i "error\|Traceback\|Killed" || true
        grep -v "Loading weights\|Writing model shards" "$log" | tail -4 | cut -c1-400
    done
    for f in /tmp/runs/*/metrics.jsonl; do [ -e "$f" ] && echo "$f: $(wc -l < "$f") steps"; done
    cp $JOBS/out/* "$OUT/" 2>/dev/null || true
    ls -la "$OUT"
    { pgrep -fa "training\.(evaluate|train)" || echo "nothing running"; } | cut -c1-150
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader ;;
*)
    echo "usage: bash results/paper_scale_on_gpu.sh bundle DIR | install DIR | zeroshot MODEL... |" \
         "steps NAME MODEL [key=value...] | poll SECONDS" >&2
    exit 2 ;;
esac
