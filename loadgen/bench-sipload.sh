#!/usr/bin/env bash
# Highest call rate sipload sustains as UAC on one core against its own UAS,
# next to SIPp's (sipp -sn uac -> sipp -sn uas) on the same machine.
#
# Each step offers RATE calls/s for STEP seconds (-m RATE*STEP, calls of
# length 0, UDP on 127.0.0.1). The UAC is pinned to CPU 0 (GOMAXPROCS=1 for
# sipload), the UAS to CPU 1. A step passes when every call succeeded, the run
# took at most STEP+0.5 seconds (the generator kept the rate).
# The same test judges both tools. sipload's worst schedule lag is printed too:
# on a shared machine a single scheduling stall shows there without the rate
# being out of reach. Rates rise until a step fails.
#
#   loadgen/bench-sipload.sh [RATES...]       default: 1000 2000 ... 
#   STEP=4 loadgen/bench-sipload.sh 2000 4000 8000
#
# Every process is bounded by -m and timeout(1) and is stopped by pid.
set -euo pipefail
cd "$(dirname "$0")/.."
STEP=${STEP:-4}
RATES=("$@")
[ ${#RATES[@]} -gt 0 ] || RATES=(1000 2000 4000 6000 8000 10000 12000 14000 16000 18000 20000 24000 28000 32000)
SIPP=${SIPP:-/usr/bin/sipp}
work=$(mktemp -d)
trap 'kill $uas_pid 2>/dev/null || true; rm -rf "$work"' EXIT
uas_pid=
go build -o "$work/sipload" ./cmd/sipload

port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

bench_sipload() {
	local p; p=$(port)
	GOMAXPROCS=1 taskset -c 1 timeout 600 "$work/sipload" -sn uas -i 127.0.0.1 -p "$p" -q >/dev/null 2>&1 &
	uas_pid=$!
	sleep 0.3
	local best=0
	for r in "${RATES[@]}"; do
		local m=$((r * STEP)) t0 t1 out
		t0=$(date +%s.%N)
		out=$(GOMAXPROCS=1 taskset -c 0 timeout $((STEP * 4 + 10)) "$work/sipload" "127.0.0.1:$p" -i 127.0.0.1 -sn uac -r "$r" -m "$m" -q 2>/dev/null || true)
		t1=$(date +%s.%N)
		local ok fail lag el
		ok=$(sed -n 's/.*succeeded \([0-9]*\).*/\1/p' <<<"$out" | head -1)
		fail=$(sed -n 's/.*failed \([0-9]*\).*/\1/p' <<<"$out" | head -1)
		lag=$(sed -n 's/.*max lag \([^ ]*\).*/\1/p' <<<"$out")
		el=$(echo "$t1 - $t0" | bc)
		local verdict=pass
		if [ "${ok:-0}" != "$m" ] || [ "${fail:-1}" != 0 ] || (( $(echo "$el > $STEP + 0.5" | bc) )); then
			verdict=FAIL
		fi
		printf 'sipload %6d cps: %6s/%d ok, %s failed, %5.2fs, max lag %s: %s\n' "$r" "${ok:-?}" "$m" "${fail:-?}" "$el" "$lag" "$verdict"
		[ $verdict = pass ] || break
		best=$r
	done
	kill "$uas_pid" 2>/dev/null || true
	wait "$uas_pid" 2>/dev/null || true
	echo "sipload: highest sustained rate on one core: $best calls/s"
}

bench_sipp() {
	local p; p=$(port)
	taskset -c 1 timeout 600 "$SIPP" -sn uas -i 127.0.0.1 -p "$p" -buff_size 4194304 -nostdin >/dev/null 2>&1 &
	uas_pid=$!
	sleep 0.5
	local best=0
	for r in "${RATES[@]}"; do
		local m=$((r * STEP)) t0 t1 stf="$work/sipp_$r.csv"
		t0=$(date +%s.%N)
		(cd "$work" && taskset -c 0 timeout $((STEP * 4 + 10)) "$SIPP" "127.0.0.1:$p" -sn uac -i 127.0.0.1 -r "$r" -m "$m" \
			-buff_size 4194304 -nostdin -trace_stat -stf "$stf" -fd 1 >/dev/null 2>&1) || true
		t1=$(date +%s.%N)
		local ok fail el
		ok=$(awk -F';' 'NR==1{for(i=1;i<=NF;i++) if($i=="SuccessfulCall(C)") c=i} END{print $c}' "$stf")
		fail=$(awk -F';' 'NR==1{for(i=1;i<=NF;i++) if($i=="FailedCall(C)") c=i} END{print $c}' "$stf")
		el=$(echo "$t1 - $t0" | bc)
		local verdict=pass
		if [ "${ok:-0}" != "$m" ] || [ "${fail:-1}" != 0 ] || (( $(echo "$el > $STEP + 0.5" | bc) )); then
			verdict=FAIL
		fi
		printf 'sipp    %6d cps: %6s/%d ok, %s failed, %5.2fs: %s\n' "$r" "${ok:-?}" "$m" "${fail:-?}" "$el" "$verdict"
		[ $verdict = pass ] || break
		best=$r
	done
	kill "$uas_pid" 2>/dev/null || true
	wait "$uas_pid" 2>/dev/null || true
	echo "sipp: highest sustained rate on one core: $best calls/s"
}

bench_sipload
if [ -x "$SIPP" ]; then bench_sipp; else echo "sipp not found at $SIPP: skipped"; fi
