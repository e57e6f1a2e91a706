# shellcheck shell=bash
# peer.sh -- what FAKE_SLURM_PEER=1 adds to start-fake-cluster.sh and stop-fake-cluster.sh:
# a SECOND fake cluster, Slurm's own scheduler as a site would run it (the "peer" that
# JPU-Share is compared with), beside the default one and sharing nothing with it but munged
# and MariaDB. Sourced by both scripts (never run on its own); the default cluster never
# reads this file, so its start is as fast as without it.
#
#   own config dir   /etc/slurm-peer (every command and daemon gets SLURM_CONF from it)
#   own root         /var/lib/slurm-peer (state, spool, logs, pid files, fake /dev)
#   ClusterName      fakepeer;  ports: slurmctld 6827, slurmd 6828, nodes 17101-17104,
#                    slurmdbd 6829
#   nodes            node-a..d with the default cluster's shapes (same names, CPUs, GPUs)
#   cgroups          none (the default cluster's slurmd own /sys/fs/cgroup/*/slurm_node-*)
#   slurmdbd         on MariaDB 127.0.0.1:3306 (root, empty password, creates database
#                    slurm_peer_acct and user slurmpeer); AccountingStorageEnforce=
#                    associations,limits,qos, so a job needs an account it belongs to
#   priority         priority/multifactor, fair-share only (PriorityWeightFairshare=100000,
#                    every other weight 0: ties go by submission), no decay
#                    (PriorityDecayHalfLife=0, PriorityUsageResetPeriod=NONE), recomputed
#                    every minute (PriorityCalcPeriod=1, Slurm's minimum); usage is the
#                    billing TRES = GPU-seconds x the tier's TFLOPS (TRESBillingWeights), so
#                    a lab's Slurm usage is JPU-Share's TFLOP-s
#   scheduler        sched/backfill, bf_interval=1, bf_resolution=1, bf_continue
#
# Accounts (one per lab) are the driver's business (`jpushare slurm-peer run` adds the labs
# of its trace with sacctmgr); `root` has the default account `root`, which is what a
# JPU-Share service in front of this cluster submits under.

PEER_CLUSTER=fakepeer
PEER_CTLD_PORT=6827
PEER_SLURMD_PORT=6828
PEER_NODE_PORT_BASE=17100
PEER_DBD_PORT=6829
PEER_DB=slurm_peer_acct
PEER_DB_USER=slurmpeer
PEER_MYSQL=(mysql -uroot -h127.0.0.1 -P3306)   # peer_mariadb may switch to the socket
# TFLOPS of examples/cluster.yaml's tiers (the fake GPUs): Slurm bills GPU-seconds by them.
PEER_BILLING='CPU=0,Mem=0,GRES/gpu:rtx3080ti=34.1,GRES/gpu:rtx4090=82.6,GRES/gpu:rtx5090=104.8'

peer_defaults() {  # the settings both scripts derive from FAKE_SLURM_PEER=1
  R=${FAKE_SLURM_ROOT:-/var/lib/slurm-peer}
  ETC=${FAKE_SLURM_ETC:-/etc/slurm-peer}
  export SLURM_CONF=$ETC/slurm.conf
}

peer_install() {  # slurmdbd and its MySQL plugin, by the project's apt-get, when missing
  if command -v slurmdbd >/dev/null && compgen -G '/usr/lib/*/slurm-wlm/accounting_storage_mysql.so' >/dev/null; then
    return 0
  fi
  [ "$INSTALL" = no ] && die "slurmdbd not installed and FAKE_SLURM_INSTALL=no"
  command -v apt-get >/dev/null || die "slurmdbd not installed and no apt-get: install slurmdbd yourself"
  log "installing slurmdbd slurm-wlm-mysql-plugin (Debian slurm-wlm 22.05)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends slurmdbd slurm-wlm-mysql-plugin >/dev/null \
    || die "apt-get install slurmdbd failed"
  log "installed slurmdbd after $(elapsed)s"
}

peer_accounting() {  # slurm.conf's accounting and priority lines (the default: none)
  cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$PEER_DBD_PORT
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu,gres/gpu:rtx3080ti,gres/gpu:rtx4090,gres/gpu:rtx5090
PriorityType=priority/multifactor
PriorityDecayHalfLife=0
PriorityUsageResetPeriod=NONE
PriorityCalcPeriod=1
PriorityWeightFairshare=100000
PriorityWeightAge=0
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityWeightQOS=0
PriorityWeightAssoc=0
EOF
}

peer_dbd_conf() {  # slurmdbd.conf, 0600 (it holds the database password)
  local pass_file=$R/dbd.pass
  [ -s "$pass_file" ] || { head -c 18 /dev/urandom | base64 | tr -dc A-Za-z0-9 > "$pass_file"; }
  chmod 0600 "$pass_file"
  PEER_DB_PASS=$(cat "$pass_file")
  umask 077
  cat > "$ETC/slurmdbd.conf" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdPort=$PEER_DBD_PORT
SlurmUser=root
PidFile=$R/run/slurmdbd.pid
LogFile=$R/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=$PEER_DB_USER
StoragePass=$PEER_DB_PASS
StorageLoc=$PEER_DB
EOF
  umask 022
  chmod 0600 "$ETC/slurmdbd.conf"
}

peer_mariadb() {  # MariaDB answering as root: the running one, else start (install) it
  local how
  for how in tcp socket; do
    [ "$how" = socket ] && PEER_MYSQL=(mysql -uroot)   # Debian's root: unix_socket auth
    "${PEER_MYSQL[@]}" -e 'select 1' >/dev/null 2>&1 && return 0
  done
  if ! command -v mariadbd >/dev/null && ! command -v mysqld >/dev/null; then
    [ "$INSTALL" = no ] && { log "no MariaDB and FAKE_SLURM_INSTALL=no"; return 1; }
    log "installing mariadb-server"
    apt-get update -qq || { log "apt-get update failed"; return 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      mariadb-server mariadb-client >/dev/null || { log "apt-get install mariadb-server failed"; return 1; }
  fi
  log "starting MariaDB"
  service mariadb start >/dev/null 2>&1 || /etc/init.d/mariadb start >/dev/null 2>&1 || true
  wait_for "$TIMEOUT" "${PEER_MYSQL[@]}" -e 'select 1' \
    || { log "MariaDB does not answer as root (tried 127.0.0.1:3306 and the socket)"; return 1; }
}

peer_database() {  # the database and its user, made by MariaDB's root
  peer_mariadb || return 1
  if [ "$CLEAN" = 1 ]; then
    log "FAKE_SLURM_CLEAN=1: dropping database $PEER_DB"
    "${PEER_MYSQL[@]}" -e "DROP DATABASE IF EXISTS $PEER_DB" || return 1
  fi
  "${PEER_MYSQL[@]}" <<EOF || return 1
CREATE DATABASE IF NOT EXISTS $PEER_DB;
CREATE USER IF NOT EXISTS '$PEER_DB_USER'@'localhost' IDENTIFIED BY '$PEER_DB_PASS';
CREATE USER IF NOT EXISTS '$PEER_DB_USER'@'127.0.0.1' IDENTIFIED BY '$PEER_DB_PASS';
ALTER USER '$PEER_DB_USER'@'localhost' IDENTIFIED BY '$PEER_DB_PASS';
ALTER USER '$PEER_DB_USER'@'127.0.0.1' IDENTIFIED BY '$PEER_DB_PASS';
GRANT ALL ON $PEER_DB.* TO '$PEER_DB_USER'@'localhost';
GRANT ALL ON $PEER_DB.* TO '$PEER_DB_USER'@'127.0.0.1';
EOF
}

peer_dbd_up() { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }

peer_start_dbd() {  # slurmdbd, then the cluster in its database (before slurmctld registers)
  peer_database || return 1
  slurmdbd </dev/null >/dev/null 2>&1 || { log "slurmdbd failed to start"; return 1; }
  wait_for "$TIMEOUT" peer_dbd_up || { log "slurmdbd not answering sacctmgr"; return 1; }
  if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$PEER_CLUSTER"; then
    sacctmgr -i add cluster "$PEER_CLUSTER" >/dev/null || { log "sacctmgr add cluster failed"; return 1; }
  fi
  log "slurmdbd up (pid $(cat "$R/run/slurmdbd.pid" 2>/dev/null)), cluster $PEER_CLUSTER registered"
}

peer_stop_dbd() {  # for stop-fake-cluster.sh, after slurmctld
  local p
  p=$(pid_of "$R/run/slurmdbd.pid" slurmdbd) && stop_pids "slurmdbd:$p"
}

peer_purge() {  # for stop-fake-cluster.sh --purge: the database and its user too
  "${PEER_MYSQL[@]}" -e 'select 1' >/dev/null 2>&1 || PEER_MYSQL=(mysql -uroot)
  "${PEER_MYSQL[@]}" -e "DROP DATABASE IF EXISTS $PEER_DB; DROP USER IF EXISTS '$PEER_DB_USER'@'localhost'; DROP USER IF EXISTS '$PEER_DB_USER'@'127.0.0.1'" \
    >/dev/null 2>&1 || log "could not drop database $PEER_DB"
  rm -f "$ETC/slurmdbd.conf"
}
