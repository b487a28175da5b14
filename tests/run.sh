#!/usr/bin/env bash
# The whole test suite, from a fresh machine of this kind: installs what the tests need
# (tests/setup.sh: idempotent, quick when done), then runs them. Extra arguments go to
# `cargo nextest run` (e.g. -E 'test(/^verl::/)').
set -euo pipefail
cd "$(dirname "$0")/.."
tests/setup.sh
exec cargo nextest run "$@"
