#!/usr/bin/env bash
# Where a refused new session's CPU goes: the server from bench/ refuses
# every new session (sipvisor by `ctl suspend`, Kamailio by its
# $shv(refuse), as run.sh --refuse-rates does), SIPp sends INVITEs that are
# answered 503 and acknowledged, and perf stat counts the CPU, context
# switches and system calls of the server's whole process tree over SECS
# seconds in the middle of the run, printed per refusal.
#
#   bench/refusal-perf.sh [--server sipvisor|kamailio] [--rate 1000]
#                         [--secs 5] [--record yes] [--out DIR]
#
# --record yes then samples the server's main process (sipvisor's
# supervisor) with perf record -g for SECS more seconds and writes
# DIR/perf-report.txt: the share of kernel and program, and the functions
# with their callees.
# Needs perf (Debian: apt-get install -y linux-perf). Writes DIR/perf-stat.csv
# and prints the table.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

server=sipvisor
rate=1000
secs=5
record=no
out=${BENCH_OUT:-/tmp/sipvisor-bench/refusal-perf}
CHILDREN=$(nproc)

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(server rate secs record out)
parse_flags "$@"
need_positive rate secs
case $record in yes | no) ;; *) die "--record must be yes or no, have '$record'" ;; esac
case $server in sipvisor | kamailio) ;; *) die "--server must be sipvisor or kamailio, have '$server'" ;; esac
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
[ "$server" = sipvisor ] || command -v kamailio >/dev/null || die "kamailio not installed: run make bench-install"
command -v perf >/dev/null || die "perf not installed: apt-get install -y linux-perf"

mkdir -p "$out"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
[ "$server" = kamailio ] || build_sipvisor "$out"
pick_ports
start_server "$server" "$out"
server_refuse "$server" "$out" on
# Two seconds before the count and two after it, so it sees a steady rate.
span=$((secs + 4))
[ "$record" = no ] || span=$((span + secs))
run_uac "$out/uac" refuse "$rate" $((rate * span)) "$UAC_PORT" &
uac=$!
BG_PIDS+=("$uac")
sleep 2
events=task-clock,context-switches
for s in recvfrom sendto epoll_pwait futex recvmsg write nanosleep; do
	events=$events,syscalls:sys_enter_$s
done
pids=$(tree_pids "$SERVER_PID" | paste -sd,)
perf stat -x, -e "$events" -p "$pids" -- sleep "$secs" 2>"$out/perf-stat.csv"
if [ "$record" = yes ]; then
	perf record -q -F 4999 -g -p "$SERVER_PID" -o "$out/perf.data" -- sleep "$secs" 2>/dev/null
	{
		perf report -i "$out/perf.data" --no-children --sort dso -g none 2>/dev/null | grep '%'
		echo
		perf report -i "$out/perf.data" --children --sort sym -g none 2>/dev/null | grep '%' | head -60
	} >"$out/perf-report.txt"
	log "wrote $out/perf-report.txt"
fi
wait "$uac" || true
ok=$(stat_last "$out/uac" 'SuccessfulCall(C)')
failed=$(stat_last "$out/uac" 'FailedCall(C)')
log "refused and acknowledged: $ok, failed: $failed"
# perf stat -x, rows: value,unit,event,...; task-clock is in milliseconds.
awk -F, -v n=$((rate * secs)) '
	BEGIN { print "| per refusal, '"$server"' process tree | value |"; print "|---|---:|" }
	$3 == "task-clock" { printf "| CPU µs | %.1f |\n", $1 * 1000 / n; next }
	$3 != "" && $1 ~ /^[0-9.]+$/ { sub(/^syscalls:sys_enter_/, "", $3); printf "| %s | %.2f |\n", $3, $1 / n }
' "$out/perf-stat.csv"
