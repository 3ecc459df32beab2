#!/usr/bin/env bash
# sipvisor and Kamailio at once, each refusing every new session (as
# run.sh --refuse-rates has them) under its own SIPp at the same rate, their
# CPU counted over the same seconds: what one server spent beside what the
# other spent while the machine was the same for both.
#
#   bench/pair.sh [--rate 200] [--secs 30] [--rounds 5] [--first sipvisor|kamailio]
#                 [--against REV] [--out DIR]
#
# Run one after the other, as run.sh does, single repetitions of either
# server on this virtual machine spread by half or more (Kamailio refusing
# 200/s read 0.059 to 0.127 ms a refusal in one run), more than the gap
# between them: whatever slows the machine for a while (its host, its
# neighbours) slows one server's repetition and not the other's. Side by
# side, both see it. Each round counts both trees' CPU (bench/lib.sh
# tree_cpu_exact) over the same SECS seconds of steady load, after the
# first 5 s of each UAC, and prints the ratio; the summary is the median
# of the rounds' ratios and each server's median CPU a refusal.
#
# Both servers and both UACs share the machine's cores: at 200/s they use
# a few per cent of one, and what each costs the other is alike for both.
#
# SIPVISOR_CFG names another sipvisor config template than
# bench/sipvisor.cfg, as for run.sh (one UDP worker, say).
#
# --first says which server starts first, and its UAC: the order counts.
# Two sipvisors of the same build, started first and third, read 8 % apart
# at 200/s (2 % at 1,000/s) in every round, the first the dearer, with the
# same Call-IDs from both UACs; sipvisor started first read 1.16 against
# Kamailio, started second 1.04, in two runs one after the other. Why is not
# known. A comparison is the two orders' results together.
#
# --against REV runs a third server at the same time, sipvisor built from
# the commit REV, under a third SIPp: each round then also says what the
# build measured cost beside REV's in the same seconds (a change of a few
# per cent shows there, in every round, where two runs one after the other
# differ by more: the machine's pace moves both servers' CPU by half).
#
# Writes DIR/pair.csv (round, server, refused, cpu_s, ms_per_refusal; the
# server "against" is REV's build) and DIR/summary.txt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rate=200
secs=30
rounds=5
first=sipvisor
against=
out=${BENCH_OUT:-/tmp/sipvisor-bench/pair}
CHILDREN=$(nproc)

usage() { sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(rate secs rounds first against out)
parse_flags "$@"
need_positive rate secs rounds
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
command -v kamailio >/dev/null || die "kamailio not installed: run make bench-install"

# The UACs' stat files are read once the rounds are over; each UAC runs
# for all of them, and a round's count of refusals is the rate times its
# seconds (open loop: SIPp sends at its rate whatever the server does). A
# UAC that fails a call fails the round.
warm=5
total=$((warm + rounds * secs + 5))

rm -rf "$out"
mkdir -p "$out"
trap pair_cleanup EXIT
trap 'exit 130' INT TERM
PIDS=()
pair_cleanup() {
	local p
	for p in "${PIDS[@]}"; do end_tree "$p" 20; done
	bench_cleanup
}
case $first in
sipvisor) SERVERS=(sipvisor kamailio) ;;
kamailio) SERVERS=(kamailio sipvisor) ;;
*) die "--first must be sipvisor or kamailio, have '$first'" ;;
esac
if [ -n "$against" ]; then
	# REV's build first: build_sipvisor leaves SIPVISOR_BIN at the last.
	rev=$(git -C "$REPO_DIR" rev-parse --short --verify "$against^{commit}" 2>/dev/null) ||
		die "--against: no commit '$against'"
	mkdir -p "$out/against/src"
	git -C "$REPO_DIR" archive "$rev" | tar -x -C "$out/against/src"
	log "make build ($rev, in $out/against/src)"
	make -s -C "$out/against/src" build VERSION="$rev" >&2
	AGAINST_BIN=$out/against/src/bin/sipvisor
	SERVERS+=(against)
fi
build_sipvisor "$out"
machine_info >"$out/machine.txt"
echo "settings: rate=$rate secs=$secs rounds=$rounds children=$CHILDREN version=$SIPVISOR_VERSION first=$first against=${rev:-}" >>"$out/machine.txt"

# One server on the ports from the base up, the other 100 above: lib.sh's
# start_server and server_refuse read the ports from set_ports.
declare -A PID PORT UAC
base=$PORT_BASE
for server in "${SERVERS[@]}"; do
	PORT_BASE=$base
	pick_ports
	base=$((PORT_BASE + 100))
	mkdir -p "$out/$server"
	kind=$server bin=$SIPVISOR_BIN
	[ "$server" != against ] || kind=sipvisor SIPVISOR_BIN=$AGAINST_BIN
	start_server "$kind" "$out/$server"
	server_refuse "$kind" "$out/$server" on
	SIPVISOR_BIN=$bin
	PID[$server]=$SERVER_PID PORT[$server]=$PORT_BASE
	PIDS+=("$SERVER_PID")
	SERVER_PID=
done
for server in "${SERVERS[@]}"; do
	PORT_BASE=${PORT[$server]}
	set_ports
	# One Call-ID sequence for every UAC and every run: SIPp's default puts
	# its pid in each Call-ID, and the kernel's program spreads Call-IDs
	# over a group's workers by their hash, so how evenly a run's fall
	# decides how long each worker waits between INVITEs.
	run_uac "$out/$server/uac" refuse "$rate" $((rate * total)) "$UAC_PORT" -cid_str "%u-pair@%s" &
	UAC[$server]=$!
	PIDS+=("${UAC[$server]}")
done
sleep "$warm"

csv=$out/pair.csv
echo "round,server,refused,cpu_s,ms_per_refusal" >"$csv"
n=$((rate * secs))
for ((round = 1; round <= rounds; round++)); do
	declare -A c0
	for server in "${SERVERS[@]}"; do c0[$server]=$(tree_cpu_exact "${PID[$server]}"); done
	sleep "$secs"
	line="round $round/$rounds:"
	for server in "${SERVERS[@]}"; do
		kill -0 "${PID[$server]}" 2>/dev/null || die "$server exited during the run"
		c1=$(tree_cpu_exact "${PID[$server]}")
		row=$(awk -v a="${c0[$server]}" -v b="$c1" -v n="$n" 'BEGIN { printf "%.4f,%.4f", b - a, (b - a) / n * 1000 }')
		echo "$round,$server,$n,$row" >>"$csv"
		line+=" $server ${row#*,} ms"
	done
	log "$line"
done
for server in "${SERVERS[@]}"; do
	wait "${UAC[$server]}" || true
	failed=$(stat_last "$out/$server/uac" 'FailedCall(C)')
	ok=$(stat_last "$out/$server/uac" 'SuccessfulCall(C)')
	[ "$failed" = 0 ] || die "$server: $failed refusals failed at the UAC ($ok acknowledged): see $out/$server/uac"
done

awk -F, -v rate="$rate" -v secs="$secs" -v rev="${rev:-}" '
	function median(a, k,   i, j, t) {
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	NR == 1 { next }
	{ ms[$2, $1] = $5; if ($1 > rounds) rounds = $1 }
	END {
		if (rev == "") {
			printf "Refusals at %d/s to both servers at once, CPU counted over the same %d s in each round (ms a refusal):\n\n", rate, secs
			print "| round | sipvisor | Kamailio | ratio |"
			print "|---:|---:|---:|---:|"
		} else {
			printf "Refusals at %d/s to the three servers at once, CPU counted over the same %d s in each round (ms a refusal):\n\n", rate, secs
			printf "| round | sipvisor | Kamailio | ratio | sipvisor at %s | its ratio | sipvisor ÷ %s |\n", rev, rev
			print "|---:|---:|---:|---:|---:|---:|---:|"
		}
		for (r = 1; r <= rounds; r++) {
			s[r] = ms["sipvisor", r]; k[r] = ms["kamailio", r]; q[r] = s[r] / k[r]
			if (rev == "") {
				printf "| %d | %.4f | %.4f | %.2f |\n", r, s[r], k[r], q[r]
				continue
			}
			a[r] = ms["against", r]; aq[r] = a[r] / k[r]; sa[r] = s[r] / a[r]
			printf "| %d | %.4f | %.4f | %.2f | %.4f | %.2f | %.3f |\n", r, s[r], k[r], q[r], a[r], aq[r], sa[r]
		}
		printf "\nmedians: sipvisor %.4f ms, Kamailio %.4f ms; median of the rounds'"'"' ratios %.2f\n", median(s, rounds), median(k, rounds), median(q, rounds)
		if (rev != "")
			printf "sipvisor at %s: %.4f ms, median of its ratios %.2f; median of sipvisor ÷ %s %.3f\n", rev, median(a, rounds), median(aq, rounds), rev, median(sa, rounds)
	}' "$csv" | tee "$out/summary.txt"
