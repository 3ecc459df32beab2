#!/usr/bin/env bash
# Context switches and CPU per call of sipvisor's process tree: a quick A/B
# check for changes to how processes wake, lighter than run.sh. Calls go
# sipload uac -> sipvisor (2 UDP workers, stateful relay) -> sipload uas,
# all on 127.0.0.1.
#
#   bench/ctxsw.sh [BIN] [RATE] [CALLS]     # defaults: bin/sipvisor 300 3000
#
# REPLY_SOCKETS=yes in the environment runs the workers with
# worker_reply_sockets = yes.
#
# Context switches are counted from /proc/PID/task/*/status of the
# supervisor and its workers: a count, so it moves little with the noise of
# a shared machine, unlike time.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
BIN=${1:-bin/sipvisor}
RATE=${2:-300}
CALLS=${3:-3000}
SIP=47611 HTTP=47612 UAS=47621
[ -x bin/sipload ] || make -s build
work=$(mktemp -d)
trap 'kill $SV $UASPID 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
cat >"$work/ab.cfg" <<CFG
socket = udp:127.0.0.1:$SIP
http_listen = 127.0.0.1:$HTTP
udp_workers = 2
${REPLY_SOCKETS:+worker_reply_sockets = yes}
timer_workers = 1
$(relay_route $UAS)
CFG
"$BIN" -f "$work/ab.cfg" >"$work/sipvisor.log" 2>&1 &
SV=$!
bin/sipload -sn uas -i 127.0.0.1 -p $UAS -q >/dev/null 2>&1 &
UASPID=$!
for _ in $(seq 1 100); do curl -fsS http://127.0.0.1:$HTTP/readyz >/dev/null 2>&1 && break; sleep 0.1; done
tree() { echo $SV; pgrep -P $SV || true; }
switches() { for p in $(tree); do cat /proc/$p/task/*/status 2>/dev/null; done | awk '/ctxt_switches:/ { n += $2 } END { print n + 0 }'; }
ticks() { for p in $(tree); do awk '{ print $14 + $15 }' /proc/$p/stat 2>/dev/null; done | awk '{ n += $1 } END { print n + 0 }'; }
c0=$(switches) t0=$(ticks)
bin/sipload 127.0.0.1:$SIP -sn uac -i 127.0.0.1 -r "$RATE" -m "$CALLS" -q >"$work/uac.out" 2>&1 || true
c1=$(switches) t1=$(ticks)
hz=$(getconf CLK_TCK)
awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) -v n="$CALLS" -v hz="$hz" -v ok="$(grep -o 'succeeded [0-9]*' "$work/uac.out" | head -1)" \
	'BEGIN { printf "%s of %d calls: %.1f context switches and %.3f CPU ms per call\n", ok, n, c / n, t * 1000 / hz / n }'
