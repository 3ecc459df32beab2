#!/usr/bin/env bash
# CPU profile of a server's process tree while it relays TLS calls: the
# load of bench/tls.sh's call runs (sipload over --conns TLS connections,
# relayed to SIPp's UAS over UDP), perf recording --secs seconds once
# --warmup seconds of it have passed. bench/profile.sh drives SIPp, which
# Debian builds without TLS; this drives tls.sh.
#
#   bench/tls-profile.sh [--server sipvisor|kamailio] [--rate 300]
#                        [--secs 15] [--warmup 15] [--freq 999] [--out DIR]
#
# Writes DIR/perf.data, DIR/report.txt (symbols by self time) and
# DIR/split.txt (self time in the kernel, the Go runtime or libc, and the
# program, by process), as profile.sh does; DIR/tls/ is tls.sh's run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

server=sipvisor
rate=300
secs=15
warmup=15
freq=999
out=${BENCH_OUT:-/tmp/sipvisor-bench/tls-profile}

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(server rate secs warmup freq out)
parse_flags "$@"
need_positive rate secs warmup freq
case $server in sipvisor | kamailio) ;; *) die "--server must be sipvisor or kamailio, have '$server'" ;; esac
command -v perf >/dev/null || die "perf not installed (apt-get install -y linux-perf)"

mkdir -p "$out"
rm -rf "$out/tls" "$out/perf.data"
bash "$BENCH_DIR/tls.sh" --servers "$server" --hs-rates '' --hs-max-secs 0 --rates "$rate" \
	--secs $((warmup + secs + 5)) --warmup "$warmup" --reps 1 --out "$out/tls" >"$out/tls.log" 2>&1 &
run=$!
trap 'kill "$run" 2>/dev/null || true' EXIT
# The call phase's line names the server's tree once it is under load.
for ((i = 0; i < 120; i++)); do
	grep -q "calls $rate/s" "$out/tls.log" 2>/dev/null && break
	kill -0 "$run" 2>/dev/null || die "tls.sh ended before its calls: $(tail -3 "$out/tls.log")"
	sleep 1
done
sleep "$warmup"
case $server in
sipvisor) root=$(pgrep -f "^$out/tls/bin/sipvisor" -o) ;;
kamailio) root=$(pgrep -f "^kamailio -f $out/tls" -o) ;;
esac
[ -n "$root" ] || die "no $server process found under $out/tls"
pids=$(tree_pids "$root" | paste -sd,)
log "perf record on $server ($pids) for ${secs}s of $rate TLS calls/s"
perf record -q -g -F "$freq" -p "$pids" -o "$out/perf.data" -- sleep "$secs" 2>"$out/perf-record.log"
wait "$run" || true
trap - EXIT
grep "ok (" "$out/tls.log" | tail -1 || true
perf report -i "$out/perf.data" --no-children --stdio --sort sym -g none --percent-limit 0.5 2>/dev/null |
	grep -v '^#' | grep -v '^$' >"$out/report.txt"
perf report -i "$out/perf.data" --no-children --stdio --sort comm,sym -g none 2>/dev/null |
	awk '
		/^ *[0-9.]+%/ {
			p = $1; sub("%", "", p)
			if ($0 ~ /\[k\]/) where = "kernel"
			else if ($0 ~ /runtime\.|internal\/runtime\/|\[\.\] syscall\.|\[\.\] [a-z]+body$|\[\.\] (__|_dl|malloc|free|mem|str|pthread|epoll|futex)/) where = "runtime/libc"
			else if ($0 ~ /crypto|aes|gcm|ssl|SSL|EVP|chacha|poly1305|sha256|x25519|p256/) where = "crypto"
			else where = "program"
			tot[where] += p; all += p
		}
		END {
			for (k in tot) printf "%6.1f%%\t%s\n", tot[k], k | "sort -rn"
			close("sort -rn")
			printf "%6.1f%%\tof the samples classified\n", all
		}' >"$out/split.txt"
log "wrote $out/report.txt and split.txt"
cat "$out/split.txt"
head -30 "$out/report.txt"
