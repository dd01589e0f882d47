#!/usr/bin/env bash
# Install the system packages agentrl uses when present: tcmalloc (libtcmalloc-minimal4: every `agentrl`
# process runs under it, agentrl/memory.py; without it, tuned glibc and slower updates), Debian's PostgreSQL
# server (the Postgres store test starts a throwaway cluster with its initdb/pg_ctl) and Debian's chromium
# (the browser test drives it with Playwright; Playwright's own browser download is not used). Idempotent:
# when all are present it does nothing. Installing needs root on Debian; otherwise it says what is missing
# and exits 0: agentrl falls back to glibc, and the tests that need the missing piece skip with a reason.
set -euo pipefail

log() { echo "extras: $*"; }

pg_bindir() {  # the newest /usr/lib/postgresql/<major>/bin holding initdb, if any
    find /usr/lib/postgresql -maxdepth 3 -name initdb -path '*/bin/*' 2>/dev/null | sort -V | tail -n 1 \
        | xargs -r dirname
}

missing=()
ls /usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4 >/dev/null 2>&1 || missing+=(libtcmalloc-minimal4)
[ -n "$(pg_bindir)" ] || command -v initdb >/dev/null || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)

if [ "${#missing[@]}" -eq 0 ]; then
    log "tcmalloc, postgresql and chromium present"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || [ ! -f /etc/debian_version ]; then
    log "missing ${missing[*]}; install them as root (apt-get install ${missing[*]}); until then agentrl uses glibc and the slow tests that need them skip"
    exit 0
fi
log "installing ${missing[*]}"
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
install "${missing[@]}" || { apt-get update -q >/dev/null && install "${missing[@]}"; } \
    || { echo "extras: apt-get install ${missing[*]} failed" >&2; exit 1; }
# Debian's postgresql package creates and starts a default cluster; the tests do not use it.
if [[ " ${missing[*]} " == *" postgresql "* ]] && command -v pg_ctlcluster >/dev/null; then
    pg_lsclusters -h 2>/dev/null | while read -r version name _; do
        pg_ctlcluster "$version" "$name" stop >/dev/null 2>&1 || true
    done
fi
log "done"
