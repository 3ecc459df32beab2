#!/usr/bin/env bash
# The OpenSIPS 3.0 auto-scaling experiment of examples/demo.sh, driven by
# SIPp instead of sipload: SIPp's built-in uac, in its default mode (UDP, the
# INVITE retransmitted from 500 ms on, the BYE too), one SIPp process per
# phase, through sipvisor (examples/demo.cfg: 4 workers, "scale up to 6 on
# 70% for 4 cycles within 5, scale down to 2 on 18% for 10 cycles") to a
# sipload UAS. Everything listens on 127.0.0.1, on free ports from PORT_BASE.
#
#   examples/demo-sipp.sh                                   # about 4.5 minutes
#   PHASES='10/20s,300/60s,10/150s' INVITE_US=15000 examples/demo-sipp.sh
#
# PHASES is 'CPS/SECONDS,...'. The default follows the blog post: 10 calls/s,
# then 350, then 10 again. INVITE_US is the script's cost per new INVITE
# (usleep); the default, 10 ms, is demo.cfg's, and what the post's figures
# imply (100 calls/s kept 4 processes under 25 %, 350 calls/s held 5 near 70 %).
#
# How long the last phase must last: a group drains no worker within
# auto_scaling_cooldown cycles of its last fork, 10 x 10 = 100 cycles of 1 s
# by default, and only once its last 10 samples were all under 18 %. The last
# fork comes in the busy phase, at its very end at worst; the load falls
# under 18 % within a cycle or two of the calls slowing down, so the 10 low
# samples are there after ~12 s, well inside the cooldown. The first drain is
# then at most 100 s into the last phase, and the others follow one per cycle
# (6 to 2 is 4 drains, 3 more cycles), each worker exiting once its last
# transactions end: 100 + 3 + a few seconds. 150 s leaves margin for a busy
# machine. A busy phase of 60 s with its forks in its first ~10 s puts the
# drains about 50 s into the last phase.
#
# Leaves in $OUT (default out/demo-sipp): workers.csv (every second: the busy
# group's ready, spawning and draining workers and its load), phases.csv,
# SIPp's per-second statistics, screens and unexpected messages per phase,
# sipvisor's log and its last metrics. Prints a summary; exits 1 when a call
# failed, or the group did not reach its scale-up limit in the busiest phase
# or come back to its scale-down limit in the last one.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-out/demo-sipp}
PHASES=${PHASES:-10/20s,350/60s,10/150s}
INVITE_US=${INVITE_US:-10000}
PORT_BASE=${PORT_BASE:-35060}

command -v sipp >/dev/null || { echo "sipp not found (apt-get install -y sip-tester)" >&2; exit 2; }

# Phases.
rates=() secs=()
IFS=, read -r -a specs <<<"$PHASES"
for s in "${specs[@]}"; do
	if ! [[ $s =~ ^([0-9]+)/([0-9]+)s?$ ]] || [ "${BASH_REMATCH[1]}" -eq 0 ] || [ "${BASH_REMATCH[2]}" -eq 0 ]; then
		echo "PHASES: '$s' is not CPS/SECONDS (such as 350/60s)" >&2
		exit 2
	fi
	rates+=("${BASH_REMATCH[1]}")
	secs+=("${BASH_REMATCH[2]}")
done
nphases=${#rates[@]}
[ "$nphases" -ge 2 ] || { echo "PHASES: give at least two phases" >&2; exit 2; }
peak=0
for ((i = 1; i < nphases; i++)); do
	if [ "${rates[i]}" -gt "${rates[peak]}" ]; then peak=$i; fi
done
lastp=$((nphases - 1))
[ "$peak" -lt "$lastp" ] || { echo "PHASES: the busiest phase must not be the last" >&2; exit 2; }
[[ $INVITE_US =~ ^[0-9]+$ ]] || { echo "INVITE_US: a number of microseconds" >&2; exit 2; }

# Ports: SIP, UAS, SIPp's UAC and its control port (UDP), HTTP (TCP).
port_free() {
	! ss -Hlun "sport = :$1" 2>/dev/null | grep -q . &&
		! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}
for ((try = 0; ; try++)); do
	[ "$try" -lt 20 ] || { echo "no free ports from ${PORT_BASE} on (set PORT_BASE)" >&2; exit 2; }
	SIP=$PORT_BASE UAS=$((PORT_BASE + 10)) UAC=$((PORT_BASE + 20)) CP=$((PORT_BASE + 21)) HTTP=$((PORT_BASE + 28))
	ok=1
	for p in $SIP $UAS $UAC $CP $HTTP; do port_free "$p" || ok=; done
	[ -n "$ok" ] && break
	PORT_BASE=$((PORT_BASE + 100))
done
GROUP="udp:127.0.0.1:$SIP"
URL="http://127.0.0.1:$HTTP"

rm -rf "$OUT"
mkdir -p "$OUT"
make -s build

# demo.cfg on these ports, with this cost per INVITE.
cfg=$OUT/sipvisor.cfg
sed -e "s/udp:127\.0\.0\.1:5060/udp:127.0.0.1:$SIP/" \
	-e "s/^http_listen = 127\.0\.0\.1:8888/http_listen = 127.0.0.1:$HTTP/" \
	-e "s/sip:127\.0\.0\.1:5070/sip:127.0.0.1:$UAS/g" \
	-e "s/usleep(10000)/usleep($INVITE_US)/" examples/demo.cfg >"$cfg"
for want in "socket = $GROUP" "http_listen = 127.0.0.1:$HTTP" "sip:127.0.0.1:$UAS" "usleep($INVITE_US)"; do
	grep -qF "$want" "$cfg" || { echo "examples/demo.cfg changed: no '$want' in $cfg" >&2; exit 2; }
done
bin/sipvisor -c -f "$cfg" >/dev/null
up_to=$(sed -n 's/.*scale up to \([0-9]*\).*/\1/p' "$cfg")
down_to=$(sed -n 's/.*scale down to \([0-9]*\).*/\1/p' "$cfg")

# Every process started is recorded here and ended by its pid.
pids=()
stop_pid() { # PID GRACE_SECONDS
	local pid=$1 i
	kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	local i
	touch "$OUT/.stop"
	# Newest first: SIPp and the poller, then the UAS, then sipvisor, whose
	# workers die with it (Pdeathsig).
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pid "${pids[i]}" 30; done
	pids=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%3N; }

bin/sipvisor -f "$cfg" >"$OUT/sipvisor.log" 2>&1 &
pids+=($!)
bin/sipload -sn uas -i 127.0.0.1 -p "$UAS" -q >"$OUT/uas.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
	curl -fsS --max-time 1 "$URL/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fsS --max-time 1 "$URL/readyz" >/dev/null

# Every second: the busy group's workers per state and its load.
echo 0 >"$OUT/.phase"
poll() {
	local line
	echo "time_unix,phase,ready,spawning,draining,load_pct" >"$OUT/workers.csv"
	while [ ! -e "$OUT/.stop" ]; do
		line=$(curl -fsS --max-time 1 "$URL/metrics" 2>/dev/null | awk -v g="$GROUP" '
			function is(name) { return index($0, name " ") == 1 }
			is("sipvisor_pool_workers{group=\"" g "\",state=\"ready\"}") { r = $2 }
			is("sipvisor_pool_workers{group=\"" g "\",state=\"spawning\"}") { s = $2 }
			is("sipvisor_pool_workers{group=\"" g "\",state=\"draining\"}") { d = $2 }
			is("sipvisor_profile_load_ratio{group=\"" g "\"}") { l = $2 * 100 }
			END { if (r != "") printf "%s,%s,%s,%.1f", r, s, d, l }') || true
		if [ -n "$line" ]; then echo "$(now),$(cat "$OUT/.phase"),$line" >>"$OUT/workers.csv"; fi
		sleep 1
	done
}
poll &
pids+=($!)

echo "phases $PHASES, ${INVITE_US} us per INVITE; SIP 127.0.0.1:$SIP, control $URL, output in $OUT"
echo "phase,rate,seconds,calls,start_unix,end_unix,sipp_exit" >"$OUT/phases.csv"
starts=() ends=()
for ((i = 0; i < nphases; i++)); do
	r=${rates[i]} d=${secs[i]} n=$((rates[i] * secs[i]))
	echo "$((i + 1))" >"$OUT/.phase.new" && mv "$OUT/.phase.new" "$OUT/.phase"
	t0=$(now)
	starts+=("$t0")
	echo "$(date +%T) phase $((i + 1)): $r calls/s for ${d}s ($n calls)"
	# SIPp writes its files into the current directory: run it in $OUT. A
	# call ends within 64*T1 (32 s) of its last unanswered retransmission,
	# so -timeout bounds the phase.
	(cd "$OUT" && exec sipp -sn uac "127.0.0.1:$SIP" -i 127.0.0.1 -p "$UAC" -cp "$CP" \
		-r "$r" -m "$n" -nostdin -buff_size 4194304 \
		-trace_stat -stf "sipp-$((i + 1))-stat.csv" -fd 1 \
		-trace_err -error_file "sipp-$((i + 1))-errors.log" \
		-trace_screen -screen_file "sipp-$((i + 1))-screen.log" \
		-timeout "$((d + 60))s" -timeout_error >"sipp-$((i + 1)).out" 2>&1) &
	sp=$!
	pids+=("$sp")
	rc=0
	wait "$sp" || rc=$?
	unset 'pids[${#pids[@]}-1]'
	ends+=("$(now)")
	echo "$((i + 1)),$r,$d,$n,$t0,${ends[i]},$rc" >>"$OUT/phases.csv"
done

touch "$OUT/.stop"
curl -fsS --max-time 2 "$URL/metrics" >"$OUT/metrics.txt" || true
bin/sipvisor ctl -addr "$URL" stats --json >"$OUT/stats.json" 2>&1 || true
cleanup

# Summary.
stat() { # PHASE COLUMN: the column's value in SIPp's last statistics row
	awk -F';' -v want="$2" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		{ last = $0 } END { split(last, f, ";"); v = f[col[want]]; print (v == "" ? 0 : v) }' \
		"$OUT/sipp-$1-stat.csv" 2>/dev/null || echo 0
}
rel() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%6.1f", a - b }'; }
echo
echo "== SIPp, per phase"
printf '%-6s %6s %7s %8s %10s %7s %8s  %s\n' phase cps secs created successful failed retrans "failure causes, notes, exit"
total_failed=0
for ((i = 0; i < nphases; i++)); do
	p=$((i + 1))
	failed=$(stat "$p" 'FailedCall(C)')
	total_failed=$((total_failed + failed))
	causes=
	for c in FailedMaxUDPRetrans FailedUnexpectedMessage FailedCallRejected FailedTimeoutOnRecv FailedCannotSendMessage FailedOutboundCongestion FailedTimeoutOnSend; do
		v=$(stat "$p" "$c(C)")
		if [ "$v" != 0 ]; then causes+="$c=$v "; fi
	done
	# The responses that aborted calls; messages for calls already ended
	# (a 200 retransmitted after the BYE) are counted apart.
	codes=$(grep -aoE "Aborting call on unexpected message.*received 'SIP/2\.0 [0-9]{3}" "$OUT/sipp-$p-errors.log" 2>/dev/null |
		grep -oE '[0-9]{3}$' | sort | uniq -c | awk '{printf "%s x%s ", $2, $1}') || true
	if [ -n "$codes" ]; then causes+="aborted on: $codes"; fi
	dead=$(stat "$p" 'DeadCallMsgs(C)')
	if [ "$dead" != 0 ]; then causes+="dead-call msgs=$dead "; fi
	rc=$(awk -F, -v p="$p" '$1 == p { print $7 }' "$OUT/phases.csv")
	printf '%-6s %6s %7s %8s %10s %7s %8s  %s\n' "$p" "${rates[i]}" \
		"$(rel "${ends[i]}" "${starts[i]}")" "$(stat "$p" 'TotalCallCreated')" \
		"$(stat "$p" 'SuccessfulCall(C)')" "$failed" "$(stat "$p" 'Retransmissions(C)')" "${causes}exit $rc"
done

echo
echo "== scaling, seconds from the start of the phase it happened in"
grep -E 'msg="scaling (up|down)"' "$OUT/sipvisor.log" | grep -F "group=$GROUP " >"$OUT/scaling.log" || true
while read -r line; do
	ts=$(sed -n 's/^time=\([^ ]*\).*/\1/p' <<<"$line")
	t=$(date -d "$ts" +%s.%3N)
	p=0
	for ((i = 0; i < nphases; i++)); do
		if awk -v t="$t" -v s="${starts[i]}" 'BEGIN { exit !(t >= s) }'; then p=$i; fi
	done
	dir=$(sed -n 's/.*msg="scaling \([a-z]*\)".*/\1/p' <<<"$line")
	w=$(sed -n 's/.* workers=\([0-9]*\).*/\1/p' <<<"$line")
	load=$(sed -n 's/.* load=\([0-9.]*\).*/\1/p' <<<"$line")
	printf '  phase %d (%s/s) +%ss  %-4s to %s workers  (load %s%%)\n' $((p + 1)) "${rates[p]}" "$(rel "$t" "${starts[p]}")" "$dir" "$w" "$load"
done <"$OUT/scaling.log"

# first_sample PHASE AWK_CONDITION: seconds from the phase's start to the
# first per-second sample in it that meets the condition, or "never".
first_sample() {
	awk -F, -v p="$1" -v s="${starts[$1 - 1]}" "NR > 1 && \$2 == p && ($2) { printf \"%.1f\", \$1 - s; found = 1; exit }
		END { if (!found) print \"never\" }" "$OUT/workers.csv"
}
secs_or_never() { if [ "$1" = never ]; then echo never; else echo "$1 s"; fi; }
status=0
echo
echo "== summary"
echo "  failed calls: $total_failed (target 0)"
[ "$total_failed" -eq 0 ] || status=1
pk=$((peak + 1)) lp=$((lastp + 1))
to_max=$(first_sample "$pk" "\$3 >= $up_to")
echo "  phase $pk (${rates[peak]}/s): $up_to workers ready after: $(secs_or_never "$to_max")"
[ "$to_max" != never ] || status=1
to_min=$(first_sample "$lp" "\$3 == $down_to")
gone=$(first_sample "$lp" "\$3 == $down_to && \$5 == 0")
echo "  phase $lp (${rates[lastp]}/s): $down_to workers ready after: $(secs_or_never "$to_min"); drained workers gone after: $(secs_or_never "$gone")"
[ "$to_min" != never ] || status=1
echo "  peak load per phase (%), most workers ready:"
awk -F, 'NR > 1 { if ($6 > l[$2]) l[$2] = $6; if ($3 > w[$2]) w[$2] = $3 }
	END { for (p in l) printf "    phase %s: load %.1f, workers %d\n", p, l[p], w[p] }' "$OUT/workers.csv" | sort
echo "  sipvisor counters (non-zero):"
grep -E '^sipvisor_(frontdoor_refused_sessions_total|frontdoor_retransmissions_absorbed_total|frontdoor_datagrams_dropped_total|pool_stale_requests_dropped_total|overload_throttle_refused_ratio)' "$OUT/metrics.txt" 2>/dev/null |
	awk '$2 != 0 { print "    " $0 }' || true
echo "  scaling lines: $OUT/scaling.log  workers per second: $OUT/workers.csv"
exit $status
