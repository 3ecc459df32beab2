#!/usr/bin/env bash
# What a banned source costs: sipvisor with the built-in config's
# thresholds (pike_requests = 100 per 2 s, ban_action = drop) beside
# Kamailio's pike and ipban htable (bench/kamailio-pike.cfg, the same
# thresholds), one after the other in one run. For each: SIPp floods the
# server with OPTIONS from 127.0.0.1 until the source is banned, then sends
# RATE datagrams a second for SECS seconds, each exactly once
# (bench/flood-uac.xml), and the CPU of the server's whole process tree
# over the flood, less what it spends idle over as long, is divided by the
# datagrams sent.
#
#   bench/ban-perf.sh [--rate 5000] [--secs 5] [--out DIR]
#
# Writes DIR/SERVER/ (logs, SIPp's output) and prints the table.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rate=5000
secs=5
out=${BENCH_OUT:-/tmp/sipvisor-bench/ban-perf}
CHILDREN=$(nproc)

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in -h | --help) usage ;; esac
	[ $# -ge 2 ] || die "flag $1 needs a value"
	case $1 in
	--rate) rate=$2 ;;
	--secs) secs=$2 ;;
	--out) out=$2 ;;
	*) echo "ban-perf.sh: unknown flag $1" >&2; usage ;;
	esac
	shift 2
done
for v in rate secs; do
	[[ ${!v} =~ ^[0-9]+$ ]] && ((${!v} > 0)) || die "--$v must be a positive integer, have '${!v}'"
done
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
command -v kamailio >/dev/null || die "kamailio not installed: run make bench-install"

mkdir -p "$out"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
build_sipvisor "$out"

# flood DIR COUNT RATE sends COUNT datagrams at RATE a second from
# 127.0.0.1, one per SIPp call, and waits for SIPp to end.
flood() {
	mkdir -p "$1"
	(cd "$1" && timeout -k 5 $(($2 / $3 + 60)) sipp -sf "$BENCH_DIR/flood-uac.xml" "127.0.0.1:$SIP_PORT" \
		-i 127.0.0.1 -p "$UAC_PORT" -r "$3" -m "$2" -l $(($3 * 10 + 100)) \
		-nostdin -buff_size 4194304 >sipp.out 2>&1) || die "sipp flood: $(tail -3 "$1/sipp.out")"
}

metric() { # NAME: the sum of a sipvisor metric's samples
	curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { print s + 0 }'
}

results=()
for server in sipvisor kamailio; do
	work=$out/$server
	rm -rf "$work"
	mkdir -p "$work"
	pick_ports
	case $server in
	sipvisor)
		# The built-in config's bans on the benchmark's server (no
		# exemption: the flood comes from 127.0.0.1).
		BENCH_SIPVISOR_SET=$'pike_requests = 100\npike_window = 2s\nban_time = 300s\nban_action = drop' \
			start_server sipvisor "$work"
		;;
	kamailio) KAMAILIO_CFG=$BENCH_DIR/kamailio-pike.cfg start_server kamailio "$work" ;;
	esac
	# Past 100 in 2 s: banned.
	flood "$work/trigger" 1000 1000
	if [ "$server" = sipvisor ]; then
		[ "$(metric sipvisor_frontdoor_bans)" = 1 ] || die "sipvisor did not ban the flood's source: $("$SIPVISOR_BIN" ctl -addr "http://127.0.0.1:$HTTP_PORT" bans)"
		"$SIPVISOR_BIN" ctl -addr "http://127.0.0.1:$HTTP_PORT" bans >&2
		before_dropped=$(metric sipvisor_frontdoor_banned_datagrams_total)
	fi
	sleep 1
	idle0=$(tree_cpu_exact "$SERVER_PID")
	sleep "$secs"
	idle1=$(tree_cpu_exact "$SERVER_PID")
	n=$((rate * secs))
	c0=$(tree_cpu_exact "$SERVER_PID")
	t0=$(date +%s.%N)
	flood "$work/flood" "$n" "$rate"
	t1=$(date +%s.%N)
	c1=$(tree_cpu_exact "$SERVER_PID")
	dropped=NA
	if [ "$server" = sipvisor ]; then
		dropped=$(($(metric sipvisor_frontdoor_banned_datagrams_total) - before_dropped))
	fi
	row=$(awk -v s="$server" -v n="$n" -v i0="$idle0" -v i1="$idle1" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v secs="$secs" -v d="$dropped" '
		BEGIN {
			el = t1 - t0; idle = (i1 - i0) / secs * el; cpu = c1 - c0
			printf "| %s | %d | %.1f | %.3f | %.3f | %.2f | %.2f | %s |", s, n, el, cpu, idle, cpu * 1e6 / n, (cpu - idle) * 1e6 / n, d
		}')
	log "$row"
	results+=("$row")
	stop_server
done
echo "| server | datagrams | seconds | CPU s | idle CPU s | CPU µs per datagram | less idle | counted banned |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${results[@]}"
