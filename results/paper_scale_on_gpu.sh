#!/bin/bash
# The paper-scale runs (Qwen2.5-Coder policies on ALFWorld, training/configs/alfworld_paper.yaml) on GPU machines
# without network, from the repository root. What the machine needs travels as one bundle cut into parts:
#
#   here:  bash results/paper_scale_on_gpu.sh bundle DIR     packs into DIR/ps.NN + SUMS (PART_SIZE, default 56M:
#          a part and the repository's tree, 4 MB with results/ and training/warm_starts/ set aside, fit the 64 MiB
#          that one call to a device machine carries):
#            $STACK_PARTS  vLLM's wheels (bash scripts/gpu_stack.sh download D: D/parts)
#            $MODEL_PARTS  the models' GGUFs and the gguf wheel (bash scripts/gpu_stack.sh models D
#                          qwen2.5-coder-0.5b qwen2.5-coder-1.5b: D)
#            $CARRY        the ALFWorld engine's packages for Python 3.12 (bash benchmarks/gpu_trainer.sh build)
#            $GAMES        generated training games (python -m training.envs.alfworld generate --out GAMES ...)
#            $EVAL_DATA    a folder with json_2.1.1/valid_seen (the ALFWorld release's valid_seen games)
#            $DEMOS        (optional) prepared warm-start folders (python -m training.sft --prepare: their
#                          demonstrations/ travel, under the folder's name)
#            $RUNS         (optional) what earlier machines sent back (NAME.tgz, NAME.actor.tgz.aa, ...), to resume,
#                          or the runs kept in the repository (carry_runs below: NAME.tgz, NAME.pack.tar)
#   here:  bash results/paper_scale_on_gpu.sh prepare DIR [SERIES]
#                                                            all of the above rebuilt into DIR from the package index
#                                                            and the repository, for a workstation that starts
#                                                            bare (needs .venv: bash scripts/install.sh; about 10
#                                                            minutes): DIR/stack (--verl), DIR/models (MODELS, default
#                                                            qwen2.5-coder-0.5b, fetched into $OCSD_CACHE first),
#                                                            DIR/carry, DIR/games (8 training and 2 validation games,
#                                                            seed 0), DIR/runs (carry_runs SERIES); a part already in
#                                                            DIR is kept (delete it to rebuild); then prints the
#                                                            bundle command
#   here:  bash results/paper_scale_on_gpu.sh carry_runs SERIES DIR
#                                                            the runs of a series folder that have a resume pack
#                                                            (SERIES/NAME: records; SERIES/packs/NAME.tar: python -m
#                                                            training.resume_pack pack) into DIR, to bundle as RUNS
#   here:  python -m training.campaign collect SERIES CALL_DIR... --runs DIR
#                                                            after the machine: what its poll calls returned (one
#                                                            folder per call, oldest first) into the series (records,
#                                                            packs of the runs that moved) and DIR (the runs with
#                                                            their weights); python -m training.campaign status
#                                                            SERIES says where every run stands
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
#                                                            a training run of the paper's config on TRAIN_GAMES for
#                                                            STEPS (2) steps, to time its phases; the run folder
#                                                            without weights into $OUT/NAME.tgz (poll packs no weights)
#   bash results/paper_scale_on_gpu.sh sft NAME CONFIG [key=value...]
#                                                            a warm start (python -m training.sft) from the carried
#                                                            demonstrations of NAME, exported with its provenance into
#                                                            /tmp/warm/NAME and $OUT/NAME.warm.tgz; with EVAL=1 then
#                                                            evaluated on its GPU as eval does (eval_NAME.json)
#   bash results/paper_scale_on_gpu.sh eval NAME CKPT        CKPT (a warm start, checkpoint or model folder) on
#                                                            SPLIT (valid_seen) as zeroshot does, into
#                                                            $OUT/eval_NAME.json
#   bash results/paper_scale_on_gpu.sh run NAME METHOD MODEL WARM SEED [key=value...]
#                                                            a paper-setting run on TRAIN_GAMES from the warm start
#                                                            WARM with LoRA (rank 8, lr 2e-5: only the adapter and
#                                                            its optimizer state, not full weights, fit a transfer
#                                                            back) for STEPS (50) steps, resuming where a restored
#                                                            run stopped; each checkpoint's run folder (without
#                                                            weights) and the last checkpoint's adapter and optimizer
#                                                            state are packed by poll; with EVAL_AT=K it stops at
#                                                            step K, evaluates that checkpoint as eval does
#                                                            ($OUT/eval_NAME_stepK.json) and trains on to STEPS, all
#                                                            on its GPU (a run resumed past K trains on); runs started
#                                                            on a GPU that holds RUNS_PER_GPU of them already wait
#                                                            their turn there, in the order started
#   bash results/paper_scale_on_gpu.sh ladder NAME RUN MODEL...
#                                                            the diagnosis of RUN's steps (a run folder of the commit)
#                                                            by its stored scores and by each scorer MODEL
#                                                            (python -m rescoring.ladder, with the observation swap),
#                                                            into $OUT/ladder_NAME.tgz
#   bash results/paper_scale_on_gpu.sh audit NAME RUN VIEW TWIN STEP...
#                                                            the audit of VIEW and its twin TWIN against Full and
#                                                            Ablated (python -m rescoring.audit, without the swap,
#                                                            AUDIT_DTYPE float32) at each checkpoint STEP of the run
#                                                            RUN of RUNS_DIR that has its weights here, one after the
#                                                            other on one GPU (AUDIT_DEVICE cuda), each into
#                                                            audit_NAME_stepSTEP/ of $OUT/audit_NAME.tgz (made in
#                                                            AUDIT_DIR, /tmp/audit; a checkpoint that fails is named
#                                                            in the log and the others go on; python -m
#                                                            training.campaign collect unpacks them into the series)
#   bash results/paper_scale_on_gpu.sh scaling [option...]   the veRL scaling benchmark on every GPU of the machine
#                                                            (benchmarks/verl_scaling.py: the single-device trainer,
#                                                            then verl on 1, 2 and 4 GPUs, STEPS (4) steps each;
#                                                            --side-by-side: those that fit together at once, on
#                                                            disjoint GPUs; GPU=N: on that GPU alone, with
#                                                            --gpus 1) and its table and figure, into
#                                                            $OUT/NAME/ (SCALING_NAME, default verl_scaling: the
#                                                            job's name, so that two measurements with other verl
#                                                            settings run side by side on two GPUs)
#   bash results/paper_scale_on_gpu.sh verl_check            a verl run on one GPU (benchmarks/verl_backend.py, the
#                                                            SmolLM2 warm start, STEPS (2) steps), the parity of its
#                                                            first batch with the single-device trainer on the GPU in
#                                                            float32 (training.verl.parity: $OUT/verl_parity.json),
#                                                            its records validated and its report, into
#                                                            $OUT/verl_check.tgz
#   bash results/paper_scale_on_gpu.sh poll SECONDS [RUN...] wait up to SECONDS for the jobs and print their progress;
#                                                            without RUN, copy into $OUT the jobs' outputs
#                                                            (evaluations, audits, ...) not sent yet as they are
#                                                            now, then the weights of one run started here whose
#                                                            last checkpoint has not come back yet (a run that has
#                                                            ended first, then the one waiting longest) with its
#                                                            folder without weights (NAME.tgz),
#                                                            where they fit the call (WEIGHTS=0: none), then the
#                                                            folders of the other runs started here that changed
#                                                            since they last came, where the call has room (runs
#                                                            carried in but not started are unchanged and stay);
#                                                            with RUNs, only those runs' NAME.tgz and
#                                                            NAME.actor.tgz.aa, ... of the last checkpoint that has
#                                                            its weights (58 MB for the 0.5B: one run per call,
#                                                            which brings back 8 files, 64 MB), then the outputs not
#                                                            sent yet while the call has room; either way the
#                                                            outputs sent before, and the folders, come again where
#                                                            room is left
# Settings: TRAIN_GAMES (real: the carried release's valid_train split, 200 trials of ALFWorld's training split, with
# valid_seen for validation; generated: the carried generated games, 88-98% of whose episodes the 0.5B warm start
# wins), DRY (set: print each job's GPU and command instead of starting it), AFTER (a job's NAME: the job started now
# waits for it and runs only if it ended with status 0), DEMOS_OF (sft: the carried demonstrations of another NAME),
# SFT_SAVE_FREQ (100) optimizer steps between warm-start checkpoints (each holds merged weights: 3 GB for the 1.5B),
# CACHE (/tmp/ocsd_cache), GPU (the next one round the machine; all: every one; a list such as 2,3: those) the GPU of
# a job started now, WORKERS (12) environment processes per job, VLLM_MEM (0.35) the share of GPU memory each vLLM
# engine takes, GPUS (all of the machine's), MICRO (8192) update micro-batch tokens and SCORING_TOKENS (16384)
# forward-only batch tokens (log-probs, replay scoring) of runs, steps, verl_check and scaling (a 152k-token
# vocabulary makes the logits of 32k tokens 20 GB; verl's old-log-prob pass pads its micro-batches and takes the
# entropy in float32, and at the paper configs' 65,536 ran out of memory on a shared H200), JOBS (/tmp/ps_jobs) the
# jobs' logs and exit statuses, RUNS_DIR (/tmp/runs) the training runs that poll packs, START_TRIES (4) and
# RETRY_DELAY (60): how often and about how many seconds apart a job starts again whose vLLM start-up collided with
# another job on its GPU. RUNS_PER_GPU: how many training runs train at once on one GPU; by default the GPU's memory
# over RUN_GIB (42: a 0.5B run at VLLM_MEM=0.15 peaked at 39.4 GiB on an H100, where two ran out of memory; one
# H200 held three), so one on an H100 (80 GB) and three on an H200 (141 GB); without nvidia-smi, no limit.
set -e
export PYTHONUNBUFFERED=1
T0=$(date +%s)
ASSETS=/tmp/ps_assets
CACHE=${CACHE:-/tmp/ocsd_cache}
JOBS=${JOBS:-/tmp/ps_jobs}
RUNS_DIR=${RUNS_DIR:-/tmp/runs}
# vLLM's start-up measures the GPU's free memory around a profiling pass and fails when another process on the GPU
# frees or takes memory meanwhile (runs sharing a GPU do at every step, sleeping and waking their engines): on two
# H200 shared by three runs each, 3 of 7 jobs failed so at their start. The trainer and training.evaluate now order
# their own start-ups against each other's steps (training/rollout/gpu_share.py); verl's jobs do not, so this stays
VLLM_COLLISION="Error in memory profiling|No available memory for the cache blocks|\
To serve at least one request with the model.s max seq len"

bundle() {
    local dir=${1:?bundle: name the folder} work d
    for d in $DEMOS; do  # checked before anything is made
        [ -f "$d/demonstrations/info.json" ] || { echo "bundle: $d has no demonstrations/info.json" >&2; exit 2; }
    done
    work=$(mktemp -d)
    mkdir -p "$work/stack" "$work/models" "$work/site" "$work/valid" "$dir"
    cp "${STACK_PARTS:?set STACK_PARTS to the stack parts folder}"/* "$work/stack/"
    cp "${MODEL_PARTS:?set MODEL_PARTS to the models parts folder}"/* "$work/models/"
    cp "${CARRY:-checkpoints/gpu_carry}/site312.tar.xz" "$work/site/"
    cp -r "${GAMES:?set GAMES to the generated games}" "$work/games"
    cp -r "${EVAL_DATA:?set EVAL_DATA to a folder with json_2.1.1/valid_seen}/json_2.1.1" "$work/valid/"
    mkdir -p "$work/demos" "$work/runs"
    for d in $DEMOS; do  # only the demonstrations of each prepared warm start
        mkdir -p "$work/demos/$(basename "$d")" && cp -r "$d/demonstrations" "$work/demos/$(basename "$d")/"
    done
    [ -z "$RUNS" ] || cp "$RUNS"/* "$work/runs/"
    rm -f "$dir"/ps.* "$dir/SUMS"
    tar -cf - -C "$work" stack models site games valid demos runs | split -b "${PART_SIZE:-56M}" -d -a 2 - "$dir/ps."
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
    # the stack and the models install side by side, each into its own folder
    PY=python3 bash scripts/gpu_stack.sh install $ASSETS/stack /tmp/gpu > $ASSETS/stack.log 2>&1 & local stack=$!
    PY=python3 bash scripts/gpu_stack.sh models-install $ASSETS/models "$CACHE" > $ASSETS/models.log 2>&1 \
        & local models=$!
    wait $stack || { tail -5 $ASSETS/stack.log; echo "install: the vLLM stack did not install" >&2; exit 2; }
    grep -v "^INFO\|^WARNING" $ASSETS/stack.log | tail -2
    wait $models || { tail -5 $ASSETS/models.log; echo "install: the models did not install" >&2; exit 2; }
    tail -3 $ASSETS/models.log
    rm -rf $ASSETS/stack $ASSETS/models
    mkdir -p $RUNS_DIR
    for f in $ASSETS/runs/*.tgz; do [ -e "$f" ] && tar -xzf "$f" -C $RUNS_DIR; done  # runs without weights
    for f in $ASSETS/runs/*.actor.tgz.aa; do [ -e "$f" ] && cat "${f%.aa}".* | tar -xzf - -C $RUNS_DIR; done
    for f in $ASSETS/runs/*.pack.tar; do  # a resume pack (training.resume_pack) into its run's records
        [ -e "$f" ] && python3 -m training.resume_pack unpack "$f" "$RUNS_DIR/$(basename "$f" .pack.tar)"
    done
    ls $RUNS_DIR
    echo "installed in $(( $(date +%s) - T0 )) s"
}

carry_runs() {  # SERIES OUT: the runs kept in the repository (SERIES/NAME, the records; SERIES/packs/NAME.tar, the
    local series=${1:?carry_runs: name the series folder} out=${2:?carry_runs: name the output folder} f name n=0
    mkdir -p "$out"  # resume pack of its last checkpoint) as a bundle's RUNS: NAME.tgz and NAME.pack.tar
    for f in "$series"/packs/*.tar; do
        [ -e "$f" ] || continue
        name=$(basename "$f" .tar)
        [ -f "$series/$name/run.json" ] || { echo "carry_runs: $f has no records in $series/$name" >&2; exit 2; }
        tar czf "$out/$name.tgz" --exclude=actor -C "$series" "$name" && cp "$f" "$out/$name.pack.tar"
        n=$((n + 1))
    done
    echo "$n runs into $out"
}

prepare() {  # DIR [SERIES]: a bundle's inputs rebuilt on a bare workstation, each part only where it is missing
    local dir=${1:?prepare: name the folder} series=${2:-} py=${VENV:-.venv}/bin/python
    local models=${MODELS:-qwen2.5-coder-0.5b}
    [ -x "$py" ] || { echo "prepare: $py not found: bash scripts/install.sh first (or set VENV)" >&2; exit 2; }
    [ -z "$series" ] || [ -d "$series/packs" ] || { echo "prepare: $series has no packs/ folder" >&2; exit 2; }
    mkdir -p "$dir"
    if [ ! -f "$dir/stack/parts/SHA256SUMS" ]; then  # vLLM's and verl's wheels (449 MB in parts)
        PIP_DOWNLOAD="$py -m pip" bash scripts/gpu_stack.sh download "$dir/stack" --verl && rm -rf "$dir/stack/wheels"
    fi
    if [ ! -f "$dir/models/SHA256SUMS" ]; then  # the GGUFs, kept beside the converted weights, and the gguf wheel
        # shellcheck disable=SC2086  # MODELS is a list of names
        $py -m ocsd.replay.catalog fetch $models --keep-gguf
        PY=$py PIP_DOWNLOAD="$py -m pip" bash scripts/gpu_stack.sh models "$dir/models" $models
    fi
    [ -f "$dir/carry/site312.tar.xz" ] || CARRY="$dir/carry" VENV=${VENV:-.venv} bash benchmarks/gpu_trainer.sh build
    if [ ! -d "$dir/games/json_2.1.1/valid" ]; then
        rm -rf "$dir/games"
        $py -m training.envs.alfworld generate --out "$dir/games" --n 8 --seed 0 --split train
        $py -m training.envs.alfworld generate --out "$dir/games" --n 2 --seed 0 --split valid
    fi
    [ -z "$series" ] || { rm -rf "$dir/runs" && carry_runs "$series" "$dir/runs"; }
    echo "prepared $dir ($(du -sh "$dir" | cut -f1)); bundle it with:"
    echo "  STACK_PARTS=$dir/stack/parts MODEL_PARTS=$dir/models CARRY=$dir/carry GAMES=$dir/games" \
         "EVAL_DATA=<folder with json_2.1.1/valid_seen>${series:+ RUNS=$dir/runs} bash $0 bundle OUT"
}

case "${1:-}" in
    prepare) prepare "$2" "${3:-}"; exit 0 ;;
    bundle) bundle "$2"; exit 0 ;;
    carry_runs) carry_runs "$2" "$3"; exit 0 ;;
    install) install "$2"; exit 0 ;;
    code) rm -rf /tmp/repo && mkdir -p /tmp/repo && tar -xf "${2:?code SNAP.tar}" -C /tmp/repo && echo /tmp/repo
          exit 0 ;;
esac
[ -f /tmp/gpu/gpu_stack.env ] && . /tmp/gpu/gpu_stack.env
export PYTHONPATH=$PYTHONPATH:$CACHE/site:/root/gpu_site/site312:$PWD OCSD_CACHE=$CACHE

start() {  # NAME CMD: CMD in the background (setsid) on the next GPU, its output in $JOBS/NAME.log, its exit
    local gpus slot wait=""  # status in $JOBS/NAME.rc; with AFTER=JOB it starts once JOB has ended well
    gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
    mkdir -p $JOBS/out
    slot=$(ls $JOBS/*.log 2>/dev/null | wc -l)
    slot=${GPU:-$(( slot % gpus ))}
    [ -z "$AFTER" ] || wait="bash $(readlink -f "$0") after $AFTER || exit 3; "
    local cap=""
    [ -z "$QUEUE" ] || [ "$slot" = all ] || cap=$(runs_per_gpu "$slot")
    if [ -n "$cap" ]; then  # a training run: it waits while RUNS_PER_GPU runs started before it on its GPU go on
        wait+="bash $(readlink -f "$0") turn $1; "
    fi
    [ -z "$DRY" ] || { echo "GPU $slot${AFTER:+ after $AFTER}${cap:+ (runs: at most $cap at once)}: $2"; return; }
    rm -f $JOBS/$1.rc $JOBS/$1.pid
    if [ -n "$cap" ]; then
        local seq=$(( $(cat $JOBS/queue.seq 2>/dev/null || echo 0) + 1 ))
        echo $seq > $JOBS/queue.seq
        echo "$slot $seq $cap" > $JOBS/$1.queue
    fi
    local gpu_env="CUDA_VISIBLE_DEVICES=$slot" tries=${START_TRIES:-4} delay=${RETRY_DELAY:-60}
    [ "$slot" != all ] || gpu_env=""  # GPU=all: the job sees every GPU of the machine
    # a job whose vLLM start-up collided with another job's memory on its GPU starts again (a run resumes from its
    # last checkpoint) after DELAY/2 to 3 DELAY/2 seconds, up to TRIES times in all; any other failure is final
    env $gpu_env setsid bash -c "echo \$\$ > $JOBS/$1.pid; for try in \$(seq $tries); do ( $wait$2 ) 2>&1 | tee $JOBS/$1.try; \
        rc=\${PIPESTATUS[0]}; [ \$rc != 0 ] && [ \$try -lt $tries ] && grep -Eq '$VLLM_COLLISION' $JOBS/$1.try || break; \
        pause=\$(( $delay / 2 + RANDOM % ($delay + 1) )); \
        echo \"== try \$try of $tries: vLLM's start-up collided with another job on the GPU; again in \$pause s\"; \
        sleep \$pause; done; echo \$rc > $JOBS/$1.rc" > $JOBS/$1.log 2>&1 < /dev/null &
    echo "started $1 on GPU $slot${AFTER:+ after $AFTER}${cap:+ (runs: at most $cap at once there)}"
}

runs_per_gpu() {  # SLOT: RUNS_PER_GPU, else the GPU's memory over RUN_GIB (at least 1); nothing without nvidia-smi
    local mib
    [ -z "$RUNS_PER_GPU" ] || { echo "$RUNS_PER_GPU"; return; }
    mib=$(nvidia-smi --id="$1" --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1) || true
    [[ "$mib" =~ ^[0-9]+$ ]] || return 0
    echo $(( mib / 1024 / ${RUN_GIB:-42} > 1 ? mib / 1024 / ${RUN_GIB:-42} : 1 ))
}

going() {  # JOB: it has not ended: no status yet, and its shell (JOB.pid, written as it starts) not stopped (a job
    # killed from outside, or lost with its shell, writes no status and would hold its turn and the polls for ever)
    local pid
    [ ! -e "$JOBS/$1.rc" ] || return 1
    pid=$(cat "$JOBS/$1.pid" 2>/dev/null) || return 0  # not yet started
    kill -0 "$pid" 2>/dev/null
}

status_of() {  # JOB: its exit status, "running", or "stopped without a status" (killed)
    if [ -e "$JOBS/$1.rc" ]; then cat "$JOBS/$1.rc"; elif going "$1"; then echo running
    else echo "stopped without a status (killed?)"; fi
}

after() {  # JOB: wait until JOB has ended; fail (status 3) unless it ended well
    while going "$1"; do sleep "${AFTER_POLL:-10}"; done
    [ "$(cat "$JOBS/$1.rc" 2>/dev/null)" = 0 ] && return 0
    echo "not started: $1 ended with status $(cat "$JOBS/$1.rc" 2>/dev/null || echo none: stopped)"
    return 3
}

turn() {  # NAME: wait until fewer than its cap of the runs started before it on its GPU are still going
    local slot seq cap q other o_slot o_seq n said=""
    read -r slot seq cap < "$JOBS/$1.queue"
    while :; do
        n=0
        for q in $JOBS/*.queue; do
            other=$(basename "$q" .queue)
            read -r o_slot o_seq _ < "$q"
            [ "$other" != "$1" ] && [ "$o_slot" = "$slot" ] && [ "$o_seq" -lt "$seq" ] && going "$other" && n=$((n + 1))
        done
        [ "$n" -lt "$cap" ] && return 0
        [ -n "$said" ] || { said=1
            echo "waiting for a turn on GPU $slot: $n runs started before it have not ended (at most $cap at once)"; }
        sleep "${TURN_POLL:-10}"
    done
}

training_games() {  # the training games of run and steps: TRAIN_GAMES=real (the carried release's valid_train
    case "${TRAIN_GAMES:-real}" in  # split, 200 trials of ALFWorld's training split) or generated (the carried games)
        real) echo "data=$ASSETS/valid train_split=valid_train val_split=valid_seen" ;;
        generated) echo "data=generated games_dir=$ASSETS/games n_train_games=64 n_val_games=2" ;;  # the 64 carried
        # (generator seed 0): a run of another seed or count generates its own first (200 took 7 minutes of a machine)
        *) echo "TRAIN_GAMES must be real or generated, not '$TRAIN_GAMES'" >&2; exit 2 ;;
    esac
}

training() {  # RUN_DIR KEY=VALUE...: the command that trains alfworld_paper.yaml on TRAIN_GAMES with this machine's
    local games  # settings into RUN_DIR, the KEY=VALUE settings last (a refused TRAIN_GAMES ends the script, status 2)
    games=$(training_games) || exit 2
    echo "python3 -m training.train --config training/configs/alfworld_paper.yaml run_dir=$1 run_name=$(basename "$1") \
        $games test_freq=0 rollout_engine=vllm env_workers=${WORKERS:-12} micro_batch_tokens=${MICRO:-8192} \
        scoring_token_budget=${SCORING_TOKENS:-16384} vllm_gpu_memory_utilization=${VLLM_MEM:-0.35} progress=false \
        ${*:2}"
}

evaluation() {  # FILE CKPT: the command that evaluates CKPT on $SPLIT (valid_seen) into $JOBS/out/FILE.json
    echo "python3 -m training.evaluate --ckpt $2 --config training/configs/alfworld_paper.yaml \
        --data $ASSETS/valid --split ${SPLIT:-valid_seen} --repeats ${REPEATS:-2} --json \
        --out-file $JOBS/out/$1.json device=cuda rollout_engine=vllm env_workers=${WORKERS:-12} \
        vllm_gpu_memory_utilization=${VLLM_MEM:-0.35} progress=false > /dev/null"
}

token_budgets() {  # the verl benchmarks' options for MICRO and SCORING_TOKENS, the budgets training runs take
    echo "--micro-batch-tokens ${MICRO:-8192} --scoring-tokens ${SCORING_TOKENS:-16384}"
}

last_checkpoint() {  # RUN_DIR: the name of its last global_step_N (by N) whose actor/ holds the trainer state, the
    # checkpoint training.trainer.resume_point resumes from (its STATE_FILE; the shell has no torch to import it)
    local d last=""
    for d in $(ls -d "$1"/global_step_* 2>/dev/null | sort -V); do
        [ -f "$d/actor/trainer_state.pt" ] && last=$(basename "$d")
    done
    echo "$last"
}

weights_due() {  # the run started here whose last checkpoint's weights have not come back yet ($JOBS/weights/NAME
    # holds the checkpoint that came back last, or that it started from): a run that has ended first (its last
    # checkpoint is its final one: once the machine is given back it is lost, while a running run's next poll brings
    # newer weights anyway), then the one whose weights came back longest ago; nothing when none is due (a run
    # carried in the bundle but not started here never is)
    local r name last t best="" best_t=""
    for r in $RUNS_DIR/*/; do
        r=${r%/} name=$(basename "$r") last=$(last_checkpoint "$r")
        [ -e "$JOBS/weights/$name" ] && [ -n "$last" ] && [ "$(cat "$JOBS/weights/$name")" != "$last" ] || continue
        t=$(stat -c %Y $JOBS/weights/$name 2>/dev/null || echo 0)
        going "$name" && t=$(( t + 10**10 ))  # a running run after every run that has ended
        [ -n "$best" ] && [ "$t" -ge "$best_t" ] && continue
        best=$name best_t=$t
    done
    echo "$best"
}

pack_weights() {  # NAME: the weights of its last checkpoint into $OUT/NAME.actor.tgz.aa, ... (15 MB parts); prints
    local last  # that checkpoint's name (nothing where none has weights yet)
    last=$(last_checkpoint "$RUNS_DIR/$1")
    [ -n "$last" ] || return 0
    (cd $RUNS_DIR && tar czf - "$1/$last/actor" | split -b 15M - "$OUT/$1.actor.tgz.")
    echo "$last"
}

out_bytes() {  # what $OUT holds, in bytes
    du -cb "$OUT"/ 2>/dev/null | tail -1 | cut -f1
}

within() {  # FILES BYTES: $OUT with FILES more files of BYTES in all still fits a call (8 files, 62 MB with the
    [ $(( $(find "$OUT" -type f | wc -l) + $1 )) -le 8 ] && [ $(( $(out_bytes) + $2 )) -le 62000000 ]  # listing)
}

output_state() {  # PATH [FIND_ARGS...]: the sizes and modification times of its files (FIND_ARGS: what to prune
    local path=$1  # first), what tells an output or a run folder sent as it is now
    shift
    find "$path" "$@" -type f -printf '%P %s %T@\n' 2>/dev/null | sort | md5sum | cut -c1-32
}

send_outputs() {  # new|sent: the jobs' outputs ($JOBS/out: evaluations, audits, ...) not yet sent as they are now
    local f n b key  # (new), or those sent before (sent), each into $OUT where it still fits the call, a folder whole
    mkdir -p $JOBS/sent
    for f in $JOBS/out/*; do
        [ -e "$f" ] || continue
        key=$(output_state "$f")
        if [ "$1" = new ]; then
            [ "$key" != "$(cat "$JOBS/sent/$(basename "$f")" 2>/dev/null)" ] || continue
        else
            [ "$key" = "$(cat "$JOBS/sent/$(basename "$f")" 2>/dev/null)" ] || continue
        fi
        n=$(find "$f" -type f | wc -l) b=$(du -sb "$f" | cut -f1)
        within "$n" "$b" || continue
        cp -r "$f" "$OUT/" && echo "$key" > "$JOBS/sent/$(basename "$f")"
    done
}

started_runs() {  # the training runs started here (those carried in and not started stay as they came)
    local r
    for r in $RUNS_DIR/*/; do
        r=${r%/}
        [ -f "$r/run.json" ] && [ -f "$r/metrics.jsonl" ] && [ -e "$JOBS/weights/$(basename "$r")" ] && basename "$r"
    done
    return 0
}

send_folder() {  # NAME force|changed|again: the run folder without weights into $OUT as NAME.tgz, once per call;
    # force: always (it comes with its weights), changed: where it changed since it was last sent and the call has
    # room, again: where it has not come in this call and the call has room left (a reply lost on the way)
    local name=$1 key tmp
    [ ! -e "$OUT/$name.tgz" ] || return 0
    [ "$2" = force ] || within 1 0 || return 0  # no file's room left: not worth packing
    key=$(output_state "$RUNS_DIR/$name" -name actor -prune -o)  # the weights left out
    mkdir -p $JOBS/folders
    [ "$2" != changed ] || [ "$key" != "$(cat "$JOBS/folders/$name" 2>/dev/null)" ] || return 0
    tmp=$JOBS/folders/$name.tgz
    (cd $RUNS_DIR && tar czf "$tmp" --exclude=actor "$name")
    if [ "$2" = force ] || within 1 "$(stat -c %s "$tmp")"; then
        mv "$tmp" "$OUT/$name.tgz" && echo "$key" > "$JOBS/folders/$name"
    else
        rm -f "$tmp"
    fi
}

weights_held() {  # NAME CHECKPOINT: the weights of NAME's CHECKPOINT are off the machine (or came with it; an
    mkdir -p $JOBS/weights && echo "$2" > $JOBS/weights/$1  # empty CHECKPOINT: a run started from none)
}

case "$1" in
zeroshot)
    shift
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    for model in "$@"; do
        start "zeroshot_$model" "$(evaluation "zeroshot_$model" "$CACHE/$model-instruct")"
    done ;;
sft)
    name=${2:?sft NAME CONFIG [key=value...]} config=${3:?sft NAME CONFIG [key=value...]}
    shift 3
    mkdir -p /tmp/sft/$name /tmp/warm && cp -r $ASSETS/demos/${DEMOS_OF:-$name}/demonstrations /tmp/sft/$name/
    start "$name" "python3 -m training.sft --config $config run_dir=/tmp/sft/$name device=cuda progress=false \
        save_freq=${SFT_SAVE_FREQ:-100} keep_checkpoints=2 $* && \
        python3 -m training.sft --export /tmp/sft/$name --out /tmp/warm/$name && \
        tar czf $JOBS/out/$name.warm.tgz -C /tmp/warm $name${EVAL:+ && $(evaluation "eval_$name" "/tmp/warm/$name")}" ;;
eval)
    name=${2:?eval NAME CKPT} ckpt=${3:?eval NAME CKPT}
    start "eval_$name" "$(evaluation "eval_$name" "$ckpt")" ;;
turn)  # used by run's jobs: wait for a turn on the GPU
    turn "${2:?turn NAME}" ;;
after)  # used by jobs started with AFTER=JOB: wait for JOB to end well
    after "${2:?after JOB}" ;;
run)
    name=${2:?run NAME METHOD MODEL WARM SEED} method=${3:?run NAME METHOD MODEL WARM SEED}
    model=${4:?run NAME METHOD MODEL WARM SEED} warm=${5:?run NAME METHOD MODEL WARM SEED}
    seed=${6:?run NAME METHOD MODEL WARM SEED}
    shift 6
    run_to() {  # TOTAL: the command that trains the run on to step TOTAL
        training "$RUNS_DIR/$name" method=$method model=$model warm_start=$warm seed=$seed lora_rank=8 \
            lora_alpha=16 lr=2e-5 save_merged=false total_steps=$1 save_freq=${SAVE_FREQ:-5} "${extra[@]}"
    }
    extra=("$@") held=$(last_checkpoint "$RUNS_DIR/$name") steps=${STEPS:-50}
    cmd=$(run_to $steps) || exit 2
    if [ -n "$EVAL_AT" ]; then  # stop at EVAL_AT, evaluate that checkpoint as eval does, then on to STEPS
        [[ "$EVAL_AT" =~ ^[1-9][0-9]*$ ]] && [ "$EVAL_AT" -lt "$steps" ] || {
            echo "EVAL_AT must be a training step before STEPS ($steps), not '$EVAL_AT'" >&2; exit 2; }
        stop=$RUNS_DIR/$name/global_step_$EVAL_AT
        if [ "${held##*_}" -ge "$EVAL_AT" ] 2>/dev/null; then
            echo "EVAL_AT=$EVAL_AT: $name resumes from $held, past the stop; it trains on to $steps" >&2
        else  # each part is skipped where it is done already: a start-up collision starts the job again
            cmd="{ [ -f $stop/actor/trainer_state.pt ] || $(run_to $EVAL_AT); } && \
{ [ -f $JOBS/out/eval_${name}_step$EVAL_AT.json ] || $(evaluation "eval_${name}_step$EVAL_AT" "$stop"); } && $cmd"
        fi
    fi
    # the weights it resumes from are at hand already: poll waits for newer ones
    [ -n "$DRY" ] || weights_held "$name" "$held"
    QUEUE=1 start "$name" "$cmd" ;;
steps)
    name=${2:?steps NAME MODEL [key=value...]} model=${3:?steps NAME MODEL [key=value...]}
    shift 3
    cmd=$(training "/tmp/steptime/$name" model=$model total_steps=${STEPS:-2} save_freq=${STEPS:-2} "$@")
    start "$name" "$cmd && cd /tmp/steptime && tar czf $JOBS/out/$name.tgz --exclude=actor $name" ;;
ladder)
    name=${2:?ladder NAME RUN MODEL...} run=${3:?ladder NAME RUN MODEL...}
    shift 3
    [ $# -gt 0 ] || { echo "ladder: name at least one scorer MODEL (a catalogue name or a warm-start folder)" >&2
                      exit 2; }
    models=$(printf -- '--model %s ' "$@")
    start "ladder_$name" "python3 -m rescoring.ladder --run $run --model stored $models--out /tmp/ladder/$name \
        --device cuda --dtype bfloat16 --no-progress && \
        tar czf $JOBS/out/ladder_$name.tgz -C /tmp/ladder $name" ;;
audit)
    usage="audit NAME RUN VIEW TWIN STEP..."
    adir=${AUDIT_DIR:-/tmp/audit} name=${2:?$usage} run=${3:?$usage} view=${4:?$usage} twin=${5:?$usage}
    shift 5
    [ $# -gt 0 ] || { echo "audit: name at least one checkpoint STEP of $run" >&2; exit 2; }
    cmd="failed=''; " folders=""
    for step in "$@"; do  # one checkpoint at a time: each audit keeps its own steps (audit_steps.csv) to pool
        [[ "$step" =~ ^[1-9][0-9]*$ ]] || { echo "audit: a STEP is a checkpoint's training step, not '$step'" >&2
                                          exit 2; }
        folder=audit_${name}_step$step folders="$folders $folder"
        cmd+="python3 -m rescoring.audit --run $RUNS_DIR/$run --ckpt-steps $step --view $view --twin $twin \
--device ${AUDIT_DEVICE:-cuda} --dtype ${AUDIT_DTYPE:-float32} --no-swap --no-progress --out $adir/$folder \
|| failed=\"\$failed $step\"; "
    done
    start "audit_$name" "rm -rf $adir/audit_${name}_step* && mkdir -p $adir && ${cmd}\
[ -z \"\$failed\" ] || echo \"audit $name: no audit at checkpoint(s)\$failed\"; cd $adir && \
tar czf $JOBS/out/audit_$name.tgz \$(ls -d$folders 2>/dev/null) && [ -z \"\$failed\" ]" ;;
scaling)
    shift
    name=${SCALING_NAME:-verl_scaling}
    GPU=${GPU:-all} start "$name" "VERL_USE_EXTERNAL_MODULES=training.verl.plugin python3 benchmarks/verl_scaling.py \
        --games $ASSETS/games --steps ${STEPS:-4} --gpu-memory ${VLLM_MEM:-0.35} $(token_budgets) \
        --out $JOBS/out/$name --runs /tmp/scaling_runs/$name $* && \
        python3 -m figures.verl_scaling $JOBS/out/$name --out $JOBS/out/$name" ;;
verl_check)
    start verl_check "export VERL_USE_EXTERNAL_MODULES=training.verl.plugin; B=$RUNS_DIR/verl_check; \
        python3 benchmarks/verl_backend.py --games $ASSETS/games --steps ${STEPS:-2} --gpu-memory ${VLLM_MEM:-0.35} \
        $(token_budgets) --backends verl --gpus 1 --out \$B && \
        python3 -m training.verl.parity \$B/verl --step 1 --device cuda --dtype float32 --json \
        > $JOBS/out/verl_parity.json && python3 -m ocsd.records validate \$B/verl && \
        python3 -m diagnostics.report --run \$B/verl --out \$B/verl/report && \
        cd $RUNS_DIR && tar czf $JOBS/out/verl_check.tgz --exclude=actor --exclude=batches verl_check" ;;
poll)
    end=$(( T0 + ${2:-500} ))
    running() { for log in $JOBS/*.log; do [ -e "$log" ] && going "$(basename "$log" .log)" && return 0; done
                return 1; }
    while running && [ "$(date +%s)" -lt $end ]; do sleep 10; done
    for log in $JOBS/*.log; do
        [ -e "$log" ] || continue
        echo "== $(basename "$log" .log): $(status_of "$(basename "$log" .log)")"
        grep -v "Loading weights\|Writing model shards" "$log" \
            | grep -m3 -i "error\|Traceback\|Killed\|going on without it" || true  # the last: a GpuShare wait timed out
        grep -v "Loading weights\|Writing model shards" "$log" | tail -4 | cut -c1-400
    done
    for f in $RUNS_DIR/*/metrics.jsonl; do [ -e "$f" ] && echo "$f: $(wc -l < "$f") steps"; done
    set -- "${@:3}"  # the RUNs after SECONDS: only their folders and weights (a call brings back 8 files, 64 MB)
    if [ $# -gt 0 ]; then  # each RUN named: its folder without weights, and the adapter and state of its last
        for name in "$@"; do  # checkpoint that has them (a later one may be half written)
            [ -f "$RUNS_DIR/$name/run.json" ] && [ -f "$RUNS_DIR/$name/metrics.jsonl" ] || continue
            send_folder "$name" force
            weights_held "$name" "$(pack_weights "$name")"
        done
        send_outputs new  # then the jobs' outputs not sent yet (as they are now), while the call has room
    else  # the jobs' outputs not sent yet come first, while the call has room; then one run's newer weights with
        send_outputs new  # its folder, so a machine lost between calls loses only the steps since they last came
        if [ "${WEIGHTS:-1}" != 0 ] && due=$(weights_due) && [ -n "$due" ]; then  # back (records past a run's
            send_folder "$due" force  # weights are rolled back on the workstation: the folder alone keeps nothing)
            last=$(pack_weights "$due")
            if ! within 0 0; then
                rm -f "$OUT/$due.actor.tgz."*  # over what a call brings back: left for a poll that names the run
                echo "the weights of $due do not fit beside the rest: poll SECONDS $due brings them"
            else
                weights_held "$due" "$last" && echo "weights: $due $last"
            fi
        fi
        for name in $(started_runs); do send_folder "$name" changed; done  # the other runs started here
    fi
    send_outputs sent  # and those sent before once more, where the call has room left (a reply lost on the way)
    [ $# -gt 0 ] || for name in $(started_runs); do send_folder "$name" again; done  # and the runs' folders
    ls -la "$OUT"
    { pgrep -fa "training\.(evaluate|train|sft)|rescoring\." || echo "nothing running"; } | cut -c1-150
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader 2>/dev/null || true ;;
*)
    echo "usage: bash results/paper_scale_on_gpu.sh prepare DIR [SERIES] | bundle DIR | carry_runs SERIES DIR |" \
         "install DIR | code SNAP.tar | zeroshot MODEL... | sft NAME CONFIG | eval NAME CKPT |" \
         "run NAME METHOD MODEL WARM SEED | steps NAME MODEL |" \
         "ladder NAME RUN MODEL... | audit NAME RUN VIEW TWIN STEP... | scaling |" \
         "verl_check | poll SECONDS" >&2
    exit 2 ;;
esac
