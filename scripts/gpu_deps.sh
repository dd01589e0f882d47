#!/usr/bin/env bash
# Install the wheels of scripts/gpu_wheels.sh that this Python lacks into a folder of their own (no network,
# no dependency resolution, never torch or transformers): what scripts/gpu_check.sh puts on PYTHONPATH.
#   PY=python3 bash scripts/gpu_deps.sh WHEELS DEPS
set -euo pipefail
WHEELS=${1:?usage: scripts/gpu_deps.sh WHEELS DEPS}
DEPS=${2:?usage: scripts/gpu_deps.sh WHEELS DEPS}
PY=${PY:-python3}
mkdir -p "$DEPS"

# the distributions among the wheels that this Python does not have yet (never torch or transformers)
missing_text=$("$PY" - "$WHEELS" <<'PYTHON'
import importlib.metadata as metadata
import pathlib
import sys

names = {wheel.name.split("-")[0].replace("_", "-").lower() for wheel in pathlib.Path(sys.argv[1]).glob("*.whl")}
for name in sorted(names - {"torch", "transformers"}):
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        print(name)
PYTHON
)
read -r -a missing <<< "$(echo $missing_text)"
echo "gpu deps: installing ${#missing[@]} wheels from $WHEELS into $DEPS: ${missing[*]}"
[ ${#missing[@]} -gt 0 ] || exit 0
if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$WHEELS" \
        --target "$DEPS" --no-deps "${missing[@]}"
else  # no pip: a wheel is a zip of what goes on the import path
    "$PY" - "$WHEELS" "$DEPS" "${missing[@]}" <<'PYTHON'
import pathlib
import sys
import zipfile

from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

wheels, target = pathlib.Path(sys.argv[1]), sys.argv[2]
supported = set(sys_tags())
for name in sys.argv[3:]:
    fits = [
        wheel
        for wheel in sorted(wheels.glob("*.whl"))
        if canonicalize_name(parse_wheel_filename(wheel.name)[0]) == canonicalize_name(name)
        and set(parse_wheel_filename(wheel.name)[3]) & supported
    ]
    if not fits:
        sys.exit(f"no wheel of {name} in {wheels} fits this Python")
    zipfile.ZipFile(fits[0]).extractall(target)
PYTHON
fi
