#!/usr/bin/env bash
# System calls, context switches and CPU per call of each server's whole
# process tree, sipvisor beside Kamailio: SIPp UAC -> server (stateful relay)
# -> SIPp UAS, all on 127.0.0.1, each server with --children UDP workers.
# System calls are counted by perf from the kernel's tracepoint, which slows
# nothing as strace does (bench/syscalls.sh says which calls; this says how
# many, unwatched); context switches are read from /proc. Counts move little
# with a shared machine's load, unlike time: they are what to compare.
#
#   bench/ctxsw.sh [--servers sipvisor,kamailio] [--rate 400] [--calls 6000]
#                  [--children 2] [--reps 1] [--transport u1|t1|tn]
#                  [--out DIR]
#
# --transport is SIPp's -t on both sides, as in run.sh: over TCP (t1, one
# connection; tn, one per call) both servers also listen on TCP with
# --children TCP workers and relay to the UAS over TCP.
#
# Without perf (apt-get install linux-perf) the system calls are left out.
# Writes DIR/summary.txt, one line per server and repetition.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=sipvisor,kamailio
rate=400
calls=6000
reps=1
CHILDREN=2
out=${BENCH_OUT:-/tmp/sipvisor-bench/ctxsw}

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(servers rate calls reps children=CHILDREN transport=TRANSPORT out)
parse_flags "$@"
need_positive rate calls reps CHILDREN
need_transport
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
perf=
if command -v perf >/dev/null && perf stat -e raw_syscalls:sys_enter -x, true 2>/dev/null; then perf=yes; fi

mkdir -p "$out"
: >"$out/summary.txt"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
case ,$servers, in *,sipvisor,*) build_sipvisor "$out" ;; esac

for ((rep = 1; rep <= reps; rep++)); do
	for server in ${servers//,/ }; do
		work=$out/$server-$rep
		mkdir -p "$work"
		start_uas "$work"
		start_server "$server" "$work"
		# Direct reads begin once admission has been open a second; the
		# warm-up also fills the heaps and the transaction tables.
		sleep 2
		run_uac "$work/warm" call "$rate" $((rate * 2)) "$UAC_PORT"
		c0=$(tree_ctxsw "$SERVER_PID") t0=$(tree_cpu_exact "$SERVER_PID")
		pp=
		if [ -n "$perf" ]; then
			perf stat -x, -e raw_syscalls:sys_enter -p "$(tree_pids "$SERVER_PID" | paste -sd,)" \
				-o "$work/perf.txt" &
			pp=$!
			BG_PIDS+=("$pp")
		fi
		run_uac "$work/run" call "$rate" "$calls" "$UAC_PORT"
		[ -z "$pp" ] || { kill -INT "$pp"; wait "$pp" || true; BG_PIDS=(); }
		c1=$(tree_ctxsw "$SERVER_PID") t1=$(tree_cpu_exact "$SERVER_PID")
		ok=$(stat_last "$work/run" 'SuccessfulCall(C)')
		sc=NA
		[ -z "$perf" ] || sc=$(awk -F, -v n="$calls" '/sys_enter/ { printf "%.2f", $1 / n }' "$work/perf.txt")
		awk -v s="$server" -v tr="$TRANSPORT" -v r="$rep" -v ok="$ok" -v n="$calls" -v sc="$sc" \
			-v c=$((c1 - c0)) -v t0="$t0" -v t1="$t1" 'BEGIN {
				printf "%-9s %s rep %d: %s of %d calls; per call %s system calls, %.2f context switches, %.3f CPU ms\n",
					s, tr, r, ok, n, sc, c / n, (t1 - t0) * 1000 / n }' | tee -a "$out/summary.txt" >&2
		stop_server
		stop_uas
	done
done
