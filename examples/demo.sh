#!/usr/bin/env bash
# Reproduce the OpenSIPS 3.0 auto-scaling experiment on 127.0.0.1: sipvisor
# with the blog post's profile, sipload as UAS behind it, and sipload as UAC
# with traffic swinging from 10 to 350 calls/s. Leaves the per-second CSV
# and the chart in $OUT (default out/demo). Lasts about five minutes and
# stops by itself.
#
#   SCHEDULE='10/20s,350/60s,10/60s' examples/demo.sh    # a shorter run
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-out/demo}
SCHEDULE=${SCHEDULE:-10/20s,100/40s,10/40s,350/150s,10/60s}
PLOT=${PLOT:-$OUT/run.svg}
mkdir -p "$OUT"
make -s build

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

bin/sipvisor -f examples/demo.cfg >"$OUT/sipvisor.log" 2>&1 &
pids+=($!)
bin/sipload -sn uas -i 127.0.0.1 -p 5070 -q >"$OUT/uas.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 100); do
	if curl -fsS http://127.0.0.1:8888/readyz >/dev/null 2>&1; then break; fi
	sleep 0.1
done
curl -fsS http://127.0.0.1:8888/readyz >/dev/null

echo "running the schedule $SCHEDULE; sipvisor's log is in $OUT/sipvisor.log"
status=0
bin/sipload 127.0.0.1:5060 -sn uac -i 127.0.0.1 \
	--schedule "$SCHEDULE" \
	--scrape http://127.0.0.1:8888/metrics \
	--csv "$OUT/run.csv" --plot "$PLOT" --max-failed 10 || status=$?
grep -E 'scaling (up|down)' "$OUT/sipvisor.log" | sed 's/^/  /' || true
echo "chart: $PLOT  per-second data: $OUT/run.csv"
exit $status
