#!/usr/bin/env bash
# System calls per call of each process of a server's tree, counted with
# strace -c while SIPp offers a steady load: on a virtual machine, where a
# system call and a wake-up cost more than the SIP work, the counts say
# where two servers' CPU per call differs.
#
#   bench/syscalls.sh [--server sipvisor|kamailio] [--kind call|register|refuse]
#                     [--rate 200] [--secs 10] [--children N]
#                     [--transport u1|t1|tn] [--out DIR]
#
# --transport is SIPp's -t on both sides, as in run.sh and ctxsw.sh.
#
# --kind refuse has the server refuse every new session (as run.sh
# --refuse-rates does) and counts per refused INVITE, its 503 and ACK.
#
# strace slows every system call it sees, so the server runs slower while
# counted, and its batches may differ from an unwatched run's; the counts
# per call, not the time, are what to read. Writes DIR/strace.PID (strace's
# table per process) and DIR/summary.txt (per call, by process and call).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

server=sipvisor
kind=call
rate=200
secs=10
CHILDREN=$(nproc)
out=${BENCH_OUT:-/tmp/sipvisor-bench/syscalls}

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(server kind rate secs children=CHILDREN transport=TRANSPORT out)
parse_flags "$@"
need_transport
need_positive rate secs CHILDREN
case $kind in call | register | refuse) ;; *) die "--kind must be call, register or refuse, have '$kind'" ;; esac
command -v strace >/dev/null || die "strace not installed (apt-get install -y strace)"
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"

mkdir -p "$out"
rm -f "$out"/strace.*
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
[ "$server" != sipvisor ] || build_sipvisor "$out"
work=$out/$server
mkdir -p "$work"
start_uas "$work"
start_server "$server" "$work"
# Direct reads begin once admission has been open a second.
sleep 2
[ "$kind" != refuse ] || server_refuse "$server" "$work" on
pids=$(tree_pids "$SERVER_PID")
# SIPp runs 3 s before the count and past its end, so that the count sees
# the steady rate only.
args=()
[ "$kind" != call ] || args=(-d 0)
run_uac "$work/$kind" "$kind" "$rate" $((rate * (secs + 6))) "$UAC_PORT" "${args[@]}" &
uac=$!
BG_PIDS+=("$uac")
sleep 3
log "strace -c on $server ($(echo $pids | tr ' ' ,)) for ${secs}s while SIPp offers $rate ${kind}s/s"
tracers=()
for p in $pids; do
	timeout -s INT "$secs" strace -c -f -p "$p" -o "$out/strace.$p" >/dev/null 2>&1 &
	tracers+=($!)
done
for t in "${tracers[@]}"; do wait "$t" || true; done
wait "$uac" || true
BG_PIDS=()
n=$((rate * secs))
{
	echo "$server, $kind at $rate/s, counted over ${secs}s ($n ${kind}s): system calls per $kind"
	for p in $pids; do
		[ -s "$out/strace.$p" ] || continue
		role=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^SIPVISOR_GROUP=//p' || true)
		[ -n "$role" ] || { [ "$p" = "$SERVER_PID" ] && role=main || role=child; }
		# strace's rows: % time, seconds, usecs/call, calls, [errors,] name.
		awk -v p="$p" -v role="$role" -v n="$n" '
			$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {
				calls = $4; errs = (NF == 6) ? $5 : 0
				tot += calls
				row[$NF] = sprintf("%s %.2f", $NF, calls / n)
				if (errs > 0) row[$NF] = row[$NF] sprintf(" (%.2f failed)", errs / n)
			}
			END {
				if (tot / n < 0.05) exit
				printf "  %-8s %-28s %6.2f", p, role, tot / n
				for (k in row) printf "; %s", row[k]
				printf "\n"
			}' "$out/strace.$p"
	done
} | tee "$out/summary.txt" >&2
