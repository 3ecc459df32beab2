#!/usr/bin/env bash
# Capacity and overload of sipvisor and Kamailio.
#
# 1. Capacity: offer calls (SIPp uac -> server -> SIPp uas) at rising rates,
#    --step-secs each, and keep the highest rate whose calls all but < 0.1 %
#    succeeded and whose 99th percentile of call set-up time (INVITE to
#    200 OK) is at most --max-rt milliseconds: a server that queues without
#    bound completes every call, seconds late, and has not kept up. The first
#    rate that fails ends the search (bounded by --max).
# 2. Overload: on a fresh server, start --long-calls calls that stay up
#    (SIPp uac, -d long enough that their BYEs fall inside the overload),
#    then offer each --factors multiple of the capacity for --overload-secs.
#    Report goodput (calls completed successfully per second while the
#    overload lasted) and whether every call already up still finished.
#
#   bench/capacity.sh [--servers sipvisor,kamailio] [--start 500] [--step 500]
#                     [--max 10000] [--step-secs 10] [--factors 1.5,2]
#                     [--overload-secs 20] [--long-calls 100] [--settle 5]
#                     [--children N] [--slow US] [--max-rt 1000] [--out DIR]
#
# --slow US makes both servers sleep US microseconds on each initial INVITE
# (usleep, as a slow database lookup would), so that the server reaches its
# limit while SIPp, on the same cores, still has CPU to spare: the overload
# then measures the server, not the machine.
#
# Writes DIR/capacity.csv, DIR/overload.csv, DIR/capacity.md, DIR/machine.txt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=sipvisor,kamailio
start=500
step=500
max=10000
step_secs=10
factors=1.5,2
overload_secs=20
long_calls=100
settle=5
max_rt=1000
CHILDREN=$(nproc)
out=${BENCH_OUT:-/tmp/sipvisor-bench/capacity}

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(servers start step max step-secs factors overload-secs long-calls settle children=CHILDREN slow=SLOW_US max-rt out)
parse_flags "$@"
need_positive start step max step_secs overload_secs long_calls max_rt CHILDREN
need_whole seconds settle
[[ ${SLOW_US:-0} =~ ^[0-9]+$ ]] || die "--slow must be microseconds, a whole number, have '$SLOW_US'"
[ "${SLOW_US:-0}" = 0 ] && SLOW_US=""
export SLOW_US
for f in ${factors//,/ }; do
	[[ $f =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--factors must be numbers like 1.5,2, have '$f'"
done
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
case ",$servers," in *,kamailio,*) command -v kamailio >/dev/null || die "kamailio not installed: run make bench-install" ;; esac

mkdir -p "$out"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
case ",$servers," in *,sipvisor,*) build_sipvisor "$out" ;; esac
machine_info >"$out/machine.txt"
echo "settings: servers=$servers start=$start step=$step max=$max step_secs=$step_secs factors=$factors overload_secs=$overload_secs long_calls=$long_calls settle=$settle children=$CHILDREN slow_us=${SLOW_US:-0} max_rt_ms=$max_rt" >>"$out/machine.txt"
echo "server,rate,offered,successful,failed,cpu_s,pass,rt_p99_ms" >"$out/capacity.csv"
echo "server,factor,rate,offered_secs,successful,failed,goodput_per_s,goodput_share,long_offered,long_successful,long_failed,cpu_s" >"$out/overload.csv"

# goodput DIR SECS: calls that completed successfully within the first SECS
# seconds of the run, per second, from the per-second rows of the stat file.
goodput() {
	awk -F';' -v secs="$2" '
		NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "SuccessfulCall(P)") s = i; if ($i == "ElapsedTime(C)") e = i }; next }
		{
			split($e, t, ":"); el = t[1] * 3600 + t[2] * 60 + t[3]
			if (el <= secs) n += $s
		}
		END { printf "%.1f\n", n / secs }' "$1/stat.csv"
}

for server in ${servers//,/ }; do
	work=$out/$server
	mkdir -p "$work"

	# 1. Capacity.
	start_uas "$work"
	start_server "$server" "$work"
	capacity=0
	for ((rate = start; rate <= max; rate += step)); do
		dir=$work/step-$rate
		rm -rf "$dir"
		n=$((rate * step_secs))
		log "$server capacity step $rate/s for ${step_secs}s"
		c0=$(tree_cpu "$SERVER_PID")
		run_uac "$dir" call "$rate" "$n" "$UAC_PORT" -d 0
		sleep "$settle"
		c1=$(tree_cpu "$SERVER_PID")
		kill -0 "$SERVER_PID" 2>/dev/null || die "$server exited during the run"
		ok=$(stat_last "$dir" 'SuccessfulCall(C)')
		failed=$(stat_last "$dir" 'FailedCall(C)')
		# A call that neither succeeded nor failed (SIPp ended at -timeout)
		# counts against the rate as a failed one.
		rt=$(rtt_pct "$dir" 99)
		pass=$(awk -v ok="$ok" -v n="$n" -v rt="${rt:-0}" -v max="$max_rt" 'BEGIN { print ((n - ok) * 1000 < n && rt <= max) ? "yes" : "no" }')
		echo "$server,$rate,$n,$ok,$failed,$(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b-a}'),$pass,$rt" >>"$out/capacity.csv"
		log "  successful $ok of $n, failed $failed, set-up p99 ${rt} ms: $pass"
		[ "$pass" = yes ] || break
		capacity=$rate
	done
	stop_server
	stop_uas
	if ((capacity == 0)); then
		log "$server: no rate from $start/s passed; skipping its overload runs"
		continue
	fi
	log "$server capacity: $capacity calls/s"

	# 2. Overload, each factor on a fresh server.
	for f in ${factors//,/ }; do
		rate=$(awk -v c="$capacity" -v f="$f" 'BEGIN { printf "%d", c * f + 0.5 }')
		dir=$work/overload-$f
		rm -rf "$dir"
		mkdir -p "$dir"
		start_uas "$work"
		start_server "$server" "$work"
		# Long calls: set up over long_calls/20 s at 20/s before the
		# overload starts, hung up (BYE) half way through it.
		lrate=20
		lead=$(((long_calls + lrate - 1) / lrate + 1))
		hold_ms=$(((lead + overload_secs / 2) * 1000))
		(cd "$dir" && mkdir -p long && cd long &&
			timeout -k 5 $((lead + overload_secs + 150)) sipp -sn uac "127.0.0.1:$SIP_PORT" \
				-i 127.0.0.1 -p "$LONG_UAC_PORT" -r $lrate -m "$long_calls" -d "$hold_ms" \
				-nostdin -buff_size 4194304 -trace_stat -stf stat.csv -fd 1 \
				-timeout $((lead + overload_secs + 120))s -timeout_error >sipp.out 2>&1) &
		long_pid=$!
		BG_PIDS+=("$long_pid")
		sleep "$lead"
		log "$server overload ${f}x: $rate/s for ${overload_secs}s, $long_calls calls up"
		c0=$(tree_cpu "$SERVER_PID")
		run_uac "$dir" call "$rate" $((rate * overload_secs)) "$UAC_PORT" -d 0
		# The long calls end on their own (bounded by their -timeout).
		wait "$long_pid" || true
		BG_PIDS=()
		sleep "$settle"
		c1=$(tree_cpu "$SERVER_PID")
		ok=$(stat_last "$dir" 'SuccessfulCall(C)')
		failed=$(stat_last "$dir" 'FailedCall(C)')
		gp=$(goodput "$dir" "$overload_secs")
		lok=$(stat_last "$dir/long" 'SuccessfulCall(C)')
		lfailed=$(stat_last "$dir/long" 'FailedCall(C)')
		share=$(awk -v g="$gp" -v c="$capacity" 'BEGIN { printf "%.2f", g / c }')
		echo "$server,$f,$rate,$overload_secs,$ok,$failed,$gp,$share,$long_calls,$lok,$lfailed,$(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b-a}')" >>"$out/overload.csv"
		log "  goodput $gp/s ($share of capacity), successful $ok failed $failed; long calls $lok/$long_calls ok, $lfailed failed"
		stop_server
		stop_uas
	done
done

{
	echo "Capacity: highest rate with < 0.1 % failed calls and set-up p99 at most $max_rt ms (steps of $step/s from $start/s, ${step_secs} s each)."
	echo
	echo "| server | rate/s | successful | failed | set-up p99 ms | passed |"
	echo "|---|---:|---:|---:|---:|---|"
	tail -n +2 "$out/capacity.csv" | awk -F, '{ printf "| %s | %s | %s of %s | %s | %s | %s |\n", $1, $2, $4, $3, $5, $8, $7 }'
	echo
	echo "Overload: offered for ${overload_secs} s with $long_calls calls already up."
	echo
	echo "| server | × capacity | offered/s | goodput/s | goodput ÷ capacity | successful | failed | calls up: finished / failed |"
	echo "|---|---:|---:|---:|---:|---:|---:|---|"
	tail -n +2 "$out/overload.csv" | awk -F, '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s of %s / %s |\n", $1, $2, $3, $7, $8, $5, $6, $10, $9, $11 }'
} >"$out/capacity.md"
log "wrote $out/capacity.md"
cat "$out/capacity.md"
