#!/usr/bin/env bash
# CPU and context switches per call of each process of sipvisor's tree (the
# supervisor, each worker): where a proxied call's cost lands. SIPp UAC ->
# sipvisor (2 UDP workers, stateful relay) -> SIPp UAS on 127.0.0.1, counted
# from /proc before and after the run.
#
#   bench/perproc.sh [SETTING] [RATE] [SECS]   # defaults: '' 1000 10
#
# SETTING is one config line added to the server's, such as
# 'udp_direct_reads = no' or 'worker_reply_sockets = yes'.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
SETTING=${1:-} RATE=${2:-1000} SECS=${3:-10}
SIP=47711 HTTP=47712 UAS=47721 UAC=47731
[ -x bin/sipvisor ] || make -s build
command -v sipp >/dev/null || { echo "perproc.sh: sipp not installed: run make bench-install" >&2; exit 2; }
work=$(mktemp -d)
SV= UASPID=
trap 'kill $SV $UASPID 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
cat >"$work/pp.cfg" <<CFG
socket = udp:127.0.0.1:$SIP
http_listen = 127.0.0.1:$HTTP
udp_workers = 2
timer_workers = 1
log_level = error
$SETTING
$(relay_route $UAS)
CFG
bin/sipvisor -f "$work/pp.cfg" >"$work/sipvisor.log" 2>&1 &
SV=$!
sipp -sn uas -i 127.0.0.1 -p $UAS -nostdin >/dev/null 2>&1 &
UASPID=$!
for _ in $(seq 1 100); do curl -fsS http://127.0.0.1:$HTTP/readyz >/dev/null 2>&1 && break; sleep 0.1; done
sleep 2 # direct reads start once admission has been open a second
# PID TICKS SWITCHES ROLE for the supervisor and each child.
snap() {
	for p in $SV $(pgrep -P $SV); do
		role=$(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^SIPVISOR_GROUP=//p')
		echo "$p $(awk '{ print $14 + $15 }' "/proc/$p/stat") $(cat /proc/$p/task/*/status | awk '/ctxt_switches:/ { n += $2 } END { print n }') ${role:-supervisor}"
	done | sort
}
snap >"$work/before"
calls=$((RATE * SECS))
sipp -sn uac 127.0.0.1:$SIP -i 127.0.0.1 -p $UAC -r "$RATE" -m "$calls" -nostdin \
	-trace_stat -stf "$work/stat.csv" -fd 1 >"$work/uac.out" 2>&1 || true
snap >"$work/after"
# A refused call costs less than a proxied one: the count of those that
# completed says whether the figures below are of proxied calls.
ok=$(awk -F';' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "SuccessfulCall(C)") c = i; next } { v = $c } END { print (c && v != "") ? v : "NA" }' "$work/stat.csv" 2>/dev/null || echo NA)
echo "${SETTING:-defaults}, $calls calls at $RATE/s, $ok completed:"
join "$work/before" "$work/after" | awk -v n="$calls" -v hz="$(getconf CLK_TCK)" '
	{ printf "  %-8s %-28s %.3f CPU ms, %.2f context switches per call\n", $1, $4, ($5 - $2) * 1000 / hz / n, ($6 - $3) / n
	  c += $5 - $2; s += $6 - $3 }
	END { printf "  total                             %.3f CPU ms, %.2f context switches per call\n", c * 1000 / hz / n, s / n }'
