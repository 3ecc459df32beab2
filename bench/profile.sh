#!/usr/bin/env bash
# CPU profile of a server's whole process tree under a fixed SIPp call load,
# taken with perf (Debian linux-perf) at the kernel's view, so time spent in
# system calls and in the Go runtime shows beside the SIP code.
#
#   bench/profile.sh [--server sipvisor|kamailio] [--kind call|register|refuse|idle]
#                    [--rate 500] [--secs 20] [--warmup 0] [--freq 999]
#                    [--bindings 0] [--suspended no] [--children N]
#                    [--transport u1|t1|tn] [--out DIR]
#
# --transport is SIPp's -t on both sides, as in run.sh and ctxsw.sh: over TCP
# (t1, one connection; tn, one per call) the server also listens on TCP with
# --children TCP workers and relays to the UAS over TCP.
#
# --kind refuse has the server refuse every new session (as run.sh
# --refuse-rates does) and offers INVITEs that are answered 503 and
# acknowledged.
#
# --kind idle offers nothing and counts per second instead of per call: what
# the server costs waiting (its timers, its supervisor's rounds).
#
# --suspended yes (with --kind idle) has the server refuse every new session
# first, as --kind refuse does: what a suspended server costs waiting.
#
# --bindings N (with --kind idle, sipvisor) fills its location store with N
# live bindings before the idle count: what a registrar of that size costs
# doing nothing.
#
# --warmup S offers the load S seconds before the recording and the counts
# start, so that they see the server at its steady state: Kamailio's first
# 30 s at 1,000 calls/s cost it twice its steady CPU per call.
#
# Writes DIR/perf.data, DIR/summary.txt (CPU and context switches per call,
# for the tree and for each process),
# DIR/report.txt (symbols by self time), DIR/children.txt (by time including
# callees) and DIR/split.txt (self time in the kernel, the Go runtime or
# libc, and the program).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

server=sipvisor
kind=call
rate=500
secs=20
warmup=0
bindings=0
suspended=no
freq=999
CHILDREN=$(nproc)
out=${BENCH_OUT:-/tmp/sipvisor-bench/profile}

usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(server kind rate secs warmup bindings suspended freq children=CHILDREN transport=TRANSPORT out)
parse_flags "$@"
need_transport
need_whole seconds warmup
[[ $bindings =~ ^[0-9]+$ ]] || die "--bindings must be a whole number, have '$bindings'"
((bindings == 0)) || { [ "$kind" = idle ] && [ "$server" = sipvisor ]; } || die "--bindings is for --kind idle with sipvisor"
need_positive rate secs freq CHILDREN
case $kind in call | register | refuse | idle) ;; *) die "--kind must be call, register, refuse or idle, have '$kind'" ;; esac
case $suspended in yes | no) ;; *) die "--suspended must be yes or no, have '$suspended'" ;; esac
[ "$suspended" = no ] || [ "$kind" = idle ] || die "--suspended is for --kind idle"
command -v perf >/dev/null || die "perf not installed (apt-get install -y linux-perf)"
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"

# proc_snapshot PID: one line per process of the tree: pid, role, CPU
# nanoseconds of all its threads (schedstat: exact where utime+stime counts
# in ticks of 10 ms, which an idle process spends few of), context switches
# of all its threads.
proc_snapshot() {
	local p role
	for p in $(tree_pids "$1"); do
		role=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^SIPVISOR_GROUP=//p' || true)
		[ -n "$role" ] || { [ "$p" = "$1" ] && role=main || role=child; }
		printf '%s %s %s %s\n' "$p" "$role" \
			"$(cat /proc/"$p"/task/*/schedstat 2>/dev/null | awk '{ n += $1 } END { printf "%.0f", n }')" \
			"$(cat /proc/"$p"/task/*/status 2>/dev/null | awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ { n += $2 } END { print n + 0 }')"
	done
}

mkdir -p "$out"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
[ "$server" != sipvisor ] || build_sipvisor "$out"
machine_info >"$out/machine.txt"
work=$out/$server
mkdir -p "$work"
start_uas "$work"
start_server "$server" "$work"
# An idle server is measured once its start is over: the workers' first
# reports, the supervisor's first cycles.
if ((bindings > 0)); then
	# The server made the table at start; each binding lives an hour.
	log "adding $bindings bindings to $work/location.db"
	sqlite3 "$work/location.db" ".timeout 10000" "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $bindings)
		INSERT INTO location (aor, contact, expires, call_id, cseq, received, proto, user_agent)
		SELECT 'sip:u' || i || '@127.0.0.1', '<sip:u' || i || '@127.0.0.1:5060>', (unixepoch() + 3600) * 1000000000,
			'idle-' || i, 1, '', 'udp', 'profile.sh' FROM n;" >/dev/null ||
		die "could not add the bindings to $work/location.db"
fi
[ "$kind" != idle ] || sleep 10
{ [ "$kind" != refuse ] && [ "$suspended" = no ]; } || server_refuse "$server" "$work" on
pids=$(tree_pids "$SERVER_PID" | paste -sd,)
# With a warm-up the load starts first, for the warm-up and the recording,
# and the calls counted are those completed from the end of the warm-up on.
ok0=0 uac=
if [ "$kind" != idle ] && ((warmup > 0)); then
	log "SIPp offers $rate ${kind}s/s to $server; the recording starts in ${warmup}s"
	extra=()
	[ "$kind" != call ] || extra=(-d 0)
	run_uac "$work/$kind" "$kind" "$rate" $((rate * (warmup + secs))) "$UAC_PORT" "${extra[@]}" &
	uac=$!
	BG_PIDS+=("$uac")
	sleep "$warmup"
	ok0=$(stat_last "$work/$kind" 'SuccessfulCall(C)')
	[[ $ok0 =~ ^[0-9]+$ ]] || ok0=0
fi
if [ "$kind" = idle ]; then
	log "perf record on $server ($pids) while idle for ${secs}s"
else
	log "perf record on $server ($pids) while SIPp offers $rate ${kind}s/s for ${secs}s"
fi
c0=$(tree_cpu "$SERVER_PID")
x0=$(tree_ctxsw "$SERVER_PID")
proc_snapshot "$SERVER_PID" >"$out/procs.before"
perf record -q -g -F "$freq" -p "$pids" -o "$out/perf.data" -- sleep $((secs + 2)) 2>"$out/perf-record.log" &
perf_pid=$!
BG_PIDS+=("$perf_pid")
sleep 1
if [ -n "$uac" ]; then
	wait "$uac" || true
else
	# A REGISTER takes no call time; -d 0 is only for the call scenario.
	case $kind in
	call) run_uac "$work/$kind" "$kind" "$rate" $((rate * secs)) "$UAC_PORT" -d 0 ;;
	register | refuse) run_uac "$work/$kind" "$kind" "$rate" $((rate * secs)) "$UAC_PORT" ;;
	idle) sleep "$secs" ;;
	esac
fi
wait "$perf_pid" || die "perf record failed: $(tail -3 "$out/perf-record.log")"
BG_PIDS=()
c1=$(tree_cpu "$SERVER_PID")
x1=$(tree_ctxsw "$SERVER_PID")
proc_snapshot "$SERVER_PID" >"$out/procs.after"
# Idle figures are per second: ok counts seconds, unit names them.
unit=$kind
if [ "$kind" = idle ]; then
	# The record spans secs+2; the counters, the same.
	# The total from the processes' exact counters, not the ticks.
	ok=$((secs + 2)) unit=s
	awk -v n="$ok" -v s="$server" '
		NR == FNR { cpu[$1] = $3; sw[$1] = $4; next }
		($1 in cpu) { c += $3 - cpu[$1]; x += $4 - sw[$1] }
		END { printf "%s idle for %d s: %.4f CPU s (%.2f ms per s), %d context switches (%.1f per s)\n", s, n, c / 1e9, c / 1e6 / n, x, x / n }
	' "$out/procs.before" "$out/procs.after" | tee "$out/summary.txt" >&2
else
	ok=$(($(stat_last "$work/$kind" 'SuccessfulCall(C)') - ok0))
	awk -v a="$c0" -v b="$c1" -v xa="$x0" -v xb="$x1" -v ok="$ok" -v s="$server" -v r="$rate" -v k="$kind" 'BEGIN {
		printf "%s at %s %ss/s: %d %ss, %.2f CPU s (%.3f ms per %s), %d context switches (%.1f per %s)\n", s, r, k, ok, k, b - a, (b - a) / ok * 1000, k, xb - xa, (xb - xa) / ok, k
	}' | tee "$out/summary.txt" >&2
fi
# Per process: which one the CPU and the switches belong to.
awk -v ok="$ok" -v k="$unit" '
	NR == FNR { cpu[$1] = $3; sw[$1] = $4; next }
	($1 in cpu) {
		printf "%-8s %-28s %8.3f ms/%s %6.1f switches/%s\n", $1, $2, ($3 - cpu[$1]) / 1e6 / ok, k, ($4 - sw[$1]) / ok, k
	}' "$out/procs.before" "$out/procs.after" | tee -a "$out/summary.txt" >&2

# Self time by symbol, and time including callees (what a function and
# everything it called cost).
perf report -i "$out/perf.data" --no-children --stdio --sort sym -g none --percent-limit 0.5 2>/dev/null |
	grep -v '^#' | grep -v '^$' >"$out/report.txt"
perf report -i "$out/perf.data" --children --stdio --sort sym -g none --percent-limit 2 2>/dev/null |
	grep -v '^#' | grep -v '^$' >"$out/children.txt"
# Self time split three ways: the kernel ([k] symbols), the Go runtime or
# libc, and everything else (the program's own code). Go's runtime is also
# its internal/runtime packages, the syscall package's entry, and the
# assembly helpers it names without a package (aeshashbody, memeqbody).
perf report -i "$out/perf.data" --no-children --stdio --sort comm,sym -g none 2>/dev/null |
	awk '
		/^ *[0-9.]+%/ {
			p = $1; sub("%", "", p)
			comm = $2
			if ($0 ~ /\[k\]/) where = "kernel"
			else if ($0 ~ /runtime\.|internal\/runtime\/|\[\.\] syscall\.|\[\.\] [a-z]+body$|\[\.\] (__|_dl|malloc|free|mem|str|pthread|epoll|futex)/) where = "runtime/libc"
			else where = "program"
			by[comm "\t" where] += p; tot[where] += p; all += p
		}
		END {
			for (k in tot) printf "%6.1f%%\t%s\n", tot[k], k | "sort -rn"
			close("sort -rn")
			print "by process:"
			for (k in by) printf "%6.1f%%\t%s\n", by[k], k | "sort -rn"
			close("sort -rn")
			printf "%6.1f%%\tof the samples classified\n", all
		}' >"$out/split.txt"
log "wrote $out/summary.txt, report.txt, children.txt and split.txt"
cat "$out/split.txt"
head -25 "$out/report.txt"
