#!/usr/bin/env bash
# Overload as real clients cause it, sipvisor and then Kamailio in one run.
#
# A fixed group of workers whose script costs --cost-us per OPTIONS (usleep,
# then a stateless 200 OK: bench/burst-sipvisor.cfg, bench/burst-kamailio.cfg),
# --children of them, so that the capacity is about children / cost (4 / 15 ms
# = 266/s). Clients are SIPp in its default mode (UDP, retransmissions from
# T1 = 500 ms; bench/options-uac.xml), each OPTIONS a call of its own:
#   - steady: --steady-share of the capacity for --secs;
#   - burst: a second SIPp at --burst-factor times the capacity for
#     --burst-secs, starting --burst-at seconds into the steady stream;
#   - probe: --probe-rate per second for --probe-secs, starting --probe-gap
#     seconds after the steady stream's last request; every OPTIONS of it
#     should be answered, and its response times say whether the server has
#     recovered.
# The capacity is children * 1e6 / cost_us * 0.95, or with --measure-capacity
# the highest rate of a rising OPTIONS search on each server (steps of 5 % of
# children / cost from 70 % to 130 %, --cap-step-secs each) with no failed
# OPTIONS and a p99 response time at most --max-rt ms; the lower of the
# servers' capacities then drives both, so both get the same traffic.
#
#   bench/burst.sh [--servers sipvisor,kamailio] [--children 4]
#                  [--cost-us 15000] [--secs 40] [--steady-share 0.75]
#                  [--burst-factor 2] [--burst-at 3] [--burst-secs 5]
#                  [--probe-rate 5] [--probe-secs 5] [--probe-gap 1]
#                  [--measure-capacity] [--cap-step-secs 8] [--max-rt 500]
#                  [--kamailio-maxbuffer BYTES] [--settle 3] [--out DIR]
#
# Kamailio keeps its default socket receive buffer (maxbuffer, 256 KiB) as a
# stock Kamailio with this script would; --kamailio-maxbuffer sets one
# (bench/kamailio.cfg's throughput runs use 4194304).
#
# Writes DIR/burst.csv (one row per server and phase), DIR/metrics.csv
# (sipvisor's front door series and each server's kernel socket drops,
# before and after), DIR/capacity.csv (with --measure-capacity), DIR/burst.md
# and DIR/machine.txt. Everything listens on 127.0.0.1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmdline="bench/burst.sh${*:+ $*}"
servers=sipvisor,kamailio
CHILDREN=4
cost_us=15000
secs=40
steady_share=0.75
burst_factor=2
burst_at=3
burst_secs=5
probe_rate=5
probe_secs=5
probe_gap=1
measure=no
cap_step_secs=8
max_rt=500
settle=3
kamailio_maxbuffer=0
out=${BENCH_OUT:-/tmp/sipvisor-bench/burst}
# bench/options-uac.xml gives up on an OPTIONS after 32 s (timer F).
RECV_TIMEOUT_S=32

usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(servers children=CHILDREN cost-us secs steady-share burst-factor burst-at burst-secs probe-rate probe-secs probe-gap cap-step-secs max-rt settle kamailio-maxbuffer out)
SWITCHES=(measure-capacity=measure)
parse_flags "$@"
need_positive CHILDREN cost_us secs burst_secs probe_rate probe_secs cap_step_secs max_rt
[[ $kamailio_maxbuffer =~ ^[0-9]+$ ]] || die "--kamailio-maxbuffer must be bytes, a whole number (0: Kamailio's default), have '$kamailio_maxbuffer'"
need_whole seconds burst_at probe_gap settle
for v in steady_share burst_factor; do
	[[ ${!v} =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v x="${!v}" 'BEGIN { exit !(x > 0) }' ||
		die "--$(echo "$v" | tr _ -) must be a positive number like 0.75, have '${!v}'"
done
((burst_at + burst_secs <= secs)) || die "the burst (--burst-at $burst_at + --burst-secs $burst_secs) must end within the steady stream (--secs $secs)"
for s in ${servers//,/ }; do
	case $s in sipvisor | kamailio) ;; *) die "--servers takes sipvisor and/or kamailio, have '$s'" ;; esac
done
[ -n "${servers//,/}" ] || die "--servers is empty"
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
command -v curl >/dev/null || die "curl not installed"
case ",$servers," in *,kamailio,*) command -v kamailio >/dev/null || die "kamailio not installed: run make bench-install" ;; esac

# The steady stream, the burst and the probe each have a SIPp and a port:
# UAC_PORT, LONG_UAC_PORT and UAS_PORT of lib.sh's set (no UAS runs here),
# all checked free by pick_ports.
set_phase_ports() {
	pick_ports
	STEADY_PORT=$UAC_PORT
	BURST_PORT=$LONG_UAC_PORT
	PROBE_PORT=$UAS_PORT
}

# start_burst_server NAME WORKDIR starts sipvisor or Kamailio with its
# burst config and waits until it serves, as lib.sh's start_server does for
# the proxy configs. Sets SERVER_PID.
start_burst_server() {
	local name=$1 work=$2 cfg i
	port_free "$SIP_PORT" || die "port $SIP_PORT is in use (set BENCH_PORT_BASE)"
	cfg=$work/$name.cfg
	render "$BENCH_DIR/burst-$name.cfg" "$cfg"
	if ((kamailio_maxbuffer > 0)); then
		maxbuffer_line="maxbuffer=$kamailio_maxbuffer"
	else
		maxbuffer_line="# maxbuffer: Kamailio's default (256 KiB)."
	fi
	sed -i -e "s/@COST_US@/$cost_us/g" -e "s/@MAXBUFFER@/$maxbuffer_line/g" "$cfg"
	# BENCH_SIPVISOR_SET adds global settings, one per line, as for run.sh.
	if [ "$name" = sipvisor ] && [ -n "${BENCH_SIPVISOR_SET:-}" ]; then
		printf '%s\n' "$BENCH_SIPVISOR_SET" >"$cfg.set"
		cat "$cfg" >>"$cfg.set"
		mv "$cfg.set" "$cfg"
	fi
	case $name in
	sipvisor)
		run_sipvisor "$cfg" "$work"
		;;
	kamailio)
		run_kamailio "$cfg" "$work" 16
		;;
	esac
	log "$name serving on 127.0.0.1:$SIP_PORT, pid $SERVER_PID, $(tree_count "$SERVER_PID") processes"
}

# start_options DIR RATE COUNT PORT DELAY starts, in the background after
# DELAY seconds, one SIPp sending COUNT OPTIONS at RATE per second from PORT
# (bench/options-uac.xml), and adds it to BG_PIDS; OPT_PID is its pid. Its
# stat file is DIR/stat.csv, each answered OPTIONS' response time is in
# DIR/*_rtt.csv, its exit code in DIR/exit. Bounded by SIPp's -timeout (its
# requests, then the 32 s an unanswered one may wait) and by timeout(1).
start_options() {
	local dir=$1 rate=$2 count=$3 port=$4 delay=$5 span limit
	span=$(((count + rate - 1) / rate))
	# Open loop: the limit on OPTIONS in progress is far above what the
	# rate needs while each waits its 32 s, so an overloaded server cannot
	# slow the offered load down.
	limit=$((rate * (RECV_TIMEOUT_S + 8) + 100))
	rm -rf "$dir"
	mkdir -p "$dir"
	(
		sleep "$delay"
		cd "$dir"
		rc=0
		timeout -k 5 $((span + RECV_TIMEOUT_S + 60)) sipp -sf "$BENCH_DIR/options-uac.xml" "127.0.0.1:$SIP_PORT" \
			-i 127.0.0.1 -p "$port" -r "$rate" -m "$count" -l "$limit" \
			-nostdin -buff_size 4194304 \
			-trace_stat -stf stat.csv -fd 1 -trace_rtt -rtt_freq 1 -trace_err -trace_screen \
			-timeout $((span + RECV_TIMEOUT_S + 15))s -timeout_error >sipp.out 2>&1 || rc=$?
		echo "$rc" >exit
	) &
	OPT_PID=$!
	BG_PIDS+=("$OPT_PID")
}

# wait_options waits for every SIPp in BG_PIDS.
wait_options() {
	local p
	for p in "${BG_PIDS[@]}"; do wait "$p" || true; done
	BG_PIDS=()
}

# metrics_snapshot FILE writes the series this benchmark follows, one
# "name value" a line: the kernel's drop count of the SIP socket (full
# receive buffer) for either server; for sipvisor every sipvisor_frontdoor_*
# series, any series whose name speaks of stale or absorbed messages, the
# overload state, and the messages waiting in its workers' queues.
metrics_snapshot() {
	local file=$1 port_hex
	port_hex=$(printf '%04X' "$SIP_PORT")
	awk -v a="0100007F:$port_hex" '
		function hex(h,   i, v) { v = 0; for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789ABCDEF", toupper(substr(h, i, 1))) - 1; return v }
		$2 == a { d += $NF; split($5, q, ":"); rx += hex(q[2]) }
		END { printf "kernel_udp_drops %d\nkernel_udp_rx_queue_bytes %d\n", d, rx }' /proc/net/udp >"$file"
	# The receive buffer the kernel gave the socket (rb in ss's skmem).
	ss -Huamn "sport = :$SIP_PORT" 2>/dev/null | sed -n 's/.*skmem:(.*rb\([0-9]*\).*/kernel_udp_rcvbuf_bytes \1/p' | head -1 >>"$file"
	[ "$server" = sipvisor ] || return 0
	curl -sf --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" >"$file.prom" || { echo "metrics_scrape_failed 1" >>"$file"; return 0; }
	grep -E '^sipvisor_(frontdoor_[a-z_]+|[a-z_]*(stale|absorbed)[a-z_]*|overload_suspended|overload_throttle_refused_ratio|overload_echo_rtt_seconds)[{ ]' "$file.prom" |
		{ grep -v 'malformed_total' || true; } >>"$file"
	# Malformed datagrams: one line for all reasons.
	awk '/^sipvisor_frontdoor_malformed_total/ { n += $NF } END { print "sipvisor_frontdoor_malformed_total(sum) " n + 0 }' "$file.prom" >>"$file"
	curl -sf --max-time 5 "http://127.0.0.1:$HTTP_PORT/mi/ps" >"$file.ps.json" || return 0
	# The queues of the SIP socket's workers, summed ("queue": N in /mi/ps).
	awk -v g="\"udp:127.0.0.1:$SIP_PORT\"" '
		/"name":/ { in_g = index($0, g) > 0 }
		in_g && /"queue":/ { gsub(/[^0-9]/, "", $2); q += $2 }
		END { print "worker_queue(sum,/mi/ps) " q + 0 }' "$file.ps.json" >>"$file"
}

# metrics_merge BEFORE AFTER prints "name before after" for every series of
# either snapshot (NA where one lacks it).
metrics_merge() {
	awk 'NR == FNR { b[$1] = $2; next } { print $1, ($1 in b) ? b[$1] : "NA", $2; seen[$1] = 1 }
		END { for (k in b) if (!(k in seen)) print k, b[k], "NA" }' "$1" "$2"
}

# phase_row SERVER PHASE DIR RATE START SECS prints one burst.csv row from
# the SIPp of DIR.
phase_row() {
	local server=$1 phase=$2 dir=$3 rate=$4 start=$5 span=$6
	local sent ok failed retrans maxre rto late p50 p99 rc
	sent=$(stat_last "$dir" 'OutgoingCall(C)')
	ok=$(stat_last "$dir" 'SuccessfulCall(C)')
	failed=$(stat_last "$dir" 'FailedCall(C)')
	retrans=$(stat_last "$dir" 'Retransmissions(C)')
	maxre=$(stat_last "$dir" 'FailedMaxUDPRetrans(C)')
	rto=$(stat_last "$dir" 'FailedTimeoutOnRecv(C)')
	late=$(stat_last "$dir" 'DeadCallMsgs(C)')
	p50=$(rtt_pct "$dir" 50)
	p99=$(rtt_pct "$dir" 99)
	rc=$(cat "$dir/exit" 2>/dev/null || echo NA)
	awk -v s="$server" -v ph="$phase" -v cap="$capacity" -v r="$rate" -v st="$start" -v sp="$span" \
		-v sent="$sent" -v ok="$ok" -v f="$failed" -v re="$retrans" -v mr="$maxre" -v rto="$rto" \
		-v late="$late" -v p50="$p50" -v p99="$p99" -v rc="$rc" 'BEGIN {
		unf = (sent ~ /^[0-9]+$/ && ok ~ /^[0-9]+$/ && f ~ /^[0-9]+$/) ? sent - ok - f : "NA"
		pct = (sent + 0 > 0) ? sprintf("%.1f", ok / sent * 100) : "NA"
		printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n",
			s, ph, cap, r, st, sp, sent, ok, f, unf, pct, re, mr, rto, late, p50, p99, rc
	}'
}

mkdir -p "$out"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
case ",$servers," in *,sipvisor,*) build_sipvisor "$out" ;; esac
machine_info >"$out/machine.txt"
echo "settings: servers=$servers children=$CHILDREN cost_us=$cost_us secs=$secs steady_share=$steady_share burst_factor=$burst_factor burst_at=$burst_at burst_secs=$burst_secs probe_rate=$probe_rate probe_secs=$probe_secs probe_gap=$probe_gap measure_capacity=$measure cap_step_secs=$cap_step_secs max_rt_ms=$max_rt settle=$settle kamailio_maxbuffer=$kamailio_maxbuffer" >>"$out/machine.txt"

# The capacity children / cost, per second.
nominal=$(awk -v n="$CHILDREN" -v c="$cost_us" 'BEGIN { printf "%.1f", n * 1e6 / c }')
capacity_note=
if [ "$measure" = yes ]; then
	echo "server,pct_of_nominal,rate,offered,successful,failed,retransmissions,rt_p99_ms,pass" >"$out/capacity.csv"
	capacity=
	for server in ${servers//,/ }; do
		work=$out/$server
		mkdir -p "$work"
		set_phase_ports
		start_burst_server "$server" "$work"
		found=0
		for ((pct = 70; pct <= 130; pct += 5)); do
			rate=$(awk -v c="$nominal" -v p="$pct" 'BEGIN { printf "%d", c * p / 100 + 0.5 }')
			dir=$work/capacity-$rate
			n=$((rate * cap_step_secs))
			log "$server capacity step $rate/s ($pct % of $nominal/s) for ${cap_step_secs}s"
			start_options "$dir" "$rate" "$n" "$STEADY_PORT" 0
			wait_options
			sleep "$settle"
			kill -0 "$SERVER_PID" 2>/dev/null || die "$server exited during the capacity search"
			ok=$(stat_last "$dir" 'SuccessfulCall(C)')
			failed=$(stat_last "$dir" 'FailedCall(C)')
			retrans=$(stat_last "$dir" 'Retransmissions(C)')
			rt=$(rtt_pct "$dir" 99)
			pass=$(awk -v ok="$ok" -v n="$n" -v f="$failed" -v rt="$rt" -v max="$max_rt" \
				'BEGIN { print (ok == n && f == 0 && rt != "NA" && rt <= max) ? "yes" : "no" }')
			echo "$server,$pct,$rate,$n,$ok,$failed,$retrans,$rt,$pass" >>"$out/capacity.csv"
			log "  answered $ok of $n, failed $failed, p99 ${rt} ms: $pass"
			[ "$pass" = yes ] || break
			found=$rate
		done
		stop_server
		((found > 0)) || die "$server: no rate from 70 % of $nominal/s passed; see $out/capacity.csv"
		log "$server capacity: $found OPTIONS/s"
		capacity_note="$capacity_note $server $found/s,"
		if [ -z "$capacity" ] || ((found < capacity)); then capacity=$found; fi
	done
	capacity_note="measured (0 failed, p99 at most $max_rt ms, ${cap_step_secs} s steps of 5 % of $nominal/s):${capacity_note%,}; the lower, $capacity/s, drives both servers"
else
	capacity=$(awk -v c="$nominal" 'BEGIN { printf "%d", c * 0.95 + 0.5 }')
	capacity_note="not measured: 0.95 × children / cost = 0.95 × $nominal/s = $capacity/s"
fi
steady_rate=$(awk -v c="$capacity" -v s="$steady_share" 'BEGIN { r = int(c * s + 0.5); print (r < 1) ? 1 : r }')
burst_rate=$(awk -v c="$capacity" -v f="$burst_factor" 'BEGIN { r = int(c * f + 0.5); print (r < 1) ? 1 : r }')
probe_at=$((secs + probe_gap))
echo "capacity: $capacity_note" >>"$out/machine.txt"
echo "rates: steady $steady_rate/s for $secs s, burst $burst_rate/s for $burst_secs s from $burst_at s, probe $probe_rate/s for $probe_secs s from $probe_at s" >>"$out/machine.txt"
log "capacity $capacity/s: steady $steady_rate/s, burst $burst_rate/s, probe $probe_rate/s"

csv=$out/burst.csv
echo "server,phase,capacity_per_s,rate_per_s,start_s,secs,sent,answered,failed,unfinished,answered_pct,retransmissions,failed_max_retrans,failed_recv_timeout,replies_after_end,rt_p50_ms,rt_p99_ms,sipp_exit" >"$csv"
echo "server,series,before,after" >"$out/metrics.csv"

for server in ${servers//,/ }; do
	work=$out/$server
	mkdir -p "$work"
	set_phase_ports
	start_burst_server "$server" "$work"
	sleep "$settle"
	metrics_snapshot "$work/metrics-before.txt"
	log "$server: steady $steady_rate/s for ${secs}s, burst $burst_rate/s for ${burst_secs}s at ${burst_at}s, probe $probe_rate/s for ${probe_secs}s at ${probe_at}s"
	start_options "$work/steady" "$steady_rate" $((steady_rate * secs)) "$STEADY_PORT" 0
	start_options "$work/burst" "$burst_rate" $((burst_rate * burst_secs)) "$BURST_PORT" "$burst_at"
	start_options "$work/probe" "$probe_rate" $((probe_rate * probe_secs)) "$PROBE_PORT" "$probe_at"
	wait_options
	sleep "$settle"
	kill -0 "$SERVER_PID" 2>/dev/null || die "$server exited during the run"
	metrics_snapshot "$work/metrics-after.txt"
	stop_server
	phase_row "$server" steady "$work/steady" "$steady_rate" 0 "$secs" >>"$csv"
	phase_row "$server" burst "$work/burst" "$burst_rate" "$burst_at" "$burst_secs" >>"$csv"
	phase_row "$server" probe "$work/probe" "$probe_rate" "$probe_at" "$probe_secs" >>"$csv"
	metrics_merge "$work/metrics-before.txt" "$work/metrics-after.txt" >"$work/metrics.txt"
	# CSV: the series name quoted, its own quotes doubled.
	awk -v s="$server" '{ n = $1; gsub(/"/, "\"\"", n); printf "%s,\"%s\",%s,%s\n", s, n, $2, $3 }' "$work/metrics.txt" >>"$out/metrics.csv"
	awk -F, -v s="$server" '$1 == s { printf "%s %s: sent %s answered %s (%s %%) failed %s retransmissions %s p50 %s ms p99 %s ms\n", s, $2, $7, $8, $11, $9, $12, $16, $17 }' "$csv" |
		while read -r line; do log "  $line"; done
done

# timeline DIR: per 5 s of the steady stream, OPTIONS sent and answered (an
# answer counted in the second it came).
timeline() {
	awk -F';' '
		NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "OutgoingCall(P)") o = i; if ($i == "SuccessfulCall(P)") s = i; if ($i == "FailedCall(P)") f = i; if ($i == "ElapsedTime(C)") e = i }; next }
		{
			split($e, t, ":"); el = t[1] * 3600 + t[2] * 60 + t[3]
			b = int((el - 0.001) / 5); if (b < 0) b = 0
			sent[b] += $o; ok[b] += $s; fail[b] += $f; if (b > last) last = b
		}
		END { for (b = 0; b <= last; b++) printf "%d-%d %d %d %d\n", b * 5, b * 5 + 5, sent[b], ok[b], fail[b] }' "$1/stat.csv" 2>/dev/null
}

{
	echo "# Burst: OPTIONS at a fixed script cost, a steady stream and a burst"
	echo
	echo "A fixed group of $CHILDREN workers whose script costs $cost_us µs per OPTIONS (usleep, then a stateless 200 OK),"
	echo "steady OPTIONS at $steady_share of its capacity, plus a burst at $burst_factor × its capacity for $burst_secs s"
	echo "from $burst_at s; Kamailio 5.6 with the same script cost and as many children. SIPp in its default mode"
	echo "(UDP, retransmissions from 500 ms; an OPTIONS unanswered after 32 s fails). Kamailio's socket receive"
	echo "buffer: $( ((kamailio_maxbuffer > 0)) && echo "maxbuffer=$kamailio_maxbuffer" || echo "its default (maxbuffer 256 KiB)")."
	echo
	echo '```'
	echo "$cmdline"
	echo '```'
	echo
	echo '```'
	cat "$out/machine.txt"
	echo '```'
	echo
	echo "Capacity: $capacity_note."
	echo "Rates: steady $steady_rate/s for $secs s; burst $burst_rate/s for $burst_secs s from $burst_at s;"
	echo "probe $probe_rate/s for $probe_secs s from $probe_at s (after the steady stream's last request)."
	echo
	if [ "$measure" = yes ]; then
		echo "| server | % of $nominal/s | rate/s | answered | failed | retransmissions | p99 ms | passed |"
		echo "|---|---:|---:|---:|---:|---:|---:|---|"
		tail -n +2 "$out/capacity.csv" | awk -F, '{ printf "| %s | %s | %s | %s of %s | %s | %s | %s | %s |\n", $1, $2, $3, $5, $4, $6, $7, $8, $9 }'
		echo
	fi
	echo "| server | phase | rate/s | from s | for s | sent | answered | answered % | failed | unfinished | retransmissions | failed: max retrans / recv timeout | replies after end | RT p50 ms | RT p99 ms |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"
	tail -n +2 "$csv" | awk -F, '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s |\n", $1, $2, $4, $5, $6, $7, $8, $11, $9, $10, $12, $13, $14, $15, $16, $17 }'
	echo
	echo "Response times are those of answered OPTIONS, from the first send (retransmissions included)."
	echo "Replies after end: 200 OKs that came for an OPTIONS already answered (the answer to a retransmission)"
	echo "or already failed. The probe's OPTIONS should all be answered:"
	for server in ${servers//,/ }; do
		awk -F, -v s="$server" '$1 == s && $2 == "probe" { printf "- %s: %s of %s answered, p50 %s ms, p99 %s ms%s\n", s, $8, $7, $16, $17, ($8 == $7 && $7 > 0) ? "" : " (NOT all answered)" }' "$csv"
	done
	echo
	echo "Steady stream per 5 s (sent / answered / failed in those seconds):"
	echo
	for server in ${servers//,/ }; do
		echo "- $server: $(timeline "$out/$server/steady" | awk '{ printf "%s%s s %s/%s/%s", (NR > 1) ? "; " : "", $1, $2, $3, $4 }')"
	done
	echo
	echo "Series before the traffic and after the probe (sipvisor's front door from /metrics, its workers'"
	echo "queues from /mi/ps; kernel_udp_* from /proc/net/udp and ss for the SIP socket, both servers; series that"
	echo "were 0 before and after are left out here, not in metrics.csv):"
	echo
	echo "| server | series | before | after |"
	echo "|---|---|---:|---:|"
	for server in ${servers//,/ }; do
		awk -v s="$server" '($2 + 0 != 0) || ($3 + 0 != 0) || $2 == "NA" || $3 == "NA" { printf "| %s | `%s` | %s | %s |\n", s, $1, $2, $3 }' "$out/$server/metrics.txt"
	done
} >"$out/burst.md"
log "wrote $csv and $out/burst.md"
cat "$out/burst.md"
