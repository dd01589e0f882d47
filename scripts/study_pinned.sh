#!/usr/bin/env bash
# Play `agentrl study run NAME` on the code of one commit while work goes on in this checkout, so that every
# run of a study that spans sessions is played on the same code (docs/studies.md).
#
#     bash scripts/study_pinned.sh NAME COMMIT [ARGS]   # e.g. calc-chain-s4m-compare f4cd2e0
#
# ARGS go to `agentrl study run` (`--until 04:40` where COMMIT's runner has it).
#
# What it does: checks COMMIT out once into ../agentrl-study-<commit> (`git worktree add --detach`; the
# folder that holds it is $AGENTRL_STUDY_CODE_DIR when set), then
# runs the study from this checkout's folder (its studies/NAME records, runs and store stay here) with
# agentrl and the first-party env plugins imported from that worktree: PYTHONPATH names them first and
# PYTHONSAFEPATH keeps Python from putting the working folder ahead of them, in this process and in the env
# service it starts. Each run's record lists the commit it was played on (`commits`), so a mistake shows.
# What it is not: a way to pin the Python packages or the sandbox images (the venv and Docker are shared).
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: bash scripts/study_pinned.sh NAME COMMIT [ARGS for agentrl study run]" >&2
  exit 2
fi
name=$1
commit_arg=$2
shift 2
root=$(git rev-parse --show-toplevel)
commit=$(git -C "$root" rev-parse --verify "${commit_arg}^{commit}")
code=${AGENTRL_STUDY_CODE_DIR:-$(dirname "$root")}/agentrl-study-${commit:0:12}
if [[ ! -d $code ]]; then
  git -C "$root" worktree add --detach "$code" "$commit" >&2
fi
path=$code
for env in "$code"/envs/*/; do
  path=$path:${env%/}
done
cd "$root"
python=${AGENTRL_PYTHON:-$root/.venv/bin/python}
export PYTHONSAFEPATH=1 PYTHONPATH=$path
# the check that the pin holds: agentrl and the calc env must come from the worktree, or nothing runs
found=$("$python" -c 'import agentrl, agentrl_calc; print(agentrl.__file__, agentrl_calc.__file__)')
for file in $found; do
  if [[ $file != "$code"/* ]]; then
    echo "study_pinned: $file is not under $code: the pin does not hold" >&2
    exit 1
  fi
done
echo "study_pinned: $name on $commit, code from $code ($found)" >&2
exec "$python" -c \
  'import sys; from agentrl.cli.main import main; sys.argv[0] = "agentrl"; sys.exit(main())' \
  study run "$name" "$@"
