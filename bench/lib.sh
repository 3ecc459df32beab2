# Functions shared by the benchmark scripts (run.sh, capacity.sh, burst.sh,
# tls.sh, soak.sh, profile.sh, ...): flags, ports, starting and ending the
# servers, reading their CPU; sourced, not run.
#
# Everything listens on 127.0.0.1. Every process started here is recorded by
# pid and ended by pid (with the process tree it forked) in bench_cleanup.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)
CLK_TCK=$(getconf CLK_TCK)

# Ports: below the ephemeral range, so test processes binding port 0 do not
# take them. pick_ports moves to the next base while any is in use; set
# BENCH_PORT_BASE to choose.
PORT_BASE=${BENCH_PORT_BASE:-17060}
set_ports() {
	SIP_PORT=$PORT_BASE
	TLS_PORT=$((PORT_BASE + 1))
	UAS_PORT=$((PORT_BASE + 10))
	UAC_PORT=$((PORT_BASE + 20))
	LONG_UAC_PORT=$((PORT_BASE + 21))
	HTTP_PORT=$((PORT_BASE + 30))
}
pick_ports() {
	local i p busy
	for ((i = 0; i < 20; i++)); do
		set_ports
		busy=
		for p in $SIP_PORT $TLS_PORT $UAS_PORT $UAC_PORT $LONG_UAC_PORT $HTTP_PORT; do
			port_free "$p" || busy=$p
		done
		[ -n "$busy" ] || return 0
		PORT_BASE=$((PORT_BASE + 100))
	done
	die "no free ports from ${BENCH_PORT_BASE:-17060} on (set BENCH_PORT_BASE)"
}
set_ports

SERVER_PID=
UAS_PID=
BG_PIDS=()

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Flags. A script lists the flags it takes and the variable each sets, then
# calls parse_flags "$@" after setting their defaults:
#
#   FLAGS=(servers rates reg-rates children=CHILDREN)   # --name VALUE
#   SWITCHES=(measure-capacity=measure)                 # --name, sets yes
#
# A flag's variable is its name with - as _, unless named after =. -h and
# --help, an unknown flag and a missing value go to the script's usage().
FLAGS=()
SWITCHES=()
# flag_spec LIST NAME prints the entry of NAME in the array named LIST.
flag_spec() {
	local -n list=$1
	local spec
	for spec in "${list[@]}"; do
		[ "${spec%%=*}" = "$2" ] && { printf '%s' "$spec"; return 0; }
	done
	return 1
}
# flag_var SPEC prints the variable a flag entry sets.
flag_var() {
	local v=${1#*=}
	[ "$v" != "$1" ] || v=${1//-/_}
	printf '%s' "$v"
}
parse_flags() {
	local spec
	while [ $# -gt 0 ]; do
		case $1 in -h | --help) usage ;; esac
		if [ "${1#--}" != "$1" ] && spec=$(flag_spec SWITCHES "${1#--}"); then
			printf -v "$(flag_var "$spec")" '%s' yes
			shift
			continue
		fi
		if [ "${1#--}" = "$1" ] || ! spec=$(flag_spec FLAGS "${1#--}"); then
			echo "$(basename "$0"): unknown flag $1" >&2
			usage
		fi
		[ $# -ge 2 ] || die "flag $1 needs a value (see --help)"
		printf -v "$(flag_var "$spec")" '%s' "$2"
		shift 2
	done
}
# flag_of VAR prints the flag that sets VAR, as --name.
flag_of() {
	local spec
	for spec in "${FLAGS[@]}"; do
		[ "$(flag_var "$spec")" = "$1" ] && { printf -- '--%s' "${spec%%=*}"; return; }
	done
	printf -- '--%s' "${1//_/-}"
}
# need_positive VAR... dies unless each is a positive integer.
need_positive() {
	local v
	for v in "$@"; do
		[[ ${!v} =~ ^[0-9]+$ ]] && ((${!v} > 0)) || die "$(flag_of "$v") must be a positive integer, have '${!v}'"
	done
}
# need_whole WHAT VAR... dies unless each is a whole number; WHAT names its
# unit in the message ("seconds", "bytes, a whole number (0: the default)").
need_whole() {
	local what=$1 v
	shift
	for v in "$@"; do
		[[ ${!v} =~ ^[0-9]+$ ]] || die "$(flag_of "$v") must be a whole number of $what, have '${!v}'"
	done
}

# tree_pids PID prints PID and every descendant, read from /proc/*/stat.
tree_pids() {
	# A process may end between the glob and the read: cat then fails, which
	# is no error here.
	{ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$1" '
		{
			# The command name is in parentheses and may hold spaces: the
			# fields after it start after the last ")".
			i = length($0); while (i > 0 && substr($0, i, 1) != ")") i--
			split(substr($0, i + 2), f, " ")
			parent[$1] = f[2]
		}
		END {
			keep[root] = 1; n = 1
			while (n > 0) {
				n = 0
				for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; n++ }
			}
			for (p in keep) if (p in parent) print p
		}'
}

# tree_cpu_exact PID is the CPU seconds of PID's process tree summed from its
# threads' schedstat (ns): exact where tree_cpu counts 10 ms ticks, which an
# idle tree spends few of. It counts live threads only, so it is for spans
# in which no process or thread of the tree ends.
tree_cpu_exact() {
	local p pids
	pids=$(tree_pids "$1" | tr '\n' ' ')
	[ -n "$pids" ] || { echo 0; return; }
	(for p in $pids; do cat /proc/"$p"/task/*/schedstat 2>/dev/null || true; done) |
		awk '{ n += $1 } END { printf "%.4f\n", n / 1e9 }'
}

# tree_cpu PID prints the CPU seconds (user + system) of PID's whole process
# tree: utime+stime of every live process in it, plus cutime+cstime, which
# hold the time of children already reaped.
tree_cpu() {
	local pids
	pids=$(tree_pids "$1" | tr '\n' ' ')
	[ -n "$pids" ] || { echo 0; return; }
	(for p in $pids; do cat "/proc/$p/stat" 2>/dev/null || true; done) | awk -v hz="$CLK_TCK" '
		{
			i = length($0); while (i > 0 && substr($0, i, 1) != ")") i--
			split(substr($0, i + 2), f, " ")
			# f[1] is field 3 (state): utime is field 14, so f[12].
			t += f[12] + f[13] + f[14] + f[15]
		}
		END { printf "%.2f\n", t / hz }'
}

# machine_steal prints the machine's CPU time stolen by its host and its
# whole CPU time, in ticks, from /proc/stat: on a virtual machine whose host
# runs other guests, a span with steal runs every process slower, and the
# CPU per call measured over it reads higher whichever server ran.
machine_steal() {
	awk '$1 == "cpu" { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9; exit }' /proc/stat
}

# steal_pct "STEAL0 TOTAL0" "STEAL1 TOTAL1" prints the share of the span's
# CPU time the host took, in percent.
steal_pct() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		t = y[2] - x[2]
		printf "%.1f", (t > 0) ? 100 * (y[1] - x[1]) / t : 0
	}'
}

# tree_ctxsw PID prints the context switches (voluntary and not) of every
# thread of PID's live process tree.
tree_ctxsw() {
	local p
	for p in $(tree_pids "$1"); do
		cat /proc/"$p"/task/*/status 2>/dev/null || true
	done | awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ { n += $2 } END { print n + 0 }'
}

# tree_count PID prints how many processes PID's tree has.
tree_count() { tree_pids "$1" | wc -l; }

# end_tree PID sends SIGTERM to PID, waits up to $2 seconds (default 20),
# then SIGKILLs whatever is left of the tree it had.
end_tree() {
	local pid=$1 grace=${2:-20} pids i
	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	pids=$(tree_pids "$pid" | tr '\n' ' ')
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
	wait "$pid" 2>/dev/null || true
}

bench_cleanup() {
	local p
	for p in "${BG_PIDS[@]}"; do end_tree "$p" 5; done
	end_tree "$UAS_PID" 5
	end_tree "$SERVER_PID" 20
	UAS_PID= SERVER_PID=
}

port_free() {
	! ss -Hlun "sport = :$1" 2>/dev/null | grep -q . &&
		! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

# TRANSPORT is SIPp's -t of both the UAC and the UAS: u1 (UDP, the
# default), t1 (TCP, one connection for all calls, as a trunk) or tn (TCP, a
# connection per call). Over TCP the servers listen on TCP on SIP_PORT too
# (the "#tcp# " lines of bench/sipvisor.cfg, Kamailio's WITH_TCP) and relay
# to the UAS over TCP.
TRANSPORT=${TRANSPORT:-u1}
need_transport() {
	case $TRANSPORT in u1 | t1 | tn) ;; *) die "--transport takes u1, t1 or tn, have '$TRANSPORT'" ;; esac
}
over_tcp() { [ "$TRANSPORT" = t1 ] || [ "$TRANSPORT" = tn ]; }
# sipp_transport prints SIPp's arguments for TRANSPORT: with a connection
# per call, SIPp's default bound on sockets (50,000) is above the open
# files a shell here may have.
sipp_transport() {
	printf '%s\n' -t "$TRANSPORT"
	[ "$TRANSPORT" != tn ] || printf '%s\n' -max_socket "$(($(ulimit -n) - 100))"
}

# render TEMPLATE OUT fills a config template's @NAME@ placeholders.
render() {
	local tcp=() uas=sip:127.0.0.1:$UAS_PORT
	! over_tcp || { tcp=(-e 's/^#tcp# //'); uas+=";transport=tcp"; }
	sed "${tcp[@]}" -e "s/@SIP_PORT@/$SIP_PORT/g" \
		-e "s/@TLS_PORT@/$TLS_PORT/g" \
		-e "s#@CERT_DIR@#${CERT_DIR:-}#g" \
		-e "s#@UAS@#$uas#g" \
		-e "s/@CHILDREN@/$CHILDREN/g" \
		-e "s/@HTTP_PORT@/$HTTP_PORT/g" \
		-e "s#@RUNDIR@#$2.run#g" \
		-e "s#@KAMAILIO_DB@#${KAMAILIO_DB:-$2.run/location.db}#g" \
		-e "s/@SLOW@/${SLOW_US:+usleep($SLOW_US);}/g" "$1" >"$2"
}

# build_sipvisor runs `make build` on the committed HEAD, exported to OUT/src,
# and sets SIPVISOR_BIN and SIPLOAD_BIN to its binaries,
# so edits in progress in the work tree (and rebuilds of it during a run) do
# not change what is measured. BENCH_WORKTREE=1 builds the work tree instead.
build_sipvisor() {
	local out=$1 src
	SIPVISOR_VERSION=$(git -C "$REPO_DIR" describe --always --dirty 2>/dev/null || echo dev)
	if [ "${BENCH_WORKTREE:-0}" = 1 ]; then
		src=$REPO_DIR
	else
		src=$out/src
		rm -rf "$src"
		mkdir -p "$src"
		git -C "$REPO_DIR" archive HEAD | tar -x -C "$src"
		SIPVISOR_VERSION=$(git -C "$REPO_DIR" describe --always 2>/dev/null || echo dev)
	fi
	log "make build ($SIPVISOR_VERSION, in $src)"
	make -s -C "$src" build VERSION="$SIPVISOR_VERSION" >&2
	mkdir -p "$out/bin"
	cp "$src/bin/sipvisor" "$src/bin/sipload" "$out/bin/"
	SIPVISOR_BIN=$out/bin/sipvisor
	SIPLOAD_BIN=$out/bin/sipload
}

# kamailio_location_db FILE creates FILE, an SQLite database holding
# Kamailio's version and location tables from the schema Debian ships with
# kamailio-sqlite-modules (the version row tells usrloc the table's layout),
# in WAL mode, unless FILE is there already.
KAMAILIO_SCHEMA_DIR=${KAMAILIO_SCHEMA_DIR:-/usr/share/kamailio/db_sqlite}
kamailio_location_db() {
	local db=$1 f
	[ -e "$db" ] && return 0
	command -v sqlite3 >/dev/null || die "sqlite3 not installed: run make bench-install"
	for f in standard usrloc; do
		[ -r "$KAMAILIO_SCHEMA_DIR/$f-create.sql" ] ||
			die "no $KAMAILIO_SCHEMA_DIR/$f-create.sql: run make bench-install (kamailio-sqlite-modules)"
	done
	# journal_mode is a property of the file: set here, it holds whichever
	# connection opens it, besides db_sqlite's own setting in kamailio.cfg.
	cat "$KAMAILIO_SCHEMA_DIR/standard-create.sql" "$KAMAILIO_SCHEMA_DIR/usrloc-create.sql" |
		sqlite3 "$db" >/dev/null || die "could not create $db"
	sqlite3 "$db" 'PRAGMA journal_mode=WAL;' >/dev/null || die "could not set WAL on $db"
}

# start_server NAME WORKDIR starts sipvisor or kamailio in the foreground of
# a background job and waits until it serves. Sets SERVER_PID.
# SIPVISOR_CFG and KAMAILIO_CFG name other templates than bench/sipvisor.cfg
# and bench/kamailio.cfg; KAMAILIO_TLS_CFG, a template of the tls module's
# file, rendered as RUNDIR/tls.cfg (tls.sh).
# NAME kamailio keeps registrations in memory (usrloc db_mode 0);
# kamailio-sqlite-wt writes each through to an SQLite file,
# WORKDIR/kamailio.cfg.run/location.db, before answering (db_mode 1); kamailio-sqlite-wt1 does so with one SIP
# worker (children=1), the one writer db_sqlite needs: it sets no busy
# timeout, so a write that meets another process's fails at once ("database
# is locked") and its REGISTER is answered 500; kamailio-sqlite-wb writes
# them from usrloc's timer every KAMAILIO_WB_TIMER seconds (db_mode 2;
# default 2). The file is kept across starts in the same WORKDIR, as
# sipvisor's WORKDIR/location.db. KAMAILIO_DB_DIR puts it elsewhere, as
# KAMAILIO_DB_DIR/NAME-location.db (on a tmpfs, say, where the fsync of each
# commit costs nothing).
KAMAILIO_WB_TIMER=${KAMAILIO_WB_TIMER:-2}
kamailio_db_file() { # NAME WORKDIR
	if [ -n "${KAMAILIO_DB_DIR:-}" ]; then
		echo "$(cd "$KAMAILIO_DB_DIR" && pwd)/$1-location.db"
	else
		echo "$2/kamailio.cfg.run/location.db"
	fi
}
# run_sipvisor CFG WORK starts sipvisor on CFG, logging to WORK, and waits
# until its /readyz answers; SERVER_PID is its pid.
run_sipvisor() {
	local cfg=$1 work=$2 i
	"$SIPVISOR_BIN" -f "$cfg" >"$work/sipvisor.log" 2>&1 &
	SERVER_PID=$!
	for ((i = 0; i < 300; i++)); do
		curl -sf -o /dev/null "http://127.0.0.1:$HTTP_PORT/readyz" && break
		kill -0 "$SERVER_PID" 2>/dev/null || die "sipvisor exited: $(tail -5 "$work/sipvisor.log")"
		sleep 0.1
	done
	((i < 300)) || die "sipvisor not ready in 30 s"
}

# run_kamailio CFG WORK PKG_MB [-A DEF...] starts Kamailio on CFG, logging to
# WORK, and waits until it has bound the SIP port and forked its children;
# SERVER_PID is its pid.
run_kamailio() {
	local cfg=$1 work=$2 pkg=$3 i
	shift 3
	mkdir -p "$cfg.run"
	# TLSF for both private (-x) and shared (-X) memory, as its users
	# run it under load. 1 GB shared: with 256 MB, transactions held
	# through their wait timer at 2,700 calls/s ran it out of memory and
	# every new INVITE got a 500.
	kamailio -f "$cfg" -DD -E -x tlsf -X tlsf -m 1024 -M "$pkg" "$@" >"$work/kamailio.log" 2>&1 &
	SERVER_PID=$!
	for ((i = 0; i < 300; i++)); do
		kill -0 "$SERVER_PID" 2>/dev/null || die "kamailio exited: $(tail -5 "$work/kamailio.log")"
		# Bound socket and every child forked (main + children + timers).
		if ! port_free "$SIP_PORT" && (($(tree_count "$SERVER_PID") > CHILDREN)); then break; fi
		sleep 0.1
	done
	((i < 300)) || die "kamailio not ready in 30 s"
	sleep 1
}

start_server() {
	local name=$1 work=$2 cfg i pkg defs=()
	# Only this start's config and readiness check see the change.
	[ "$name" != kamailio-sqlite-wt1 ] || local CHILDREN=1
	port_free "$SIP_PORT" || die "port $SIP_PORT is in use (set BENCH_PORT_BASE)"
	case $name in
	sipvisor)
		cfg=$work/sipvisor.cfg
		render "${SIPVISOR_CFG:-$BENCH_DIR/sipvisor.cfg}" "$cfg"
		# BENCH_SIPVISOR_SET adds global settings, one per line
		# ("queue_admission_threshold = 2"), to try one without editing.
		[ -z "${BENCH_SIPVISOR_SET:-}" ] || printf '%s\n' "$BENCH_SIPVISOR_SET" >>"$cfg"
		run_sipvisor "$cfg" "$work"
		;;
	kamailio | kamailio-sqlite-wt | kamailio-sqlite-wt1 | kamailio-sqlite-wb)
		# Absolute, as kamailio.cfg names the database file under RUNDIR.
		work=$(cd "$work" && pwd)
		cfg=$work/kamailio.cfg
		KAMAILIO_DB=$(kamailio_db_file "$name" "$work")
		render "${KAMAILIO_CFG:-$BENCH_DIR/kamailio.cfg}" "$cfg"
		mkdir -p "$cfg.run"
		case $name in
		kamailio-sqlite-wt | kamailio-sqlite-wt1) defs=(-A USRLOC_DB_MODE=1) ;;
		kamailio-sqlite-wb) defs=(-A USRLOC_DB_MODE=2 -A "USRLOC_TIMER_INTERVAL=$KAMAILIO_WB_TIMER") ;;
		esac
		# usrloc loads the file's bindings at start, and db_sqlite reads a
		# whole result into private memory: 24,000 bindings overran 16 MB,
		# 144,000 (a repetition of 2-minute REGISTER runs) 128 MB.
		pkg=16
		[ ${#defs[@]} -eq 0 ] || { kamailio_location_db "$KAMAILIO_DB"; pkg=1024; }
		! over_tcp || defs+=(-A WITH_TCP)
		[ -z "${KAMAILIO_TLS_CFG:-}" ] || render "$KAMAILIO_TLS_CFG" "$cfg.run/tls.cfg"
		# 16 MB private memory per process (1 GB with an SQLite store,
		# see above).
		run_kamailio "$cfg" "$work" "$pkg" "${defs[@]}"
		;;
	*) die "unknown server $name" ;;
	esac
	log "$name serving on 127.0.0.1:$SIP_PORT, pid $SERVER_PID, $(tree_count "$SERVER_PID") processes"
}

# server_refuse NAME WORKDIR on|off makes the running server refuse every
# new session (503 with Retry-After) or serve again: sipvisor by `ctl
# suspend` and `ctl resume`, Kamailio by its $shv(refuse) (kamailio.cfg).
server_refuse() {
	local name=$1 work=$2 what=$3
	case $name/$what in
	sipvisor/on) "$SIPVISOR_BIN" ctl -addr "http://127.0.0.1:$HTTP_PORT" suspend >/dev/null ;;
	sipvisor/off) "$SIPVISOR_BIN" ctl -addr "http://127.0.0.1:$HTTP_PORT" resume >/dev/null ;;
	kamailio*/on) kamcmd -s "unix:$work/kamailio.cfg.run/kamailio_ctl" pv.shvSet refuse int 1 >/dev/null ;;
	kamailio*/off) kamcmd -s "unix:$work/kamailio.cfg.run/kamailio_ctl" pv.shvSet refuse int 0 >/dev/null ;;
	*) die "server_refuse: unknown $name/$what" ;;
	esac || die "$name would not turn refusing $what"
}

stop_server() {
	end_tree "$SERVER_PID" 20
	SERVER_PID=
}

# start_uas WORKDIR picks free ports (call it before start_server) and starts
# SIPp as UAS (bench/uas.xml) on UAS_PORT. Sets UAS_PID.
start_uas() {
	pick_ports
	sipp -sf "$BENCH_DIR/uas.xml" -i 127.0.0.1 -p "$UAS_PORT" $(sipp_transport) -nostdin -buff_size 4194304 \
		>"$1/uas.log" 2>&1 &
	UAS_PID=$!
	sleep 0.5
	kill -0 "$UAS_PID" 2>/dev/null || die "sipp uas exited: $(tail -5 "$1/uas.log")"
}

stop_uas() {
	end_tree "$UAS_PID" 5
	UAS_PID=
}

# run_uac DIR KIND RATE COUNT PORT [EXTRA...] runs one SIPp UAC in DIR
# (KIND call: SIPp's built-in uac; register: bench/register.xml; refuse:
# SIPp's INVITE, answered 503 and acknowledged, the scenario the e2e
# refusal benchmark uses), bounded by
# SIPp's -timeout and by timeout(1). Its stat file is DIR/stat.csv and its
# per-call response times DIR/*_rtt.csv.
# settle_time_wait waits, over TCP with a connection a call (tn), until
# the connections of earlier runs have left TIME_WAIT (60 s on Linux), for
# at most 70 s. SIPp binds each call's socket to a free port of the
# ephemeral range, and the kernel's search for one slows with every port a
# closed connection still holds: after two runs of 9,000 calls back to
# back, SIPp spent 86 % of its time in bind, fell behind its own schedule
# and failed calls, whichever server it called.
settle_time_wait() {
	[ "$TRANSPORT" = tn ] || return 0
	local held i
	for ((i = 0; i < 70; i++)); do
		held=$(ss -Htan state time-wait | wc -l)
		[ "$held" -gt 3000 ] || return 0
		[ "$i" -gt 0 ] || log "waiting for $held connections in TIME_WAIT to end (SIPp's bind slows with them)"
		sleep 1
	done
}

# warn_tn_ports RATE COUNT warns, over tn, when a run would hold more ports
# than SIPp can use. SIPp binds each call's socket with SO_REUSEADDR to a
# port of the kernel's choosing, and past about a quarter of the ephemeral
# range the kernel hands it ports still in use (SIPp pull request 573;
# 9,000 calls at 300/s at the default range did pass once): with the range at
# 1024-65535, runs at 300/s failed calls on both servers (FailedTcpClosed)
# from 54 s on, 16,200 connections in, where 200/s, whose connections in
# TIME_WAIT (60 s) stay at 12,000, failed none.
warn_tn_ports() {
	[ "$TRANSPORT" = tn ] || return 0
	local lo hi held
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range || return 0
	held=$(($1 * 60))
	((held < $2)) || held=$2
	((held * 4 <= hi - lo + 1)) ||
		log "warning: $held connections at once would pass a quarter of the ephemeral ports ($lo-$hi), past which SIPp's calls over tn failed (warn_tn_ports in bench/lib.sh); widen net.ipv4.ip_local_port_range or lower the rate"
}

run_uac() {
	local dir=$1 kind=$2 rate=$3 count=$4 port=$5
	shift 5
	settle_time_wait
	warn_tn_ports "$rate" "$count"
	local scen secs limit
	case $kind in
	call) scen=(-sn uac) ;;
	register) scen=(-sf "$BENCH_DIR/register.xml") ;;
	refuse) scen=(-sf "$REPO_DIR/e2e/testdata/overload_refused_uac.xml") ;;
	*) die "unknown kind $kind" ;;
	esac
	secs=$(((count + rate - 1) / rate))
	# Open loop: the limit on calls in progress is far above what the rate
	# needs, so an overloaded server cannot slow the offered load down.
	limit=$((rate * 40 + 100))
	mkdir -p "$dir"
	(cd "$dir" && timeout -k 5 $((secs + 90)) sipp "${scen[@]}" "127.0.0.1:$SIP_PORT" \
		-i 127.0.0.1 -p "$port" $(sipp_transport) -r "$rate" -m "$count" -l "$limit" \
		-nostdin -buff_size 4194304 \
		-trace_stat -stf stat.csv -fd 1 -trace_rtt -rtt_freq 100 -trace_err \
		-timeout $((secs + 60))s -timeout_error "$@" >sipp.out 2>&1) || echo "$?" >"$dir/exit"
}

# stat_last DIR COLUMN prints COLUMN of the last row of DIR/stat.csv.
stat_last() {
	awk -F';' -v col="$2" '
		NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
		{ v = $c }
		END { print (c && v != "") ? v : "NA" }' "$1/stat.csv" 2>/dev/null || echo NA
}

# rtt_pct DIR P prints the P-th percentile (0-100) of the response times in
# milliseconds SIPp wrote to DIR/*_rtt.csv (SIPp's resolution: 1 ms).
rtt_pct() {
	local f
	f=$(ls "$1"/*_rtt.csv 2>/dev/null | head -1)
	[ -n "$f" ] || { echo NA; return; }
	tail -n +2 "$f" | cut -d';' -f2 | sort -n | awk -v p="$2" '
		{ v[NR] = $1 }
		END {
			if (NR == 0) { print "NA"; exit }
			i = int(p / 100 * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR
			print v[i]
		}'
}

# machine_info prints the facts PERFORMANCE.md quotes about the machine.
machine_info() {
	echo "nproc: $(nproc)"
	echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
	echo "kernel: $(uname -sr)"
	echo "kamailio: $(kamailio -v 2>/dev/null | head -1 | sed 's/^version: //')"
	echo "sipp: $(sipp -v 2>&1 | grep -m1 -o 'SIPp v[^ ]*' || true)"
	echo "sipvisor: ${SIPVISOR_VERSION:-unknown}"
	# The Go runtime's settings reach the supervisor and every worker.
	echo "go runtime environment: GOGC=${GOGC:-} GOMAXPROCS=${GOMAXPROCS:-} GOMEMLIMIT=${GOMEMLIMIT:-} GODEBUG=${GODEBUG:-}"
	echo "net.core.rmem_max: $(cat /proc/sys/net/core/rmem_max)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# relay_route UAS_PORT: the stateful relay script of perproc.sh and
# ctxsw.sh, every call to the UAS on 127.0.0.1:UAS_PORT.
relay_route() {
	cat <<ROUTE
route {
	if (has_totag()) {
		if (!loose_route())
			\$du = "sip:127.0.0.1:$1";
		t_relay();
		exit;
	}
	t_check_trans();
	if (is_method("INVITE")) record_route();
	\$du = "sip:127.0.0.1:$1";
	t_relay();
}
ROUTE
}
