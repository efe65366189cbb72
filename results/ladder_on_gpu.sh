#!/bin/bash
# The model-size ladder (python -m rescoring.ladder) on a GPU machine without network, from the repository root.
#
# here:  bash scripts/gpu_stack.sh models DIR smollm2 qwen2.5-coder-0.5b qwen2.5-coder-1.5b --part-size 54M
#            (the Qwen GGUFs installed with python -m ocsd.replay.catalog fetch NAME --keep-gguf), then copy DIR to
#            the GPU machine part by part, and the run folders to score (their global_step_N/replay/ and run.json)
# there: bash results/ladder_on_gpu.sh install PARTS_DIR      checks the parts, converts the models into $CACHE
#        bash results/ladder_on_gpu.sh bench RUN              re-scoring speed of the three models on RUN's
#                                                             checkpoints (benchmarks/rescore_models.py), into $OUT
#        bash results/ladder_on_gpu.sh start RUNS_DIR         the ladder of every run folder in RUNS_DIR, in the
#                                                             background (setsid), into $LADDER
#        bash results/ladder_on_gpu.sh poll SECONDS           wait up to SECONDS for it; when it is done, pack
#                                                             $LADDER (without the scorers' weights) into $OUT
# Settings: CACHE (/tmp/ocsd_cache), LADDER (/tmp/ladder), MODELS (stored smollm2 qwen2.5-coder-0.5b
# qwen2.5-coder-1.5b), DTYPE (bfloat16).
set -e
export PYTHONUNBUFFERED=1
CACHE=${CACHE:-/tmp/ocsd_cache}
LADDER=${LADDER:-/tmp/ladder}
MODELS=${MODELS:-stored smollm2 qwen2.5-coder-0.5b qwen2.5-coder-1.5b}
DTYPE=${DTYPE:-bfloat16}
export OCSD_CACHE=$CACHE PYTHONPATH=$CACHE/site:$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

case "${1:-}" in
    install)
        T0=$(date +%s)
        PY=python3 bash scripts/gpu_stack.sh models-install "${2:?install PARTS_DIR}" "$CACHE"
        echo "installed in $(( $(date +%s) - T0 )) s"
        ;;
    bench)
        args=()
        for m in $MODELS; do [ "$m" = stored ] || args+=(--model "$m"); done
        python3 benchmarks/rescore_models.py --run "${2:?bench RUN}" "${args[@]}" --device cuda --dtype "$DTYPE" \
            --json "$OUT/rescore_models.json" 2>&1 | grep -v "Loading weights"
        nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
        ;;
    start)
        args=()
        for r in "${2:?start RUNS_DIR}"/*/; do args+=(--run "${r%/}"); done
        for m in $MODELS; do args+=(--model "$m"); done
        mkdir -p "$LADDER"
        setsid nohup python3 -m rescoring.ladder "${args[@]}" --out "$LADDER" --device cuda --dtype "$DTYPE" \
            --no-progress > "$LADDER/log.txt" 2>&1 < /dev/null &
        echo $! > "$LADDER/pid"
        echo "started the ladder of ${#args[@]} arguments: ${args[*]}"
        ;;
    poll)
        end=$(( $(date +%s) + ${2:-540} ))
        while kill -0 "$(cat "$LADDER/pid")" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 10; done
        grep -v "Loading weights" "$LADDER/log.txt" | tail -25
        if kill -0 "$(cat "$LADDER/pid")" 2>/dev/null; then
            echo "still running; done so far: $(ls -d "$LADDER"/*/*/ 2>/dev/null | wc -l) re-scored run folders"
        else
            tar -czf - -C "$(dirname "$LADDER")" "$(basename "$LADDER")" | split -b 15M - "$OUT/ladder.tgz."
            ls -l "$OUT"
        fi
        ;;
    *) echo "usage: bash results/ladder_on_gpu.sh install PARTS_DIR | bench RUN | start RUNS_DIR | poll SECONDS" >&2
       exit 2 ;;
esac
