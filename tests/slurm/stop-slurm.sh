#!/usr/bin/env bash
# Stop the cluster started by start-slurm.sh: each daemon by the PID it recorded in $SLURM_DIR,
# never by name (a daemon this script did not start is left alone). Idempotent; ~6 s.
# Env: SLURM_DIR (default /tmp/icl-slurm-ci), KEEP=1 keeps $SLURM_DIR (logs) afterwards.
set -uo pipefail
SLURM_DIR=${SLURM_DIR:-/tmp/icl-slurm-ci}
MARKER="# written by icl-dynamics tests/slurm/start-slurm.sh"

stop() {  # stop <pidfile>...: SIGTERM to all, wait up to 15 s for each, then SIGKILL
  local f p pids=()
  for f in "$@"; do
    [ -s "$f" ] || continue
    p=$(cat "$f"); rm -f "$f"
    case "$p" in ''|*[!0-9]*) continue ;; esac
    kill "$p" 2>/dev/null && pids+=("$p")
  done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || continue 2; sleep 0.1; done
    echo "stop-slurm: PID $p ignored SIGTERM for 15 s; SIGKILL" >&2
    kill -9 "$p" 2>/dev/null || true
  done
}
# the SLURM daemons first (they talk to munged and, through slurmdbd, to MariaDB while stopping)
stop "$SLURM_DIR/slurmd.pid" "$SLURM_DIR/slurmctld.pid" "$SLURM_DIR/slurmdbd.pid"
stop "$SLURM_DIR/mariadb.pid" "$SLURM_DIR/munged.pid"
# the configs are ours only if they carry the marker
for f in /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf; do
  [ -e "$f" ] && grep -qxF "$MARKER" "$f" && rm -f "$f"
done
[ "${KEEP:-0}" = 1 ] || rm -rf "$SLURM_DIR"
exit 0
