#!/usr/bin/env bash
# Runs the interop suite against real Apache RocketMQ brokers on loopback:
# 5.4.0 (name server, broker+proxy, and a second broker+proxy with
# authentication) and 4.9.7 (name server and broker, no proxy).
#
#   bash interop/run.sh [command...]
#
# Steps: fetch the RocketMQ jars pinned in interop/pom.xml and
# interop/pom-v4.xml (each set in its own folder, cached outside the
# repository, retried), create a network namespace that has only `lo`, start
# in it the 5.4.0 name server and a broker with the in-process gRPC proxy
# (Local mode) and, in parallel, the 4.9.7 name server and broker, create the
# topics and groups the suite uses on both clusters, run the command
# (default: the Go interop suite) inside the same namespace, then stop every
# process by its PID and exit with the command's status.
#
# Why a namespace: the proxy's gRPC (8081), proxy remoting (8080) and broker
# HA (10912) ports always listen on every interface, whatever the config says.
# In a private namespace nothing is reachable from outside, and two runs on one
# machine cannot collide on ports.
#
# A peer that does not start fails the run loudly with the tail of its logs;
# nothing here ever skips.
#
# Environment (all optional):
#   TWINMQ_INTEROP_CACHE   jar cache dir (default ~/.cache/twinmq-interop)
#   TWINMQ_INTEROP_KEEP=1  keep the temp dir (store, logs) after the run
#   TWINMQ_INTEROP_STOP_GRACE  seconds between SIGTERM and SIGKILL (default 3)
#   MVN, JAVA              the maven and java executables to use
set -euo pipefail

# ---------------------------------------------------------------- settings --

ROCKETMQ_VERSION=5.4.0 # keep in step with interop/pom.xml
CLUSTER=DefaultCluster
BROKER_NAME=broker-a
NAMESRV_PORT=9876
BROKER_PORT=10911
GRPC_PORT=8081
PROXY_REMOTING_PORT=8080

# The second peer: a broker+proxy of its own cluster, registered with the
# same name server, with authentication on (ACL 2.0). Only the signed-send
# case uses it (TWINMQ_INTEROP_AUTH_ENDPOINT). The user is a test fixture of
# a peer reachable only inside the namespace.
AUTH_CLUSTER=AuthCluster
AUTH_BROKER_NAME=broker-auth
AUTH_BROKER_PORT=10921 # its HA port is 10922, its fast port 10919
AUTH_GRPC_PORT=8091
AUTH_PROXY_REMOTING_PORT=8090
AUTH_ACCESS_KEY=twinmq
AUTH_SECRET_KEY=twinmq-interop-secret
AUTH_TOPICS=(interop_auth:NORMAL)

# The 4.x peer: RocketMQ 4.9.7's name server and broker, a cluster of its own
# behind a name server of its own, spoken to over remoting only (4.x has no
# proxy). Only the remoting suite uses it (TWINMQ_INTEROP_V4_NAMESRV).
V4_VERSION=4.9.7 # keep in step with interop/pom-v4.xml
V4_CLUSTER=V4Cluster
V4_BROKER_NAME=broker-v4
V4_NAMESRV_PORT=9877
V4_BROKER_PORT=10931 # its HA port is 10932, its fast port 10929

# The remoting suite's topics (internal/remoting/remotingsuite), created on
# both clusters, as NAME:MESSAGE_TYPE. The type matters to the 5.x proxy
# only: the broker does not check it on remoting sends, and 4.9.7 has no
# such attribute (its topics are created without one).
REMOTING_TOPICS=(
	remoting_normal:NORMAL
	remoting_batch:NORMAL
	remoting_fifo:FIFO
	remoting_txn:TRANSACTION
	remoting_delay:DELAY
)

# Topics the suite uses, as NAME:MESSAGE_TYPE (NORMAL, FIFO, DELAY,
# TRANSACTION or MIXED). The proxy checks the message type against it.
INTEROP_TOPICS=(
	interop_normal:NORMAL
	interop_fifo:FIFO
	interop_delay:DELAY
	interop_tx:TRANSACTION
	# The shared wire suite (internal/wiresuite: Topics). Its dead-letter
	# topics are created up front: the proxy caches a missing route, so one
	# asked for before the broker made the topic would stay missing.
	wire_send:NORMAL
	wire_batch:NORMAL
	wire_ack:NORMAL
	wire_redeliver:NORMAL
	wire_nack:NORMAL
	wire_dlq:NORMAL
	wire_fwd:NORMAL
	wire_filter:NORMAL
	%DLQ%wire_dlq_group:NORMAL
	%DLQ%wire_fwd_group:NORMAL
	# The SDK producer and consumer tests and the produce benchmark
	# (internal/interop: producer_test.go, consumer_test.go,
	# produce_bench_test.go). interop_sdk_a and interop_sdk_b are the
	# physical topics of the two cluster entries of one logic topic.
	interop_sdk_a:NORMAL
	interop_sdk_b:NORMAL
	interop_consume:NORMAL
	interop_bench:NORMAL
	"${REMOTING_TOPICS[@]}"
	# The send race (internal/interop: race_bench_test.go): twinmq and the
	# Java client (interop/java) send to it over remoting, through the name
	# server.
	interop_race:NORMAL
)

# Consumer groups, as NAME:ORDERLY[:RETRY_MAX_TIMES]. ORDERLY true makes a
# FIFO group. RETRY_MAX_TIMES bounds redeliveries before the dead-letter queue
# (the proxy reports max_attempts = RETRY_MAX_TIMES + 1); the broker default
# of 16 would make a dead-letter test take far too long, hence the small value
# on interop_dlq_group.
INTEROP_GROUPS=(
	interop_group:false
	interop_fifo_group:true
	interop_dlq_group:false:2
	# The shared wire suite (internal/wiresuite: Groups); wire_dlq_group
	# dead-letters after 2 deliveries (wiresuite.DLQMaxAttempts).
	wire_batch_group:false
	wire_ack_group:false
	wire_redeliver_group:false
	wire_nack_group:false
	wire_dlq_group:false:1
	wire_fwd_group:false
	wire_filter_group:false
	wire_bad_group:false
	wire_dlq_reader:false
	# The SDK tests: the producer test's reader and the consumer's group.
	interop_sdk_check:false
	interop_consume_group:false
)

# JVM flags: small fixed heaps so the peer fits next to the tests on a small
# machine; -Duser.home moves the logs into the run's temp dir.
NAMESRV_JVM=(-server -Xms256m -Xmx512m -XX:+UseG1GC -XX:MaxDirectMemorySize=256m)
BROKER_JVM=(-server -Xms256m -Xmx512m -XX:+UseG1GC -XX:MaxDirectMemorySize=512m)
# The admin tool is a short-lived client: C1 only and a serial GC start fast.
ADMIN_JVM=(-Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1)
# 4.9.7 runs on Java 17 with G1 as is (no --add-opens needed for what the
# suite does); its heaps are smaller still.
V4_NAMESRV_JVM=(-server -Xms128m -Xmx256m -XX:+UseG1GC -XX:MaxDirectMemorySize=128m)
V4_BROKER_JVM=(-server -Xms128m -Xmx256m -XX:+UseG1GC -XX:MaxDirectMemorySize=256m)

NAMESRV_START_TIMEOUT=90
BROKER_START_TIMEOUT=180
STOP_GRACE=${TWINMQ_INTEROP_STOP_GRACE:-3}
DOWNLOAD_ATTEMPTS=3

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
POM=$ROOT/interop/pom.xml
V4_POM=$ROOT/interop/pom-v4.xml
CONF_DIR=$ROOT/interop/conf
CACHE_DIR=${TWINMQ_INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/twinmq-interop}
LIB_DIR=$CACHE_DIR/rocketmq-$ROCKETMQ_VERSION/lib
V4_LIB_DIR=$CACHE_DIR/rocketmq-$V4_VERSION/lib
MVN=${MVN:-mvn}
JAVA=${JAVA:-java}

if (($# > 0)); then
	TEST_CMD=("$@")
else
	TEST_CMD=(go test -count=1 -tags interop ./internal/interop/...)
fi

# ----------------------------------------------------------------- helpers --

log() { printf '[interop %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	log "FAIL: $*"
	exit 1
}
now_ms() { date +%s%3N; }
# phase NAME START_MS prints how long a phase took, and keeps it for the summary.
PHASES=()
phase() {
	local ms=$(($(now_ms) - $2))
	PHASES+=("$(printf '%-10s %6d.%03d s' "$1" $((ms / 1000)) $((ms % 1000)))")
	log "phase $1 took $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s"
}

# alive PID: running and not a zombie (our own children stay zombies until
# reaped, and `kill -0` still succeeds on them).
alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ -n $st && $st != Z* ]]
}

rss_mib() {
	local kb
	kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null) || kb=
	if [[ -n $kb ]]; then echo "$((kb / 1024)) MiB"; else echo "n/a"; fi
}

# cpu_s PID: the CPU time (user + system) a process has used so far.
cpu_s() {
	local ticks hz
	hz=$(getconf CLK_TCK 2>/dev/null) || hz=100
	ticks=$(awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null) || ticks=
	if [[ -n $ticks ]]; then echo "$((ticks / hz)).$(printf '%02d' $((ticks % hz * 100 / hz))) s CPU"; else echo "n/a"; fi
}

render() { # render TEMPLATE OUT
	sed -e "s|@CLUSTER@|$CLUSTER|g" \
		-e "s|@BROKER_NAME@|$BROKER_NAME|g" \
		-e "s|@NAMESRV_PORT@|$NAMESRV_PORT|g" \
		-e "s|@BROKER_PORT@|$BROKER_PORT|g" \
		-e "s|@GRPC_PORT@|$GRPC_PORT|g" \
		-e "s|@PROXY_REMOTING_PORT@|$PROXY_REMOTING_PORT|g" \
		-e "s|@STORE_DIR@|${STORE_DIR:-$WORK/store}|g" \
		-e "s|@ACCESS_KEY@|$AUTH_ACCESS_KEY|g" \
		-e "s|@SECRET_KEY@|$AUTH_SECRET_KEY|g" \
		"$1" >"$2"
	if grep -q '@[A-Z_]*@' "$2"; then die "unrendered placeholder in $2"; fi
}

# ------------------------------------------------------- process tracking --

NS_PID=
NAMESRV_PID=
BROKER_PID=
AUTH_BROKER_PID=
V4_NAMESRV_PID=
V4_BROKER_PID=
ADMIN_PIDS=()
ADMIN_PID=
STAGING=
WORK=
NS_ENTER=()

# show_logs NAME STDOUT_FILE LOGFILE...: the tail of a peer's logs, for a
# failure that must be diagnosable from the CI output alone.
show_logs() {
	local name=$1 f
	shift
	for f in "$@"; do
		[[ -s $f ]] || continue
		printf '\n----- %s: tail of %s -----\n' "$name" "${f#"$WORK"/}" >&2
		tail -n 40 "$f" >&2
	done
}

# stop_pids PID...: SIGTERM, a short grace, then SIGKILL. The proxy needs about
# 20 s for a graceful stop; its data is thrown away anyway, so it gets a few
# seconds only.
stop_pids() {
	local pid left deadline
	local -a live=()
	for pid in "$@"; do
		if [[ -n $pid ]] && alive "$pid"; then live+=("$pid"); fi
	done
	((${#live[@]})) || return 0
	kill -TERM "${live[@]}" 2>/dev/null || true
	deadline=$(($(now_ms) + STOP_GRACE * 1000))
	while (($(now_ms) < deadline)); do
		left=0
		for pid in "${live[@]}"; do
			if alive "$pid"; then left=1; fi
		done
		((left)) || break
		sleep 0.1
	done
	for pid in "${live[@]}"; do
		if alive "$pid"; then
			log "pid $pid still up after ${STOP_GRACE}s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	for pid in "${live[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# stop_now PID: for a process whose result is already in: no grace.
stop_now() {
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	local t0
	t0=$(now_ms)
	stop_pids "${ADMIN_PIDS[@]}" "$BROKER_PID" "$AUTH_BROKER_PID" "$V4_BROKER_PID" "$NAMESRV_PID" "$V4_NAMESRV_PID"
	stop_pids "$NS_PID"
	if [[ -n $STAGING ]]; then rm -rf "$STAGING"; fi
	if [[ -n $WORK ]]; then
		if [[ ${TWINMQ_INTEROP_KEEP:-0} == 1 ]]; then
			log "kept $WORK"
		else
			rm -rf "$WORK"
		fi
	fi
	phase stop "$t0"
	if ((${#PHASES[@]})); then
		log "timings:"
		printf '    %s\n' "${PHASES[@]}" >&2
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------- 1. download --

for tool in "$JAVA" "$MVN" unshare nsenter; do
	command -v "$tool" >/dev/null || die "$tool not found (needs Java 17+, Maven, util-linux)"
done

# fetch_lib POM LIB_DIR VERSION JAR...: copies the pom's jars and their
# dependencies into LIB_DIR unless the folder already holds that pom's set.
# The stamp holds the pom's hash so editing the pom refreshes the jar set.
fetch_lib() {
	local pom=$1 lib=$2 version=$3 sum stamp ok attempt jar
	shift 3
	sum=$(sha256sum "$pom" | cut -d' ' -f1)
	stamp=$lib/.pom-sha256
	if [[ -f $stamp && $(cat "$stamp") == "$sum" ]]; then
		log "RocketMQ $version jars cached in $lib"
		return 0
	fi
	log "fetching RocketMQ $version jars into $lib"
	mkdir -p "$CACHE_DIR"
	STAGING=$(mktemp -d "$CACHE_DIR/.lib.XXXXXX")
	ok=0
	for attempt in $(seq 1 "$DOWNLOAD_ATTEMPTS"); do
		if "$MVN" -q -B -f "$pom" dependency:copy-dependencies \
			-DincludeScope=runtime -DoutputDirectory="$STAGING"; then
			ok=1
			break
		fi
		log "download attempt $attempt/$DOWNLOAD_ATTEMPTS failed"
		if ((attempt < DOWNLOAD_ATTEMPTS)); then sleep $((attempt * 5)); fi
	done
	if ((!ok)); then
		rm -rf "$STAGING"
		die "could not download RocketMQ $version after $DOWNLOAD_ATTEMPTS attempts"
	fi
	for jar in "$@"; do
		[[ -f $STAGING/rocketmq-$jar-$version.jar ]] ||
			die "rocketmq-$jar-$version.jar missing after download"
	done
	echo "$sum" >"$STAGING/.pom-sha256"
	# Swap in the complete set only, so an interrupted download is never used.
	rm -rf "$lib"
	mkdir -p "$(dirname "$lib")"
	mv "$STAGING" "$lib"
	STAGING=
}

RUN_START=$(now_ms)
t0=$(now_ms)
fetch_lib "$POM" "$LIB_DIR" "$ROCKETMQ_VERSION" namesrv broker proxy tools
fetch_lib "$V4_POM" "$V4_LIB_DIR" "$V4_VERSION" namesrv broker tools
CP="$LIB_DIR/*"
V4_CP="$V4_LIB_DIR/*"

# The Java side of the send race (interop/java, BenchmarkInteropRemotingRace):
# built with Maven now, while there is network, into the cache; rebuilt when
# its pom or sources change. The benchmark reads the java executable and the
# program's classpath from TWINMQ_INTEROP_JAVA and TWINMQ_INTEROP_RACE_CP.
RACE_SRC=$ROOT/interop/java
RACE_DIR=$CACHE_DIR/race-java-$ROCKETMQ_VERSION
RACE_SUM=$(cd "$RACE_SRC" && find pom.xml src -type f -print0 | LC_ALL=C sort -z |
	xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [[ -f $RACE_DIR/.src-sha256 && $(cat "$RACE_DIR/.src-sha256") == "$RACE_SUM" ]]; then
	log "race program cached in $RACE_DIR"
else
	log "building the race program into $RACE_DIR"
	mkdir -p "$CACHE_DIR"
	STAGING=$(mktemp -d "$CACHE_DIR/.race.XXXXXX")
	ok=0
	for attempt in $(seq 1 "$DOWNLOAD_ATTEMPTS"); do
		if "$MVN" -q -B -Dstyle.color=never -f "$RACE_SRC/pom.xml" package dependency:copy-dependencies \
			-Drace.build.dir="$STAGING/build" -DincludeScope=runtime -DoutputDirectory="$STAGING/lib"; then
			ok=1
			break
		fi
		log "race build attempt $attempt/$DOWNLOAD_ATTEMPTS failed"
		if ((attempt < DOWNLOAD_ATTEMPTS)); then sleep $((attempt * 5)); fi
	done
	if ((!ok)); then
		rm -rf "$STAGING"
		die "could not build the race program (interop/java)"
	fi
	[[ -f $STAGING/build/twinmq-race-java.jar ]] || die "twinmq-race-java.jar missing after the build"
	echo "$RACE_SUM" >"$STAGING/.src-sha256"
	rm -rf "$RACE_DIR"
	mv "$STAGING" "$RACE_DIR"
	STAGING=
fi
export TWINMQ_INTEROP_JAVA
TWINMQ_INTEROP_JAVA=$(command -v "$JAVA")
export TWINMQ_INTEROP_RACE_CP="$RACE_DIR/build/twinmq-race-java.jar:$RACE_DIR/lib/*"
phase download "$t0"

# The test command runs without network access: fetch Go modules now. A
# failure here is only a warning; the command itself reports what is missing.
if [[ ${TEST_CMD[0]} == go ]]; then
	(cd "$ROOT" && go mod download) || log "warning: go mod download failed"
fi

# ------------------------------------------------------------ 2. namespace --

t0=$(now_ms)
WORK=$(mktemp -d -t twinmq-interop.XXXXXX)
mkdir -p "$WORK/namesrv" "$WORK/broker" "$WORK/broker-auth" "$WORK/admin/conf" "$WORK/store" "$WORK/store-auth" "$WORK/conf" \
	"$WORK/namesrv-v4/conf" "$WORK/broker-v4/conf" "$WORK/admin-v4/conf" "$WORK/store-v4"
# The admin tool signs its calls with this user (tools.yml under its
# rocketmq.home.dir); the peer without authentication ignores the signature.
printf 'accessKey: %s\nsecretKey: %s\n' "$AUTH_ACCESS_KEY" "$AUTH_SECRET_KEY" >"$WORK/admin/conf/tools.yml"

# If this script is killed outright (SIGKILL, no trap runs), the peers and
# the namespace holder must not outlive it: where setpriv can set a parent
# death signal, every long-lived child is started with one. Its parent is
# this shell, because unshare, nsenter and setpriv all exec their command.
ORPHAN_GUARD=()
if command -v setpriv >/dev/null && setpriv --pdeathsig KILL true 2>/dev/null; then
	ORPHAN_GUARD=(setpriv --pdeathsig KILL --)
fi

# unshare execs the holder, so $! is a process that lives in the namespace.
# As root a plain network namespace is enough; otherwise a user namespace
# that maps us to root inside it (needs unprivileged user namespaces).
if ((EUID == 0)); then
	unshare --net "${ORPHAN_GUARD[@]}" sleep infinity &
	NS_PID=$!
	NS_ENTER=(nsenter -t "$NS_PID" -n --)
else
	unshare --user --map-root-user --net "${ORPHAN_GUARD[@]}" sleep infinity &
	NS_PID=$!
	NS_ENTER=(nsenter -t "$NS_PID" -U -n --preserve-credentials --)
fi
# Wait until the holder has really switched namespaces.
for _ in $(seq 1 50); do
	alive "$NS_PID" || die "could not create a network namespace (unshare failed)"
	[[ $(readlink "/proc/$NS_PID/ns/net") != $(readlink /proc/self/ns/net) ]] && break
	sleep 0.02
done
[[ $(readlink "/proc/$NS_PID/ns/net") != $(readlink /proc/self/ns/net) ]] ||
	die "namespace holder $NS_PID is still in the host network namespace"
if command -v ip >/dev/null; then
	"${NS_ENTER[@]}" ip link set lo up
elif command -v ifconfig >/dev/null; then
	"${NS_ENTER[@]}" ifconfig lo up
else
	die "neither ip nor ifconfig found to bring up lo in the namespace"
fi
if command -v ip >/dev/null; then
	log "namespace holder pid $NS_PID, interfaces: $("${NS_ENTER[@]}" ip -o link show | awk -F': ' '{printf "%s ", $2}')"
fi
phase namespace "$t0"

render "$CONF_DIR/namesrv.properties.tmpl" "$WORK/conf/namesrv.properties"
render "$CONF_DIR/broker.conf.tmpl" "$WORK/conf/broker.conf"
render "$CONF_DIR/rmq-proxy.json.tmpl" "$WORK/conf/rmq-proxy.json"
# The auth peer: the same broker template with its own names, ports and
# store, plus the authentication settings.
CLUSTER=$AUTH_CLUSTER BROKER_NAME=$AUTH_BROKER_NAME BROKER_PORT=$AUTH_BROKER_PORT \
	GRPC_PORT=$AUTH_GRPC_PORT PROXY_REMOTING_PORT=$AUTH_PROXY_REMOTING_PORT STORE_DIR=$WORK/store-auth \
	render "$CONF_DIR/broker.conf.tmpl" "$WORK/conf/broker-auth.conf"
render "$CONF_DIR/auth.conf.tmpl" "$WORK/conf/auth.conf"
cat "$WORK/conf/auth.conf" >>"$WORK/conf/broker-auth.conf"
CLUSTER=$AUTH_CLUSTER GRPC_PORT=$AUTH_GRPC_PORT PROXY_REMOTING_PORT=$AUTH_PROXY_REMOTING_PORT \
	render "$CONF_DIR/rmq-proxy-auth.json.tmpl" "$WORK/conf/rmq-proxy-auth.json"
# The 4.x peer: its own templates; 4.9.7's name server, broker and admin
# tool will not start without logback configs under their rocketmq.home.dir.
NAMESRV_PORT=$V4_NAMESRV_PORT render "$CONF_DIR/v4/namesrv.properties.tmpl" "$WORK/conf/namesrv-v4.properties"
CLUSTER=$V4_CLUSTER BROKER_NAME=$V4_BROKER_NAME NAMESRV_PORT=$V4_NAMESRV_PORT BROKER_PORT=$V4_BROKER_PORT \
	STORE_DIR=$WORK/store-v4 render "$CONF_DIR/v4/broker.conf.tmpl" "$WORK/conf/broker-v4.conf"
cp "$CONF_DIR/v4/logback_namesrv.xml" "$WORK/namesrv-v4/conf/"
cp "$CONF_DIR/v4/logback_broker.xml" "$WORK/broker-v4/conf/"
cp "$CONF_DIR/v4/logback_tools.xml" "$WORK/admin-v4/conf/"

# Each process gets its own home, so the log tails printed on a failure
# belong to the process that failed (RocketMQ logs under user.home).
NAMESRV_HOME=(-Duser.home="$WORK/namesrv" -Drocketmq.home.dir="$WORK/namesrv")
BROKER_HOME=(-Duser.home="$WORK/broker" -Drocketmq.home.dir="$WORK/broker")
ADMIN_HOME=(-Duser.home="$WORK/admin" -Drocketmq.home.dir="$WORK/admin")
NAMESRV_LOGS=$WORK/namesrv/logs/rocketmqlogs
BROKER_LOGS=$WORK/broker/logs/rocketmqlogs
AUTH_HOME=(-Duser.home="$WORK/broker-auth" -Drocketmq.home.dir="$WORK/broker-auth")
AUTH_LOGS=$WORK/broker-auth/logs/rocketmqlogs
V4_NAMESRV_HOME=(-Duser.home="$WORK/namesrv-v4" -Drocketmq.home.dir="$WORK/namesrv-v4")
V4_BROKER_HOME=(-Duser.home="$WORK/broker-v4" -Drocketmq.home.dir="$WORK/broker-v4")
V4_ADMIN_HOME=(-Duser.home="$WORK/admin-v4" -Drocketmq.home.dir="$WORK/admin-v4")
V4_NAMESRV_LOGS=$WORK/namesrv-v4/logs/rocketmqlogs
V4_BROKER_LOGS=$WORK/broker-v4/logs/rocketmqlogs

# wait_ready NAME PID TIMEOUT PATTERN STDOUT LOGFILE...
wait_ready() {
	local name=$1 pid=$2 timeout=$3 pattern=$4 out=$5
	shift 5
	local deadline=$(($(now_ms) + timeout * 1000))
	while (($(now_ms) < deadline)); do
		if grep -q "$pattern" "$out" 2>/dev/null; then return 0; fi
		if ! alive "$pid"; then
			show_logs "$name" "$out" "$@"
			die "$name (pid $pid) exited before it was ready"
		fi
		sleep 0.1
	done
	show_logs "$name" "$out" "$@"
	die "$name (pid $pid) not ready after ${timeout}s (waited for '$pattern')"
}

# --------------------------------------------------------------- 3. peers --

# Both name servers start together, then both brokers (each broker registers
# with its name server at start, and only every 30 s after, so it starts
# once its name server is up); the 4.x peer's start overlaps the 5.x one's.
t0=$(now_ms)
"${NS_ENTER[@]}" "${ORPHAN_GUARD[@]}" "$JAVA" "${NAMESRV_JVM[@]}" "${NAMESRV_HOME[@]}" -cp "$CP" \
	org.apache.rocketmq.namesrv.NamesrvStartup -c "$WORK/conf/namesrv.properties" \
	>"$WORK/namesrv.out" 2>&1 &
NAMESRV_PID=$!
"${NS_ENTER[@]}" "${ORPHAN_GUARD[@]}" "$JAVA" "${V4_NAMESRV_JVM[@]}" "${V4_NAMESRV_HOME[@]}" -cp "$V4_CP" \
	org.apache.rocketmq.namesrv.NamesrvStartup -c "$WORK/conf/namesrv-v4.properties" \
	>"$WORK/namesrv-v4.out" 2>&1 &
V4_NAMESRV_PID=$!
wait_ready namesrv "$NAMESRV_PID" "$NAMESRV_START_TIMEOUT" 'boot success' \
	"$WORK/namesrv.out" "$NAMESRV_LOGS/namesrv.log"
wait_ready namesrv-v4 "$V4_NAMESRV_PID" "$NAMESRV_START_TIMEOUT" 'boot success' \
	"$WORK/namesrv-v4.out" "$V4_NAMESRV_LOGS/namesrv.log"
phase namesrv "$t0"

t0=$(now_ms)
"${NS_ENTER[@]}" "${ORPHAN_GUARD[@]}" "$JAVA" "${BROKER_JVM[@]}" "${BROKER_HOME[@]}" -cp "$CP" \
	org.apache.rocketmq.proxy.ProxyStartup -pm Local \
	-pc "$WORK/conf/rmq-proxy.json" -bc "$WORK/conf/broker.conf" \
	-n "127.0.0.1:$NAMESRV_PORT" \
	>"$WORK/broker.out" 2>&1 &
BROKER_PID=$!
V4_T0=$(now_ms)
"${NS_ENTER[@]}" "${ORPHAN_GUARD[@]}" "$JAVA" "${V4_BROKER_JVM[@]}" "${V4_BROKER_HOME[@]}" -cp "$V4_CP" \
	org.apache.rocketmq.broker.BrokerStartup -c "$WORK/conf/broker-v4.conf" \
	-n "127.0.0.1:$V4_NAMESRV_PORT" \
	>"$WORK/broker-v4.out" 2>&1 &
V4_BROKER_PID=$!
wait_ready broker+proxy "$BROKER_PID" "$BROKER_START_TIMEOUT" 'startup successfully' \
	"$WORK/broker.out" "$BROKER_LOGS/proxy.log" "$BROKER_LOGS/broker.log"
phase broker "$t0"
log "peer up: namesrv pid $NAMESRV_PID ($(rss_mib "$NAMESRV_PID")), broker+proxy pid $BROKER_PID ($(rss_mib "$BROKER_PID"))"

t0=$(now_ms)
"${NS_ENTER[@]}" "${ORPHAN_GUARD[@]}" "$JAVA" "${BROKER_JVM[@]}" "${AUTH_HOME[@]}" -cp "$CP" \
	org.apache.rocketmq.proxy.ProxyStartup -pm Local \
	-pc "$WORK/conf/rmq-proxy-auth.json" -bc "$WORK/conf/broker-auth.conf" \
	-n "127.0.0.1:$NAMESRV_PORT" \
	>"$WORK/broker-auth.out" 2>&1 &
AUTH_BROKER_PID=$!
wait_ready auth-broker+proxy "$AUTH_BROKER_PID" "$BROKER_START_TIMEOUT" 'startup successfully' \
	"$WORK/broker-auth.out" "$AUTH_LOGS/proxy.log" "$AUTH_LOGS/broker.log"
phase auth-peer "$t0"
log "auth peer up: broker+proxy pid $AUTH_BROKER_PID ($(rss_mib "$AUTH_BROKER_PID"))"

# The 4.x broker started with the 5.x one; by now it is usually up. The
# phase is the wait left after the auth peer, its ready time is logged.
t0=$(now_ms)
wait_ready broker-v4 "$V4_BROKER_PID" "$BROKER_START_TIMEOUT" 'boot success' \
	"$WORK/broker-v4.out" "$V4_BROKER_LOGS/broker.log"
phase v4-peer "$t0"
# When the 4.x broker got ready: the last write to its stdout is its
# "boot success" line.
v4_ready_ms=$(($(stat -c '%.3Y' "$WORK/broker-v4.out" | tr -d .) - V4_T0))
log "4.x peer up: broker ready $((v4_ready_ms / 1000)).$(printf '%03d' $((v4_ready_ms % 1000))) s after its start;" \
	"namesrv pid $V4_NAMESRV_PID ($(rss_mib "$V4_NAMESRV_PID"), $(cpu_s "$V4_NAMESRV_PID")), broker pid $V4_BROKER_PID ($(rss_mib "$V4_BROKER_PID"), $(cpu_s "$V4_BROKER_PID"))"

# -------------------------------------------------------------- 4. admin --

# admin_start OUT ARGS...: starts one MQAdminStartup command in the
# background as a direct child (so ADMIN_PID is the JVM itself and cleanup can
# stop it by PID). admin_ok OUT: the tool exits 0 even when the command
# failed, so success is read from its output.
# A command that starts with "v4" runs 4.9.7's tool against the 4.x
# name server.
admin_start() {
	local out=$1
	shift
	if [[ $1 == v4 ]]; then
		shift
		"${NS_ENTER[@]}" "${ORPHAN_GUARD[@]}" "$JAVA" "${ADMIN_JVM[@]}" "${V4_ADMIN_HOME[@]}" -cp "$V4_CP" \
			org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "127.0.0.1:$V4_NAMESRV_PORT" \
			>"$out" 2>&1 &
	else
		"${NS_ENTER[@]}" "${ORPHAN_GUARD[@]}" "$JAVA" "${ADMIN_JVM[@]}" "${ADMIN_HOME[@]}" -cp "$CP" \
			org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "127.0.0.1:$NAMESRV_PORT" \
			>"$out" 2>&1 &
	fi
	ADMIN_PID=$!
}
admin_ok() { grep -q 'success\.' "$1"; }

t0=$(now_ms)
ADMIN_CMDS=()
for spec in "${INTEROP_TOPICS[@]}"; do
	name=${spec%%:*}
	type=${spec#*:}
	ADMIN_CMDS+=("updateTopic -c $CLUSTER -t $name -a +message.type=$type")
done
for spec in "${AUTH_TOPICS[@]}"; do
	ADMIN_CMDS+=("updateTopic -c $AUTH_CLUSTER -t ${spec%%:*} -a +message.type=${spec#*:}")
done
for spec in "${INTEROP_GROUPS[@]}"; do
	IFS=: read -r name orderly retries <<<"$spec"
	cmd="updateSubGroup -c $CLUSTER -g $name -o $orderly"
	if [[ -n ${retries:-} ]]; then cmd+=" -r $retries"; fi
	ADMIN_CMDS+=("$cmd")
done
# 4.9.7's updateTopic has no attributes (-a): its topics have no type.
for spec in "${REMOTING_TOPICS[@]}"; do
	ADMIN_CMDS+=("v4 updateTopic -c $V4_CLUSTER -t ${spec%%:*}")
done

# All commands run at once, each retried: right after start the broker may
# not be registered with the name server yet ("Make sure the specified
# clusterName exists"). An admin JVM has done its work when it prints
# "success" (about a second in) but then idles for several seconds joining
# its client threads, so it is stopped as soon as the line is there (one
# line per master broker; this peer has one).
ADMIN_ATTEMPTS=20
declare -A admin_try=()
pending=("${!ADMIN_CMDS[@]}")
ADMIN_PIDS=()
while ((${#pending[@]} + ${#ADMIN_PIDS[@]} > 0)); do
	for i in "${pending[@]}"; do
		admin_try[$i]=$((${admin_try[$i]:-0} + 1))
		read -ra args <<<"${ADMIN_CMDS[i]}"
		admin_start "$WORK/admin-$i.out" "${args[@]}"
		ADMIN_PIDS[i]=$ADMIN_PID
	done
	pending=()
	sleep 0.2
	for i in "${!ADMIN_PIDS[@]}"; do
		pid=${ADMIN_PIDS[i]}
		if admin_ok "$WORK/admin-$i.out"; then
			stop_now "$pid"
			unset "ADMIN_PIDS[i]"
			log "admin ${ADMIN_CMDS[i]}"
		elif ! alive "$pid"; then
			wait "$pid" 2>/dev/null || true
			unset "ADMIN_PIDS[i]"
			if ((${admin_try[$i]} >= ADMIN_ATTEMPTS)); then
				show_logs admin "$WORK/admin-$i.out"
				die "admin ${ADMIN_CMDS[i]} failed $ADMIN_ATTEMPTS times"
			fi
			pending+=("$i")
		fi
	done
	if ((${#pending[@]})); then sleep 1; fi
done
phase admin "$t0"

# --------------------------------------------------------------- 5. tests --

t0=$(now_ms)
log "running inside the namespace: ${TEST_CMD[*]}"
set +e
(cd "$ROOT" && "${NS_ENTER[@]}" env \
	TWINMQ_INTEROP_ENDPOINT="127.0.0.1:$GRPC_PORT" \
	TWINMQ_INTEROP_NAMESRV="127.0.0.1:$NAMESRV_PORT" \
	TWINMQ_INTEROP_CLUSTER="$CLUSTER" \
	TWINMQ_INTEROP_V4_NAMESRV="127.0.0.1:$V4_NAMESRV_PORT" \
	TWINMQ_INTEROP_V4_CLUSTER="$V4_CLUSTER" \
	TWINMQ_INTEROP_AUTH_ENDPOINT="127.0.0.1:$AUTH_GRPC_PORT" \
	TWINMQ_INTEROP_ACCESS_KEY="$AUTH_ACCESS_KEY" \
	TWINMQ_INTEROP_SECRET_KEY="$AUTH_SECRET_KEY" \
	"${TEST_CMD[@]}")
status=$?
set -e
phase tests "$t0"

# Both peers must have survived the suite: a crash during it is a failure of
# the run even if the command did not notice.
for p in "namesrv:$NAMESRV_PID" "broker+proxy:$BROKER_PID" "broker-auth:$AUTH_BROKER_PID" \
	"namesrv-v4:$V4_NAMESRV_PID" "broker-v4:$V4_BROKER_PID"; do
	if ! alive "${p#*:}"; then
		show_logs "${p%%:*}" "$WORK/${p%%[:+]*}.out"
		die "${p%%:*} (pid ${p#*:}) died during the tests"
	fi
done
log "after tests: namesrv $(rss_mib "$NAMESRV_PID") $(cpu_s "$NAMESRV_PID"), broker+proxy $(rss_mib "$BROKER_PID") $(cpu_s "$BROKER_PID")," \
	"auth broker+proxy $(rss_mib "$AUTH_BROKER_PID") $(cpu_s "$AUTH_BROKER_PID")," \
	"namesrv-v4 $(rss_mib "$V4_NAMESRV_PID") $(cpu_s "$V4_NAMESRV_PID"), broker-v4 $(rss_mib "$V4_BROKER_PID") $(cpu_s "$V4_BROKER_PID")"
ms=$(($(now_ms) - RUN_START))
log "command exited with status $status; $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s before shutdown"
if ((status != 0)); then
	show_logs broker+proxy "$BROKER_LOGS/proxy.log" "$BROKER_LOGS/broker.log"
	show_logs broker-v4 "$V4_BROKER_LOGS/broker.log"
fi
exit "$status"
