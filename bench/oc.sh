#!/usr/bin/env bash
# A slow backend behind a front, with and without RFC 7339 between them:
# the slow backend is a sipvisor with one worker that blocks 40 ms on each
# INVITE (capacity C about 25 calls/s), proxying to a SIPp callee; the
# other backend is a SIPp callee. The front chooses the slow one first
# (algorithm 8) and fails over on 408 and 5xx; a SIPp caller offers RATE
# calls/s, about three times C. Three fronts in the same harness:
#   sipvisor-oc    examples/dispatcher.cfg (ds_overload_control = yes)
#   sipvisor-nooc  the same with ds_overload_control = no
#   kamailio       bench/oc-kamailio.cfg, Kamailio's dispatcher
# For each: the calls through, the slow backend's goodput (calls it
# admitted a second, and as a share of C), what it refused, its CPU, and
# what the front shed.
#
#   bench/oc.sh [--fronts "sipvisor-oc sipvisor-nooc kamailio"] [--rate 75]
#               [--secs 20] [--out DIR]
#
# Writes DIR/oc.md (the table) and each run's logs under DIR/FRONT/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

fronts="sipvisor-oc sipvisor-nooc kamailio"
rate=75
secs=20
out=${BENCH_OUT:-/tmp/sipvisor-bench/oc}
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(fronts rate secs out)
parse_flags "$@"
need_positive rate secs
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
mkdir -p "$out/bin"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

log "go build"
(cd "$REPO_DIR" && go build -o "$out/bin/sipvisor" ./cmd/sipvisor)
SIPVISOR_BIN=$out/bin/sipvisor
C=25 # 1 s / 40 ms

pick_ports
FRONT=$PORT_BASE SLOW=$((PORT_BASE + 1)) CALLEE_A=$((PORT_BASE + 10)) CALLEE_B=$((PORT_BASE + 11))
CALLER=$((PORT_BASE + 20)) FRONT_HTTP=$((PORT_BASE + 30)) SLOW_HTTP=$((PORT_BASE + 31))

start_bg() { # LOG CMD... starts CMD in the background, recorded for cleanup
	local logf=$1
	shift
	"$@" >"$logf" 2>&1 &
	BG_PIDS+=($!)
	LAST_PID=$!
}
ready() { # PORT: a sipvisor's /readyz within 30 s
	local i
	for ((i = 0; i < 300; i++)); do
		curl -sf -o /dev/null "http://127.0.0.1:$1/readyz" && return 0
		sleep 0.1
	done
	die "sipvisor on http port $1 not ready"
}
metric_sum() { # HTTPPORT NAME [LABEL-MATCH]: the sum of a metric's series
	curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" -v m="${3:-}" \
		'$1 ~ "^"n"([{]|$)" && index($1, m) { s += $NF } END { printf "%.0f\n", s }'
}

{
	printf '| front | calls | through | slow backend admitted | goodput (calls/s, share of C=%d) | refused there | its CPU s | front shed |\n' "$C"
	printf '|---|---|---|---|---|---|---|---|\n'
} >"$out/oc.md"

for front in $fronts; do
	dir=$out/$front
	rm -rf "$dir"
	mkdir -p "$dir"
	log "$front: callees, slow backend"
	start_bg "$dir/callee-a.log" sipp -sf "$REPO_DIR/examples/sipp-uas-rr.xml" -aa -i 127.0.0.1 -p "$CALLEE_A" -nostdin -buff_size 4194304
	start_bg "$dir/callee-b.log" sipp -sf "$REPO_DIR/examples/sipp-uas-rr.xml" -aa -i 127.0.0.1 -p "$CALLEE_B" -nostdin -buff_size 4194304
	cat >"$dir/slow.cfg" <<CFG
socket = udp:127.0.0.1:$SLOW
http_listen = 127.0.0.1:$SLOW_HTTP
udp_workers = 1
udp_direct_reads = no
route {
	if (has_totag()) {
		if (!loose_route()) \$du = "sip:127.0.0.1:$CALLEE_A";
		t_relay();
		exit;
	}
	if (is_method("CANCEL")) { if (t_check_trans()) t_relay(); exit; }
	t_check_trans();
	if (is_method("INVITE")) { record_route(); usleep(40000); }
	\$du = "sip:127.0.0.1:$CALLEE_A";
	if (!t_relay()) sl_send_reply(500, "Internal Server Error");
}
CFG
	start_bg "$dir/slow.log" "$SIPVISOR_BIN" -f "$dir/slow.cfg"
	SLOW_PID=$LAST_PID
	ready "$SLOW_HTTP"
	printf '1 sip:127.0.0.1:%d 0 10\n1 sip:127.0.0.1:%d 0 5\n' "$SLOW" "$CALLEE_B" >"$dir/backends.list"
	log "$front: front"
	case $front in
	sipvisor-oc | sipvisor-nooc)
		oc=yes
		[ "$front" = sipvisor-oc ] || oc=no
		sed -e "s/^socket = udp:127.0.0.1:5060/socket = udp:127.0.0.1:$FRONT\nhttp_listen = 127.0.0.1:$FRONT_HTTP/" \
			-e "s#^ds_list_file = .*#ds_list_file = \"$dir/backends.list\"#" \
			-e "s/^ds_overload_control = .*/ds_overload_control = $oc/" \
			-e 's/ds_select_dst(1, 0)/ds_select_dst(1, 8)/' \
			"$REPO_DIR/examples/dispatcher.cfg" >"$dir/front.cfg"
		start_bg "$dir/front.log" "$SIPVISOR_BIN" -f "$dir/front.cfg"
		ready "$FRONT_HTTP"
		;;
	kamailio)
		command -v kamailio >/dev/null || die "kamailio not installed"
		sed -e "s/@SIP_PORT@/$FRONT/" -e "s/@CHILDREN@/2/" -e "s#@LIST@#$dir/backends.list#" \
			"$BENCH_DIR/oc-kamailio.cfg" >"$dir/front.cfg"
		start_bg "$dir/front.log" kamailio -f "$dir/front.cfg" -DD -E -m 256 -M 16
		sleep 2
		;;
	*) die "unknown front $front" ;;
	esac
	sleep 2 # a probe of each backend answered
	adm0=$(metric_sum "$SLOW_HTTP" sipvisor_frontdoor_admitted_sessions_total 'kind="call"')
	ref0=$(metric_sum "$SLOW_HTTP" sipvisor_frontdoor_refused_sessions_total)
	cpu0=$(tree_cpu_exact "$SLOW_PID")
	count=$((rate * secs))
	log "$front: $count calls at $rate/s"
	(cd "$dir" && timeout -k 5 $((secs + 90)) sipp -sf "$REPO_DIR/examples/sipp-uac-rr.xml" -s service "127.0.0.1:$FRONT" \
		-i 127.0.0.1 -p "$CALLER" -r "$rate" -m "$count" -l $((rate * 40)) -nostdin -buff_size 4194304 \
		-trace_stat -stf stat.csv -fd 1 -timeout $((secs + 60))s >sipp.out 2>&1) || true
	adm=$(($(metric_sum "$SLOW_HTTP" sipvisor_frontdoor_admitted_sessions_total 'kind="call"') - adm0))
	ref=$(($(metric_sum "$SLOW_HTTP" sipvisor_frontdoor_refused_sessions_total) - ref0))
	cpu=$(awk -v a="$(tree_cpu_exact "$SLOW_PID")" -v b="$cpu0" 'BEGIN { printf "%.2f", a - b }')
	ok=$(grep -oE 'Successful call +\| +[0-9]+ +\| +[0-9]+' "$dir/sipp.out" | awk '{ print $NF }' | tail -1)
	shed=NA
	if [ "$front" != kamailio ]; then
		shed=$(metric_sum "$FRONT_HTTP" sipvisor_dispatcher_shed_total "$SLOW")
	fi
	awk -v f="$front" -v n="$count" -v ok="${ok:-NA}" -v adm="$adm" -v s="$secs" -v c="$C" -v ref="$ref" -v cpu="$cpu" -v shed="$shed" 'BEGIN {
		printf "| %s | %d | %s | %d | %.1f (%.2f) | %d | %.2f | %s |\n", f, n, ok, adm, adm / s, adm / s / c, ref, cpu, shed }' >>"$out/oc.md"
	for p in "${BG_PIDS[@]}"; do end_tree "$p" 10; done
	BG_PIDS=()
done
cat "$out/oc.md"
