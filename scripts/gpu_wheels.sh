#!/usr/bin/env bash
# Download the wheels the GPU check installs on a machine without network (scripts/gpu_check.sh), into
# .gpu-wheels/ (git-ignored): scripts/gpu_wheels.txt for CPython 3.11-3.13 on x86_64 Linux, and the maze
# env plugin built from envs/maze. Prints the folder's size; it travels with the working tree (64 MiB limit).
#   bash scripts/gpu_wheels.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu-wheels}
PY=${PY:-.venv/bin/python}
mkdir -p "$DIR"
requirements=$(grep -v '^\s*#' scripts/gpu_wheels.txt | grep -v '^\s*$')
for version in 3.11 3.12 3.13; do
    # shellcheck disable=SC2086  # one argument per requirement
    "$PY" -m pip download --quiet --only-binary=:all: --no-deps --dest "$DIR" \
        --python-version "$version" --implementation cp --platform manylinux2014_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 $requirements
done
"$PY" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$DIR" envs/maze
echo "gpu wheels: $(ls "$DIR"/*.whl | wc -l) files, $(du -sh "$DIR" | cut -f1) in $DIR"
