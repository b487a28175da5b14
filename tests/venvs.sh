#!/usr/bin/env bash
# The Python environments the tests use, in target/ (idempotent; `cargo nextest run` calls
# this through the test harness, .ci/run calls it up front):
#   target/venv-olah   the olah HF mirror (pinned), in its own venv: it pins its own deps
#   target/venv-py     what verl's side reads our output with: pyarrow, datasets, ...;
#                      hydra-core: Hydra's own verdict on overrides and its override parser
set -euo pipefail
cd "$(dirname "$0")/.."
make_venv() {
    local name=$1; shift
    local dir="target/venv-$name"
    local wanted
    wanted=$(printf '%s\n' "$@")
    if [ -f "$dir/.argus-ready" ]; then
        [ "$(cat "$dir/.argus-ready")" = "$wanted" ] && return 0
        # A venv made from an older list: add what is missing (others may be using it).
        echo "updating $dir: $*" >&2
        "$dir/bin/pip" install -q "$@"
    else
        echo "creating $dir: $*" >&2
        rm -rf "$dir"
        python3 -m venv "$dir"
        "$dir/bin/pip" install -q "$@"
    fi
    printf '%s\n' "$wanted" > "$dir/.argus-ready"
}
PY_PACKAGES=(pyarrow pandas huggingface_hub transformers datasets hydra-core)
mkdir -p target
case "${1:-all}" in
    olah) make_venv olah "olah==0.5.4" ;;
    py) make_venv py "${PY_PACKAGES[@]}" ;;
    all) make_venv olah "olah==0.5.4"; make_venv py "${PY_PACKAGES[@]}" ;;
esac
