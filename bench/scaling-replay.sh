#!/usr/bin/env bash
# OpenSIPS's auto-scaling experiment replayed with SIPp in its default mode.
#
# OPTIONS answered by sipvisor itself after --cost-us of script time (usleep,
# then a stateless 200 OK: bench/scaling-replay.cfg), on one UDP group of
# --children workers under examples/scaling.cfg's PROFILE_A (scale up to 6 on
# 70 % for 4 cycles within 5, down to 2 on 18 % for 10 cycles). The offered
# load steps --low → --high → --low per second (--lead, --step-secs and
# --tail seconds), one SIPp per phase (bench/options-uac.xml: UDP,
# retransmissions from T1 = 500 ms, an OPTIONS unanswered after 32 s fails),
# started one after another on a clock so that the load is open loop.
#
# The tail is 80 s, not the experiment's 25 s: as in OpenSIPS, no worker is
# drained within 10 × the scale-down cycles (100 cycles here) of startup or
# of the last fork, and the group forks 4-5 s into the step, so its drains
# (6 → 2, one a cycle) come about 115-120 s after the start. A 25 s tail
# ends at 75 s and shows the growth alone.
#
#   bench/scaling-replay.sh [--children 4] [--cost-us 15000] [--low 10]
#                           [--high 300] [--lead 10] [--step-secs 40]
#                           [--tail 80] [--out DIR]
#
# Prints, per phase and in total, OPTIONS sent, answered, failed (and why),
# retransmissions and response time percentiles; the scaling decisions
# (sipvisor_profile_decisions_total) and the group's workers per second
# (sipvisor_pool_workers); the requests the workers dropped for having
# waited past max_queue_wait and the retransmissions the front door absorbed.
# Writes DIR/replay.md, DIR/timeline.csv and each SIPp's files under DIR.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmdline="bench/scaling-replay.sh${*:+ $*}"
CHILDREN=4
cost_us=15000
low=10
high=300
lead=10
step_secs=40
tail_secs=80
out=${BENCH_OUT:-/tmp/sipvisor-bench/scaling-replay}
RECV_TIMEOUT_S=32

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(children=CHILDREN cost-us low high lead step-secs tail=tail_secs out)
parse_flags "$@"
need_positive CHILDREN cost_us low high lead step_secs tail_secs
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
command -v curl >/dev/null || die "curl not installed"

mkdir -p "$out"
out=$(cd "$out" && pwd)
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
pick_ports
build_sipvisor "$out"
machine_info >"$out/machine.txt"
group="udp:127.0.0.1:$SIP_PORT"

# run_phase NAME RATE SECS PORT runs one SIPp UAC in the background in
# $out/NAME, bounded by its -timeout and by timeout(1).
run_phase() {
	local dir=$out/$1 rate=$2 secs=$3 port=$4
	rm -rf "$dir"
	mkdir -p "$dir"
	(
		cd "$dir"
		rc=0
		timeout -k 5 $((secs + RECV_TIMEOUT_S + 60)) sipp -sf "$BENCH_DIR/options-uac.xml" "127.0.0.1:$SIP_PORT" \
			-i 127.0.0.1 -p "$port" -r "$rate" -m $((rate * secs)) -l $((rate * (RECV_TIMEOUT_S + 8) + 100)) \
			-nostdin -buff_size 4194304 \
			-trace_stat -stf stat.csv -fd 1 -trace_rtt -rtt_freq 1 -trace_err \
			-timeout $((secs + RECV_TIMEOUT_S + 15))s -timeout_error >sipp.out 2>&1 || rc=$?
		echo "$rc" >exit
	) &
	BG_PIDS+=("$!")
}

# sample T appends one timeline.csv row from /metrics.
sample() {
	curl -sf --max-time 2 "http://127.0.0.1:$HTTP_PORT/metrics" 2>/dev/null | awk -v t="$1" -v g="group=\"$group\"" '
		index($0, g) == 0 { next }
		/^sipvisor_pool_workers[{]/ && /state="ready"/ { w = $NF }
		/^sipvisor_profile_load_ratio[{]/ { l = $NF }
		/^sipvisor_profile_decisions_total[{]/ && /decision="up"/ { up = $NF }
		/^sipvisor_profile_decisions_total[{]/ && /decision="down"/ { down = $NF }
		/^sipvisor_pool_stale_requests_dropped_total[{]/ { st = $NF }
		END { printf "%s,%s,%s,%s,%s,%s\n", t, w, l, up + 0, down + 0, st + 0 }' >>"$out/timeline.csv" || true
}

SIPVISOR_CFG=$BENCH_DIR/scaling-replay.cfg
work=$out/sipvisor
mkdir -p "$work"
render "$SIPVISOR_CFG" "$work/sipvisor.cfg"
sed -i "s/@COST_US@/$cost_us/g" "$work/sipvisor.cfg"
[ -z "${BENCH_SIPVISOR_SET:-}" ] || printf '%s\n' "$BENCH_SIPVISOR_SET" >>"$work/sipvisor.cfg"
run_sipvisor "$work/sipvisor.cfg" "$work"
log "sipvisor serving on $group, $CHILDREN workers; $low/s for ${lead}s, $high/s for ${step_secs}s, $low/s for ${tail_secs}s"
sleep 2
echo "t_s,workers,load_ratio,decisions_up,decisions_down,stale_dropped" >"$out/timeline.csv"
start=$(date +%s)
t_high=$lead
t_back=$((lead + step_secs))
t_end=$((t_back + tail_secs))
run_phase lead "$low" "$lead" "$UAC_PORT"
phase=lead
# One sample a second; the next phase starts on the clock, not when the
# previous SIPp ends (it waits for its last OPTIONS).
while :; do
	now=$(($(date +%s) - start))
	sample "$now"
	if [ "$phase" = lead ] && ((now >= t_high)); then run_phase step "$high" "$step_secs" "$LONG_UAC_PORT"; phase=step; fi
	if [ "$phase" = step ] && ((now >= t_back)); then run_phase tail "$low" "$tail_secs" "$TLS_PORT"; phase=tail; fi
	((now < t_end + 5)) || break
	sleep 1
done
for p in "${BG_PIDS[@]}"; do wait "$p" || true; done
BG_PIDS=()
sample "$(($(date +%s) - start))"
curl -sf --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" >"$work/metrics-after.prom" || true
"$SIPVISOR_BIN" ctl -addr "http://127.0.0.1:$HTTP_PORT" ps >"$work/ps-after.txt" 2>&1 || true
stop_server

row() { # NAME
	local d=$out/$1
	printf '| %s | %s | %s | %s | %s / %s | %s | %s | %s | %s |\n' "$1" \
		"$(stat_last "$d" 'OutgoingCall(C)')" "$(stat_last "$d" 'SuccessfulCall(C)')" \
		"$(stat_last "$d" 'FailedCall(C)')" "$(stat_last "$d" 'FailedMaxUDPRetrans(C)')" \
		"$(stat_last "$d" 'FailedTimeoutOnRecv(C)')" "$(stat_last "$d" 'Retransmissions(C)')" \
		"$(rtt_pct "$d" 50)" "$(rtt_pct "$d" 99)" "$(rtt_pct "$d" 100)"
}
failed=0
for p in lead step tail; do
	f=$(stat_last "$out/$p" 'FailedCall(C)')
	[[ $f =~ ^[0-9]+$ ]] && failed=$((failed + f)) || failed=NA
done
series() { awk -v n="$1" -v g="group=\"$group\"" 'index($0, n) == 1 && index($0, g) { print $NF; exit }' "$work/metrics-after.prom" 2>/dev/null; }
{
	echo "# OpenSIPS's scaling experiment: $low → $high → $low OPTIONS/s, $cost_us µs each"
	echo
	echo '```'
	echo "$cmdline"
	cat "$out/machine.txt"
	echo '```'
	echo
	echo "| phase | sent | answered | failed | failed: max retrans / recv timeout | retransmissions | RT p50 ms | p99 ms | max ms |"
	echo "|---|---:|---:|---:|---|---:|---:|---:|---:|"
	for p in lead step tail; do row "$p"; done
	echo
	echo "Failed over the replay: **$failed**."
	echo "Scaling decisions (sipvisor_profile_decisions_total):" \
		"$(grep -E "^sipvisor_profile_decisions_total\{" "$work/metrics-after.prom" | grep -F "$group" |
			sed 's/.*decision="\([a-z]*\)".* \([0-9]*\)$/\1 \2/' | paste -sd, | sed 's/,/, /g')."
	echo "Stale requests dropped (max_queue_wait): $(series sipvisor_pool_stale_requests_dropped_total)."
	echo "Retransmissions absorbed by the front door: $(awk '/^sipvisor_frontdoor_retransmissions_absorbed_total/ { n += $NF } END { print n + 0 }' "$work/metrics-after.prom" 2>/dev/null)."
	echo
	echo "Workers per second (t: workers, from the step at ${t_high}s to its end at ${t_back}s):"
	echo
	awk -F, 'NR > 1 && $2 != prev { printf "%s%ss: %s", sep, $1, $2; sep = ", "; prev = $2 } END { print "" }' "$out/timeline.csv"
} >"$out/replay.md"
cat "$out/replay.md"
