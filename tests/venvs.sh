#!/usr/bin/env bash
# The Python environments the tests use, in target/ (idempotent; `cargo nextest run` calls
# this through the test harness, .ci/run calls it up front):
#   target/venv-olah   the olah HF mirror (pinned), in its own venv: it pins its own deps
#   target/venv-py     what verl's side reads our output with: pyarrow, datasets, ...,
#                      and hydra-core (Hydra's own verdicts; a Hydra app in a test job)
set -euo pipefail
cd "$(dirname "$0")/.."
make_venv() {
    local name=$1; shift
    local dir="target/venv-$name"
    # Ready when it holds exactly these requirements; a venv made for fewer gets the rest.
    if [ -f "$dir/.argus-ready" ] && [ "$(cat "$dir/.argus-ready")" = "$(printf '%s\n' "$@")" ]; then
        return 0
    fi
    echo "preparing $dir: $*" >&2
    [ -x "$dir/bin/pip" ] || { rm -rf "$dir"; python3 -m venv "$dir"; }
    "$dir/bin/pip" install -q "$@"
    printf '%s\n' "$@" > "$dir/.argus-ready"
}
mkdir -p target
case "${1:-all}" in
    olah) make_venv olah "olah==0.5.4" ;;
    py) make_venv py pyarrow pandas huggingface_hub transformers datasets hydra-core ;;
    all) make_venv olah "olah==0.5.4"; make_venv py pyarrow pandas huggingface_hub transformers datasets hydra-core ;;
esac
