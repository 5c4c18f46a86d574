#!/usr/bin/env bash
# Start a throw-away single-node SLURM cluster on Debian 12, as root, without systemd:
# munged, MariaDB + slurmdbd (so `sacct` works, as on real clusters), slurmctld and slurmd,
# one node `localhost` in one partition `main`. Used by tests/slurm/test_slurm.py; by hand:
#
#   sudo tests/slurm/start-slurm.sh     # apt: 8-30 s on a fresh machine; then ~4 s to an idle node
#   sinfo; squeue; sacct
#   sudo tests/slurm/stop-slurm.sh      # stops every daemon by the PID recorded here
#
# Env: SLURM_DIR  state, logs, PID files and the MariaDB data (default /tmp/icl-slurm-ci; it must be
#                 reachable by the `mysql` user, so not under a 0700 directory such as pytest's tmp)
#      WITH_DBD   1 (default): MariaDB + slurmdbd, sacct works; 0: no accounting (then Snakemake
#                 needs `slurm-status-command: squeue`)
#      SKIP_APT   1: do not run apt-get (packages already installed)
# Refuses to touch a SLURM or MariaDB that it did not start: an /etc/slurm/slurm.conf without the
# marker line below, or slurmctld/slurmd ports in use, stop it with a message. Every daemon it starts
# records its PID in $SLURM_DIR/*.pid; stop-slurm.sh stops exactly those. Stop before a restart.
# Versions tested: slurm 22.05.8 (Debian 12), munge 0.5.15, MariaDB 10.11. Recipe and pitfalls:
# ../shared/notes/slurm-on-debian.md.
set -euo pipefail
SLURM_DIR=${SLURM_DIR:-/tmp/icl-slurm-ci}
WITH_DBD=${WITH_DBD:-1}
SKIP_APT=${SKIP_APT:-0}
MARKER="# written by icl-dynamics tests/slurm/start-slurm.sh"
DB_PORT=${DB_PORT:-3399}          # our private MariaDB listens on 127.0.0.1 only, on this port
export DEBIAN_FRONTEND=noninteractive

say() { echo "start-slurm: $*" >&2; }
die() { say "$*"; exit 1; }
wait_for() {  # wait_for <seconds> <command...>
  local t=$1; shift
  for _ in $(seq 1 $((t * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  say "timeout waiting for: $*"; return 1
}
port_busy() { (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

[ "$(id -u)" = 0 ] || die "must run as root"
for f in /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf; do
  if [ -e "$f" ] && ! grep -qxF "$MARKER" "$f"; then
    die "$f exists and was not written by this script; not touching a real cluster's config"
  fi
done
for p in 6817 6818 6819; do
  port_busy $p && die "port $p is in use (a SLURM daemon is running?); run stop-slurm.sh first"
done
[ "$WITH_DBD" = 1 ] && port_busy "$DB_PORT" && die "port $DB_PORT is in use; set DB_PORT"

# --- packages. Services must not start from their postinst (no systemd; we start them by hand).
if [ "$SKIP_APT" != 1 ]; then
  pkgs="munge slurmctld slurmd slurm-client"
  [ "$WITH_DBD" = 1 ] && pkgs="$pkgs slurmdbd mariadb-server"
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  t0=$SECONDS
  apt-get update -q >/dev/null || say "apt-get update failed; trying the install anyway"
  apt-get install -y -q --no-install-recommends $pkgs >/dev/null
  [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  say "packages ready ($((SECONDS - t0)) s): $pkgs"
fi

rm -rf "$SLURM_DIR"
install -d -m 755 "$SLURM_DIR" "$SLURM_DIR"/state "$SLURM_DIR"/spool "$SLURM_DIR"/log

# --- munge: reuse a running munged (not ours: no PID recorded), else start one as user munge.
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  say "munged already running; using it"
else
  [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  install -d -o munge -g munge -m 755 /run/munge            # systemd would create it
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged                      # daemonizes, writes /run/munge/munged.pid
  wait_for 10 test -s /run/munge/munged.pid
  cp /run/munge/munged.pid "$SLURM_DIR/munged.pid"
  wait_for 10 sh -c 'munge -n | unmunge'
fi

# --- MariaDB (private data dir, 127.0.0.1:$DB_PORT) + slurmdbd
acct="AccountingStorageType=accounting_storage/none"
if [ "$WITH_DBD" = 1 ]; then
  db="$SLURM_DIR/mysql" run="$SLURM_DIR/mysql-run"      # data; socket, PID file and log (owned by mysql)
  install -d -o mysql -g mysql -m 755 "$run"
  mariadb-install-db --user=mysql --datadir="$db" --skip-test-db --auth-root-authentication-method=socket \
    >"$SLURM_DIR/log/mariadb-install.log" 2>&1 || { cat "$SLURM_DIR/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  # mariadbd stays in the foreground: start it in the background and record $!
  /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$db" --socket="$run/mysql.sock" \
    --pid-file="$run/mariadbd.pid" --port="$DB_PORT" --bind-address=127.0.0.1 \
    --log-error="$run/mariadb.log" --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &
  echo $! >"$SLURM_DIR/mariadb.pid"
  wait_for 60 mysqladmin --socket="$run/mysql.sock" ping || { tail "$run/mariadb.log" >&2; die "MariaDB did not start"; }
  mysql --socket="$run/mysql.sock" -e "
    CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  cat >/etc/slurm/slurmdbd.conf <<DBD
$MARKER
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
PidFile=$SLURM_DIR/slurmdbd.pid
LogFile=$SLURM_DIR/log/slurmdbd.log
DBD
  chmod 600 /etc/slurm/slurmdbd.conf                   # slurmdbd refuses a readable conf
  /usr/sbin/slurmdbd                                   # daemonizes; PID in PidFile
  wait_for 60 port_busy 6819 || { tail "$SLURM_DIR/log/slurmdbd.log" >&2; die "slurmdbd did not start"; }
  acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819"
fi

# --- slurm.conf: the node line is what slurmd detects (so RealMemory is never too large),
# renamed to localhost so the host name does not matter.
node=$(slurmd -C | head -n1 | sed 's/^NodeName=[^ ]*/NodeName=localhost NodeAddr=127.0.0.1/')
cat >/etc/slurm/slurm.conf <<CONF
$MARKER
ClusterName=ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$acct
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# keep finished jobs visible to squeue/scontrol for 5 min (the plugin needs this for squeue status)
MinJobAge=300
# reject impossible requests at submission instead of leaving them PENDING forever
EnforcePartLimits=ALL
KillWait=5
InactiveLimit=0
Waittime=0
$node State=UNKNOWN
PartitionName=main Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF

/usr/sbin/slurmctld                 # daemonizes; PID in SlurmctldPidFile
/usr/sbin/slurmd -N localhost       # -N: node name need not equal `hostname -s`
wait_for 60 sh -c 'sinfo -h -n localhost -o %T | grep -qx idle' || { tail "$SLURM_DIR/log/slurmctld.log" "$SLURM_DIR/log/slurmd.log" >&2; die "node did not become idle"; }
if [ "$WITH_DBD" = 1 ]; then
  # slurmctld registers the cluster with slurmdbd by itself; wait until sacct answers
  wait_for 30 sacct -n -X -a || die "sacct does not answer"
fi
say "cluster up: $(sinfo -h -o '%P %D %T %C')"
