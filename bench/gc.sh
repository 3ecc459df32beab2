#!/usr/bin/env bash
# The collector's share of the UDP workers' CPU at each GOGC, side by side:
# SIPp UAC -> sipvisor (2 UDP workers, bench/sipvisor.cfg's stateful relay,
# worker_memory_limit at its default) -> SIPp UAS, calls at --rate for
# --secs, counted from --warmup on. Each repetition runs every GOGC in turn,
# in an order that alternates, so that a change in the shared machine's load
# hits them all. GOGC reaches the workers from the supervisor's environment;
# "default" runs without it (the workers' own default).
#
#   bench/gc.sh [--gogc default,100,200,400] [--rate 1000] [--secs 60]
#               [--warmup 20] [--reps 2] [--out DIR]
#
# Prints, per run, the workers' GC CPU (sipvisor_worker_gc_cpu_seconds_total,
# the runtime's estimate) over their busy CPU by the same estimate
# (sipvisor_worker_cpu_seconds_total: what ctl ps's GC % divides by) and
# over their CPU from /proc (utime+stime), their CPU per call and their heap
# at the end; writes DIR/results.csv.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

gogc=default,100,200,400
rate=1000
secs=60
warmup=20
reps=2
CHILDREN=2
out=${BENCH_OUT:-/tmp/sipvisor-bench/gc}
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(gogc rate secs warmup reps out)
parse_flags "$@"
need_positive rate secs reps
need_whole seconds warmup
((warmup < secs)) || die "--warmup ($warmup) must be shorter than --secs ($secs)"
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
mkdir -p "$out"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
build_sipvisor "$out"

# workers prints "CPU_TICKS" summed over the UDP workers of the server.
workers_cpu() {
	local p t=0 role
	for p in $(tree_pids "$SERVER_PID"); do
		role=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^SIPVISOR_GROUP=//p')
		[ "${role%%:*}" = udp ] || continue
		t=$((t + $(awk '{ i = length($0); while (substr($0, i, 1) != ")") i--; split(substr($0, i + 2), f, " "); print f[12] + f[13] }' "/proc/$p/stat")))
	done
	echo "$t"
}
# metric NAME prints the sum of NAME's series of the udp group.
metric() {
	curl -fsS "http://127.0.0.1:$HTTP_PORT/metrics" |
		awk -v m="$1" '$1 ~ "^"m"[{]" && $1 ~ /group="udp[":]/ { s += $2 } END { printf "%.4f\n", s }'
}

echo "gogc,rep,calls_ok,calls_failed,gc_cpu_s,busy_s,cpu_s,gc_pct_of_busy,gc_pct_of_cpu,cpu_ms_per_call,heap_mb" >"$out/results.csv"
list=(${gogc//,/ })
for ((rep = 1; rep <= reps; rep++)); do
	order=("${list[@]}")
	if ((rep % 2 == 0)); then
		order=()
		for ((i = ${#list[@]} - 1; i >= 0; i--)); do order+=("${list[i]}"); done
	fi
	for g in "${order[@]}"; do
		dir=$out/gogc-$g-$rep
		mkdir -p "$dir"
		start_uas "$dir"
		unset GOGC
		[ "$g" = default ] || export GOGC=$g
		start_server sipvisor "$dir"
		unset GOGC
		sleep 2
		run_uac "$dir/uac" call "$rate" $((rate * secs)) "$UAC_PORT" &
		uac=$!
		sleep "$warmup"
		gc0=$(metric sipvisor_worker_gc_cpu_seconds_total) cpu0=$(workers_cpu) busy0=$(metric sipvisor_worker_cpu_seconds_total)
		ok0=$(stat_last "$dir/uac" SuccessfulCall\(C\))
		sleep $((secs - warmup - 2))
		gc1=$(metric sipvisor_worker_gc_cpu_seconds_total) cpu1=$(workers_cpu) busy1=$(metric sipvisor_worker_cpu_seconds_total)
		ok1=$(stat_last "$dir/uac" SuccessfulCall\(C\))
		heap=$(metric sipvisor_worker_heap_bytes)
		"$SIPVISOR_BIN" ctl -addr "http://127.0.0.1:$HTTP_PORT" ps >"$dir/ps.txt" 2>&1 || true
		wait "$uac" || true
		failed=$(stat_last "$dir/uac" FailedCall\(C\))
		okall=$(stat_last "$dir/uac" SuccessfulCall\(C\))
		stop_server
		stop_uas
		awk -v g="$g" -v r="$rep" -v ok="$okall" -v f="$failed" -v gc0="$gc0" -v gc1="$gc1" -v c0="$cpu0" -v c1="$cpu1" \
			-v hz="$CLK_TCK" -v n0="$ok0" -v n1="$ok1" -v heap="$heap" -v b0="$busy0" -v b1="$busy1" 'BEGIN {
				cpu = (c1 - c0) / hz; gc = gc1 - gc0; n = n1 - n0; busy = b1 - b0
				printf "%s,%d,%s,%s,%.3f,%.2f,%.2f,%.2f,%.2f,%.4f,%.1f\n", g, r, ok, f, gc, busy, cpu,
					(busy > 0 ? 100 * gc / busy : 0), (cpu > 0 ? 100 * gc / cpu : 0),
					(n > 0 ? 1000 * cpu / n : 0), heap / 1048576 }' | tee -a "$out/results.csv"
		log "GOGC=$g rep $rep: $(tail -1 "$out/results.csv"); ctl ps: $(grep -c . "$dir/ps.txt") lines"
	done
done
machine_info >"$out/machine.txt"
column -s, -t "$out/results.csv"
