#!/usr/bin/env bash
# Sustained load (soak) of sipvisor and Kamailio: does memory stay flat and
# CPU per call stay put over a long, steady call rate?
#
# For each server in turn (same run, one after the other): SIPp's built-in
# uac -> server -> SIPp UAS (bench/uas.xml), zero-length calls (INVITE, ACK,
# BYE through the stateful proxy) at --rate calls/s for --secs seconds. Every
# --every seconds each process of the server's tree is sampled from /proc,
# and the whole tree once more.
#
#   bench/soak.sh [--rate 600] [--secs 600] [--children 2]
#                 [--servers "sipvisor kamailio"] [--every 5]
#                 [--out bench/results] [--tag NAME]
#
# --children is sipvisor's UDP workers and Kamailio's UDP children. Extra
# sipvisor settings, one per line, come from BENCH_SIPVISOR_SET, e.g.
#   BENCH_SIPVISOR_SET='worker_memory_limit = 64MiB' bench/soak.sh --tag mem64
# Validate changes with a short run (bench/soak.sh --secs 60 --rate 300
# --out /tmp/soak): the 10-minute default is for measuring.
#
# Writes, with P = soak-NAME (soak without --tag):
#   OUT/P-samples.csv  one row per process per sample, and one row per sample
#       for the whole tree (role "tree"); NA where a value does not apply or
#       is not available. Columns:
#       t_s         seconds since the UAC started
#       server      sipvisor or kamailio
#       role        supervisor, udp-N / timer-N (sipvisor worker by group kind
#                   and ID), main / udp-N / timer / ... (Kamailio's process
#                   by its core.psx description), or tree
#       pid         the process (tree: the server's main pid)
#       rss_kb      VmRSS of /proc/PID/status (tree: NA, since Kamailio's
#                   children share memory and a sum of RSS overcounts it)
#       pss_kb      Pss of /proc/PID/smaps_rollup (tree: the sum, the honest
#                   total)
#       cpu_s       user + system CPU seconds (tree: lib.sh tree_cpu's sum,
#                   with the children already reaped, from the same read)
#       heap_bytes  Go heap in use: a worker's from /metrics
#                   sipvisor_worker_heap_bytes, else from `ctl ps --json`,
#                   else NA; the supervisor's go_memstats_heap_alloc_bytes
#       gc_cpu_s    a worker's /metrics sipvisor_worker_gc_cpu_seconds_total
#       calls successful failed  (tree) SIPp's TotalCallCreated,
#                   SuccessfulCall(C) and FailedCall(C) so far
#       server_refused  (tree) sipvisor's
#                   sipvisor_frontdoor_refused_sessions_total, all reasons
#       suspended   (tree) sipvisor's sipvisor_overload_suspended (0 or 1),
#                   else from /readyz (503: 1, 200: 0)
#       sessions    (tree) sipvisor's number_of_sessions monitor: the calls,
#                   subscriptions and registrations it counts in progress
#   OUT/P-summary.md  machine, command line, and per server: calls offered,
#       attempted, successful, failed, refused (SIPp's stat file has no
#       column for 503: they count among FailedUnexpectedMessage(C), and are
#       counted from SIPp's error trace), response times, each process's
#       RSS at 1 min, at the start of the last 5 min and at the end with the
#       flat check (last 5 min max/min <= 1.10), tree CPU per call after the
#       first minute, the workers' GC CPU share, and what the sampling itself
#       cost. A run under 10 minutes uses a quarter of --secs for "1 min" and
#       the last half for "the last 5 min".
#   OUT/P.png  the chart (go run ./bench/soakplot -in CSV -out PNG): RSS per
#       sipvisor process, each tree's PSS, Go heap, GC CPU per worker.
# SIPp's files, the servers' configs and logs stay in
# /tmp/sipvisor-bench/P/SERVER.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmdline="bash bench/soak.sh"
[ $# -eq 0 ] || cmdline="$cmdline $(printf '%q ' "$@")"
cmdline=${cmdline% }

rate=600
secs=600
CHILDREN=2
servers="sipvisor kamailio"
every=5
out=$BENCH_DIR/results
tag=

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(rate secs children=CHILDREN servers every out tag)
parse_flags "$@"
need_positive rate secs CHILDREN every
((secs >= 10)) || die "--secs must be at least 10, have $secs"
((every * 2 <= secs)) || die "--every ($every) must be at most half of --secs ($secs)"
servers=${servers//,/ }
for s in $servers; do
	case $s in sipvisor | kamailio) ;; *) die "--servers takes sipvisor and/or kamailio, have '$s'" ;; esac
done
[ -n "${servers// /}" ] || die "--servers is empty"
[ -z "$tag" ] || [[ $tag =~ ^[A-Za-z0-9._-]+$ ]] || die "--tag must be letters, digits, '.', '_' or '-', have '$tag'"
[ -n "$out" ] || die "--out is empty"
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
case " $servers " in *" kamailio "*)
	command -v kamailio >/dev/null || die "kamailio not installed: run make bench-install"
	command -v kamcmd >/dev/null || die "kamcmd not found (it comes with kamailio)"
	;;
esac

prefix=soak${tag:+-$tag}
mkdir -p "$out"
out=$(cd "$out" && pwd)
csv=$out/$prefix-samples.csv
summary=$out/$prefix-summary.md
png=$out/$prefix.png
workroot=/tmp/sipvisor-bench/$prefix
mkdir -p "$workroot"

# The steady part starts after the first minute; the flat check looks at the
# last five. A run too short for those uses a quarter and a half of it.
warm=$((secs >= 240 ? 60 : secs / 4))
window=$((secs >= 600 ? 300 : secs / 2))

trap bench_cleanup EXIT
trap 'exit 130' INT TERM
case " $servers " in *" sipvisor "*) build_sipvisor "$workroot" ;; esac
machine_info >"$workroot/machine.txt"

echo "t_s,server,role,pid,rss_kb,pss_kb,cpu_s,heap_bytes,gc_cpu_s,calls,successful,failed,server_refused,suspended,sessions" >"$csv"

# Sampling forks little: on a small machine each process started costs
# milliseconds of CPU the servers would miss. Builtins where they will do.

# self_ticks sets SELF_TICKS to the CPU ticks of this shell and the children
# it has reaped: the cost of sampling.
self_ticks() {
	local line f
	read -r line <"/proc/$$/stat"
	read -ra f <<<"${line##*) }"
	SELF_TICKS=$((f[11] + f[12] + f[13] + f[14]))
}

# ROLE_OF maps a pid of the server's tree to "role group id" (group and id
# NA but for sipvisor's workers).
declare -A ROLE_OF

# role_of SERVER PID fills ROLE_OF[PID]: the supervisor; a sipvisor worker
# by the group and ID in its environment (SIPVISOR_GROUP, SIPVISOR_WORKER_ID,
# as bench/profile.sh reads them), its role the group's kind and the ID
# (udp-1); Kamailio's processes from kamailio_roles. What is not known yet
# (a worker still between fork and exec) is named by pid and asked again.
role_of() {
	local server=$1 p=$2 e group= id=
	[ -z "${ROLE_OF[$p]:-}" ] || return 0
	if [ "$p" = "$SERVER_PID" ]; then
		[ "$server" = sipvisor ] && ROLE_OF[$p]="supervisor NA NA" || ROLE_OF[$p]="main NA NA"
		return 0
	fi
	if [ "$server" = sipvisor ]; then
		local env=()
		mapfile -d '' env <"/proc/$p/environ" 2>/dev/null || true
		for e in "${env[@]}"; do
			case $e in
			SIPVISOR_GROUP=*) group=${e#*=} ;;
			SIPVISOR_WORKER_ID=*) id=${e#*=} ;;
			esac
		done
		if [ -n "$group" ] && [ -n "$id" ] && [[ $group != *" "* ]]; then
			ROLE_OF[$p]="${group%%:*}-$id $group $id"
			return 0
		fi
	fi
	SAMPLE_ROLE="child-$p NA NA"
	return 1
}

# kamailio_roles WORK fills ROLE_OF from core.psx: "udp receiver child=0
# sock=..." is udp-0, "main process - attendant" main, any other its
# description with dashes (slow-timer, ctl-handler).
kamailio_roles() {
	local pid role
	kamcmd -s "unix:$1/kamailio.cfg.run/kamailio_ctl" core.psx 2>/dev/null | awk '
		$1 == "PID:" { pid = $2 }
		$1 == "DSC:" {
			sub(/^[ \t]*DSC:[ \t]*/, "")
			d = $0
			if (d ~ /^main process/) r = "main"
			else if (match(d, /^udp receiver child=[0-9]+/)) r = "udp-" substr(d, 20, RLENGTH - 19)
			else { r = d; gsub(/[^A-Za-z0-9]+/, "-", r); sub(/-$/, "", r) }
			print pid, r
		}' >"$1/roles.txt" || true
	[ -s "$1/roles.txt" ] || log "kamcmd core.psx gave nothing: Kamailio's children will be named by pid"
	while read -r pid role; do ROLE_OF[$pid]="$role NA NA"; done <"$1/roles.txt"
}

# ps_has_heap tells whether `ctl ps --json` reports a heap per worker (a
# field named heap, Heap or heap_bytes): this tree's does not yet.
ps_has_heap() {
	command -v jq >/dev/null || return 1
	"$SIPVISOR_BIN" ctl -addr "http://127.0.0.1:$HTTP_PORT" ps --json 2>/dev/null |
		jq -e '[.[].workers[] | (.heap // .Heap // .heap_bytes)] | map(select(. != null)) | length > 0' >/dev/null 2>&1
}

# ps_heaps prints "group|id|heap" for every worker from `ctl ps --json`.
ps_heaps() {
	"$SIPVISOR_BIN" ctl -addr "http://127.0.0.1:$HTTP_PORT" ps --json 2>/dev/null |
		jq -r '.[] | .name as $g | .workers[] | "\($g)|\(.id)|\(.heap // .Heap // .heap_bytes // "NA")"' 2>/dev/null || true
}

# metrics_has NAME tells whether sipvisor's /metrics has a series NAME.
metrics_has() {
	curl -s -m 2 "http://127.0.0.1:$HTTP_PORT/metrics" 2>/dev/null | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { f = 1 } END { exit !f }'
}

# stat_now DIR prints "calls successful failed" from the last row of SIPp's
# stat file, NA before it has one.
stat_now() {
	local f=$1/stat.csv
	[ -s "$f" ] || { echo "NA NA NA"; return; }
	{ head -1 "$f"; tail -1 "$f"; } | awk -F';' '
		NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
		{ n = split("TotalCallCreated SuccessfulCall(C) FailedCall(C)", k, " ")
		  for (j = 1; j <= n; j++) printf "%s%s", (k[j] in c && $c[k[j]] != "" ? $c[k[j]] : "NA"), (j < n ? " " : "\n") }'
}

# sample SERVER WORK T appends one row per process of the server's tree and
# one for the tree to the CSV. One pass of awk reads every process's
# /proc/PID/status (VmRSS), smaps_rollup (Pss) and stat (CPU), sipvisor's
# /metrics and the last row of SIPp's stat file. The tree's CPU is lib.sh
# tree_cpu's sum (utime, stime, cutime, cstime of each process in the tree)
# over the same read.
sample() {
	local server=$1 work=$2 t=$3 p code files=() extra=()
	local metrics=$work/sample.metrics heaps=$work/sample.heaps roles=$work/sample.roles
	: >"$metrics"
	: >"$heaps"
	: >"$roles"
	if [ "$server" = sipvisor ]; then
		curl -s -m 2 "http://127.0.0.1:$HTTP_PORT/metrics" >"$metrics" 2>/dev/null || true
		if [ "$SUSP_GAUGE" = 0 ]; then
			code=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP_PORT/readyz" 2>/dev/null || true)
			case $code in 200) echo "sipvisor_overload_suspended 0" >>"$metrics" ;; 503) echo "sipvisor_overload_suspended 1" >>"$metrics" ;; esac
		fi
		[ "$PS_HEAP" = 0 ] || ps_heaps >"$heaps"
	fi
	for p in $(tree_pids "$SERVER_PID"); do
		SAMPLE_ROLE=
		role_of "$server" "$p" || true
		printf '%s %s\n' "$p" "${SAMPLE_ROLE:-${ROLE_OF[$p]}}" >>"$roles"
		files+=("/proc/$p/status" "/proc/$p/smaps_rollup" "/proc/$p/stat")
	done
	[ ! -s "$work/uac/stat.csv" ] || extra=("$work/uac/stat.csv")
	{ cat "${files[@]}" 2>/dev/null || true; } | awk -v t="$t" -v server="$server" -v root="$SERVER_PID" -v hz="$CLK_TCK" \
		-v metrics="$metrics" -v heaps="$heaps" -v roles="$roles" -v statf="${extra[0]:-}" '
		function label(s, name,   r) {
			if (!match(s, name "=\"[^\"]*\"")) return ""
			return substr(s, RSTART + length(name) + 2, RLENGTH - length(name) - 3)
		}
		FILENAME == metrics {
			if ($1 ~ /^sipvisor_worker_heap_bytes\{/) heap[label($1, "group") SUBSEP label($1, "worker")] = sprintf("%.0f", $2)
			else if ($1 ~ /^sipvisor_worker_gc_cpu_seconds_total\{/) gc[label($1, "group") SUBSEP label($1, "worker")] = sprintf("%.3f", $2)
			else if ($1 == "go_memstats_heap_alloc_bytes") suph = sprintf("%.0f", $2)
			else if ($1 == "sipvisor_overload_suspended") susp = $2 + 0
			else if ($1 ~ /^sipvisor_overload_monitor_value\{/ && label($1, "monitor") == "number_of_sessions") sess = $2 + 0
			else if ($1 ~ /^sipvisor_frontdoor_refused_sessions_total/) { refused += $2; hasref = 1 }
			next
		}
		FILENAME == heaps {
			split($0, h, "|")
			if (h[3] != "NA" && h[3] != "null" && h[3] != "") psheap[h[1] SUBSEP h[2]] = sprintf("%.0f", h[3])
			next
		}
		FILENAME == roles { role[$1] = $2; grp[$1] = $3; wid[$1] = $4; np++; pids[np] = $1 + 0; next }
		FILENAME == statf { if (FNR == 1) shead = $0; else slast = $0; next }
		# The processes files, concatenated: status (its Pid: line first),
		# then smaps_rollup, then stat.
		$1 == "Pid:" { cur = $2; next }
		$1 == "VmRSS:" { rss[cur] = $2; next }
		$1 == "Pss:" { pss[cur] = $2; next }
		$1 ~ /^[0-9]+$/ && $2 ~ /^\(/ {
			i = length($0); while (i > 0 && substr($0, i, 1) != ")") i--
			split(substr($0, i + 2), f, " ")
			cpu[$1] = sprintf("%.2f", (f[12] + f[13]) / hz)
			tcpu += f[12] + f[13] + f[14] + f[15]
		}
		END {
			# Rows by pid: the main process first, as it is the oldest.
			for (i = 2; i <= np; i++) { v = pids[i]; for (j = i - 1; j >= 1 && pids[j] > v; j--) pids[j + 1] = pids[j]; pids[j + 1] = v }
			for (i = 1; i <= np; i++) {
				p = pids[i]; hp = "NA"; gcs = "NA"; g = grp[p]; id = wid[p]
				if (role[p] == "supervisor" && suph != "") hp = suph
				else if (g != "NA") {
					# The worker label is the worker ID; a pid is taken too.
					if ((g SUBSEP id) in heap) hp = heap[g SUBSEP id]
					else if ((g SUBSEP p) in heap) hp = heap[g SUBSEP p]
					else if ((g SUBSEP id) in psheap) hp = psheap[g SUBSEP id]
					if ((g SUBSEP id) in gc) gcs = gc[g SUBSEP id]
					else if ((g SUBSEP p) in gc) gcs = gc[g SUBSEP p]
				}
				if (p in pss) { tpss += pss[p]; n++ }
				printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,NA,NA,NA,NA,NA,NA\n", t, server, role[p], p,
					(p in rss ? rss[p] : "NA"), (p in pss ? pss[p] : "NA"), (p in cpu ? cpu[p] : "NA"), hp, gcs
			}
			calls = ok = failed = "NA"
			if (slast != "") {
				nh = split(shead, hd, ";"); split(slast, lv, ";")
				for (i = 1; i <= nh; i++) {
					if (hd[i] == "TotalCallCreated") calls = lv[i]
					else if (hd[i] == "SuccessfulCall(C)") ok = lv[i]
					else if (hd[i] == "FailedCall(C)") failed = lv[i]
				}
			}
			printf "%s,%s,tree,%s,NA,%s,%.2f,NA,NA,%s,%s,%s,%s,%s,%s\n", t, server, root, (n ? tpss : "NA"), tcpu / hz,
				calls, ok, failed, (hasref ? sprintf("%.0f", refused) : "NA"), (susp == "" ? "NA" : susp), (sess == "" ? "NA" : sess)
		}' "$metrics" "$heaps" "$roles" "${extra[@]}" - >>"$csv"
}

for server in $servers; do
	work=$workroot/$server
	rm -rf "$work"
	mkdir -p "$work"
	start_uas "$work"
	start_server "$server" "$work"
	ROLE_OF=()
	PS_HEAP=0 SUSP_GAUGE=0
	if [ "$server" = sipvisor ]; then
		# A worker's series appear once it has reported its heap and its
		# group has been sampled (a cycle): wait for them a few seconds.
		for ((i = 0; i < 50; i++)); do
			! metrics_has sipvisor_worker_heap_bytes || break
			sleep 0.1
		done
		! ps_has_heap || PS_HEAP=1
		! metrics_has sipvisor_overload_suspended || SUSP_GAUGE=1
		heapsrc=NA
		if metrics_has sipvisor_worker_heap_bytes; then
			heapsrc="/metrics sipvisor_worker_heap_bytes"
		elif [ "$PS_HEAP" = 1 ]; then
			heapsrc="ctl ps --json"
		fi
		gcsrc=NA
		! metrics_has sipvisor_worker_gc_cpu_seconds_total || gcsrc="/metrics sipvisor_worker_gc_cpu_seconds_total"
		echo "$heapsrc" >"$work/heap.source"
		echo "$gcsrc" >"$work/gc.source"
		log "workers' Go heap from: $heapsrc; GC CPU from: $gcsrc"
	else
		kamailio_roles "$work"
	fi
	log "$server: $rate calls/s for ${secs}s, a sample every ${every}s"
	run_uac "$work/uac" call "$rate" $((rate * secs)) "$UAC_PORT" -d 0 &
	uac_pid=$!
	BG_PIDS+=("$uac_pid")
	t0=${EPOCHREALTIME/./}
	k=0 done_=0 scost=0 nmeas=0
	while :; do
		self_ticks
		s0=$SELF_TICKS
		el=$((${EPOCHREALTIME/./} - t0))
		printf -v t '%d.%d' $((el / 1000000)) $((el % 1000000 / 100000))
		sample "$server" "$work" "$t"
		kill -0 "$SERVER_PID" 2>/dev/null || die "$server exited during the run (t=${t}s): see $work/$server.log"
		((done_ == 0)) || break
		if ((k % (60 / every > 0 ? 60 / every : 1) == 0)); then
			log "  t=${t}s $(tail -1 "$csv" | awk -F, '{ printf "tree PSS %.1f MiB, CPU %s s, calls %s, failed %s", $6 / 1024, $7, $10, $12 }')"
		fi
		k=$((k + 1))
		# Sleep to the next tick, in steps of at most a second so that the
		# sample after the UAC ends is taken at once.
		next_us=$((t0 + k * every * 1000000))
		while :; do
			kill -0 "$uac_pid" 2>/dev/null || { done_=1; break; }
			left=$((next_us - ${EPOCHREALTIME/./}))
			((left > 0)) || break
			((left < 1000000)) || left=1000000
			printf -v d '%d.%06d' $((left / 1000000)) $((left % 1000000))
			sleep "$d"
		done
		# The cost of sampling: this shell's CPU and its reaped children's
		# over the period, counted only while the UAC runs (bash reaps it as
		# it ends, adding SIPp's CPU to this shell's children's).
		self_ticks
		if kill -0 "$uac_pid" 2>/dev/null; then
			scost=$((scost + SELF_TICKS - s0))
			nmeas=$((nmeas + 1))
		fi
	done
	echo "$nmeas $(awk -v c="$scost" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", c / hz }')" >"$work/sampler.cpu"
	wait "$uac_pid" 2>/dev/null || true
	BG_PIDS=()
	[ ! -s "$work/uac/exit" ] || log "  sipp uac exited with status $(cat "$work/uac/exit") (calls failed or timed out: see $work/uac/sipp.out)"
	log "$server: $(stat_now "$work/uac" | awk '{ printf "calls %s, successful %s, failed %s", $1, $2, $3 }')"
	stop_server
	stop_uas
	rm -f "$work"/sample.roles "$work"/sample.metrics "$work"/sample.heaps
done

# process_table SERVER prints the markdown table of each process's memory.
process_table() {
	awk -F, -v s="$1" -v warm="$warm" -v window="$window" '
		function mib(kb) { return (kb == "NA" || kb == "") ? "NA" : sprintf("%.1f", kb / 1024) }
		function hmib(b) { return (b == "NA" || b == "") ? "NA" : sprintf("%.1f", b / 1048576) }
		NR == 1 || $2 != s { next }
		{
			t = $1 + 0; if (t > last) last = t
			r = $3; if (!(r in seen)) { seen[r] = 1; order[++nr] = r }
			n[r]++; T[r, n[r]] = t
			# The tree has no RSS: its memory is the sum of PSS.
			M[r, n[r]] = (r == "tree") ? $6 : $5
			P[r, n[r]] = $6; H[r, n[r]] = $8
			if (!((r, $4) in pidseen)) { pidseen[r, $4] = 1; pids[r] = pids[r] (pids[r] == "" ? "" : " ") $4 }
		}
		END {
			from = last - window
			printf "| process | pid | RSS MiB at %d s | RSS MiB at %d s | RSS MiB at end (%d s) | last %d s max/min | flat (<= 1.10) | PSS MiB at end | Go heap MiB at %d s / %d s / end |\n", warm, from, last, window, warm, from
			print "|---|---|---:|---:|---:|---:|---|---:|---|"
			for (i = 1; i <= nr; i++) {
				r = order[i]; a = b = ""; lo = hi = ""; ha = hb = ""
				for (j = 1; j <= n[r]; j++) {
					if (a == "" && T[r, j] >= warm) { a = M[r, j]; ha = H[r, j] }
					if (b == "" && T[r, j] >= from) { b = M[r, j]; hb = H[r, j] }
					if (T[r, j] >= from && M[r, j] != "NA") {
						v = M[r, j] + 0
						if (lo == "" || v < lo) lo = v
						if (hi == "" || v > hi) hi = v
					}
				}
				e = M[r, n[r]]
				ratio = (lo != "" && lo > 0) ? hi / lo : ""
				flat = (ratio == "") ? "NA" : (ratio <= 1.10 ? "yes" : "**no**")
				name = (r == "tree") ? "tree (sum of PSS)" : r
				pid = pids[r]; if (index(pid, " ")) pid = pid " (replaced)"
				heap = (H[r, n[r]] == "NA") ? "NA" : hmib(ha) " / " hmib(hb) " / " hmib(H[r, n[r]])
				printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, pid, mib(a), mib(b), mib(e),
					(ratio == "" ? "NA" : sprintf("%.3f (%.1f MiB apart)", ratio, (hi - lo) / 1024)), flat, mib(P[r, n[r]]), heap
			}
		}' "$csv"
}

# steady SERVER prints "key value" lines: tree CPU per call after warm-up
# and over the whole run, the workers' GC CPU share, suspended samples.
steady() {
	awk -F, -v s="$1" -v warm="$warm" '
		NR == 1 || $2 != s { next }
		$3 == "tree" {
			ok = ($11 == "NA") ? 0 : $11; at = ($10 == "NA") ? 0 : $10
			if (!have0) { have0 = 1; c0 = $7; k0 = ok; a0 = at }
			if (!havea && $1 + 0 >= warm) { havea = 1; ca = $7; ka = ok; aa = at; ta = $1 }
			cz = $7; kz = ok; az = at; tz = $1
			samples++; if ($14 == "1") susp++
			if ($14 != "NA") hassusp = 1
			if ($13 != "NA") refused = $13
			if ($15 != "NA" && $15 != "" && $1 + 0 >= warm) { sn++; ssum += $15; if ($15 + 0 > smax) smax = $15 + 0 }
			next
		}
		$9 != "NA" && $3 != "supervisor" {
			r = $3
			if (!(r in g0) && $1 + 0 >= warm) { g0[r] = $9; u0[r] = $7; p0[r] = $4 }
			# A worker replaced meanwhile starts its counters again: its
			# share is NA.
			if ((r in p0) && $4 != p0[r]) bad[r] = 1
			g1[r] = $9; u1[r] = $7
		}
		END {
			printf "cpu_ms_per_call_steady %s\n", (havea && kz > ka) ? sprintf("%.3f", (cz - ca) / (kz - ka) * 1000) : "NA"
			printf "cpu_ms_per_attempt_steady %s\n", (havea && az > aa) ? sprintf("%.3f", (cz - ca) / (az - aa) * 1000) : "NA"
			printf "steady_from %s\nsteady_to %s\n", (havea ? ta : "NA"), tz
			printf "cpu_ms_per_call_all %s\n", (kz > k0) ? sprintf("%.3f", (cz - c0) / (kz - k0) * 1000) : "NA"
			printf "tree_cpu_s %.2f\n", cz - c0
			for (r in g0) {
				dg = g1[r] - g0[r]; du = u1[r] - u0[r]
				if ((r in bad) || du <= 0 || dg < 0) { printf "gc_share %s NA\n", r; continue }
				G += dg; U += du
				printf "gc_share %s %.1f\n", r, 100 * dg / du
			}
			printf "gc_share_all %s\n", (U > 0) ? sprintf("%.1f", 100 * G / U) : "NA"
			printf "suspended_samples %s\n", hassusp ? sprintf("%d of %d", susp, samples) : "NA"
			printf "server_refused %s\n", (refused == "") ? "NA" : refused
			printf "sessions_steady %s\n", sn ? sprintf("mean %.1f, max %d", ssum / sn, smax) : "NA"
		}' "$csv"
}

{
	echo "# Soak: $rate calls/s for $secs s"
	echo
	echo "$(date -u '+%Y-%m-%d %H:%M UTC'), sampled every $every s."
	echo
	echo '```'
	echo "$cmdline"
	[ -z "${BENCH_SIPVISOR_SET:-}" ] || printf 'BENCH_SIPVISOR_SET=%q\n' "$BENCH_SIPVISOR_SET"
	echo "settings: servers=${servers// /,} rate=$rate secs=$secs children=$CHILDREN every=$every"
	cat "$workroot/machine.txt"
	echo '```'
	echo
	echo "Steady part: from $warm s on; flat check: RSS samples of the last $window s (max/min <= 1.10)."
	[ "$warm" = 60 ] && [ "$window" = 300 ] || echo "(A run shorter than 10 minutes shortens both: a quarter and a half of --secs.)"
	echo "Samples: ${csv##*/}; chart: ${png##*/}; SIPp's files and the servers' logs were under $workroot."
	for server in $servers; do
		work=$workroot/$server
		d=$work/uac
		echo
		echo "## $server"
		echo
		refused=$(cat "$d"/*_errors.log 2>/dev/null | grep -c "received 'SIP/2.0 503" || true)
		echo "| offered | attempted | successful | failed | refused (503) | failed on unexpected message | retransmissions | set-up p50 ms | set-up p99 ms |"
		echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		echo "| $((rate * secs)) | $(stat_last "$d" TotalCallCreated) | $(stat_last "$d" 'SuccessfulCall(C)') | $(stat_last "$d" 'FailedCall(C)') | ${refused:-0} | $(stat_last "$d" 'FailedUnexpectedMessage(C)') | $(stat_last "$d" 'Retransmissions(C)') | $(rtt_pct "$d" 50) | $(rtt_pct "$d" 99) |"
		if [ -s "$d/exit" ]; then
			echo
			echo "SIPp exited with status $(cat "$d/exit") (failed or unfinished calls; see $d/sipp.out)."
		fi
		echo
		process_table "$server"
		echo
		st=$(steady "$server")
		val() { awk -v k="$1" '$1 == k { $1 = ""; sub(/^ /, ""); print; exit }' <<<"$st"; }
		echo "- Tree CPU per successful call, steady part ($(val steady_from)–$(val steady_to) s): $(val cpu_ms_per_call_steady) ms (per call attempted: $(val cpu_ms_per_attempt_steady) ms); whole run: $(val cpu_ms_per_call_all) ms per successful call ($(val tree_cpu_s) CPU s)."
		read -r ns scpu <"$work/sampler.cpu" || ns=0 scpu=0
		echo "- Sampling cost (this script, not in the tree's CPU): $scpu CPU s over $ns sampling periods$( ((ns > 0)) && awk -v c="$scpu" -v n="$ns" -v e="$every" 'BEGIN { printf ", %.0f ms each, %.1f %% of one core", 1000 * c / n, 100 * c / n / e }')."
		if [ "$server" = sipvisor ]; then
			if [ "$(val gc_share_all)" = NA ]; then
				echo "- GC CPU share of the workers: NA (no sipvisor_worker_gc_cpu_seconds_total on /metrics)."
			else
				echo "- GC CPU share of the workers' CPU, steady part: $(val gc_share_all) % in all; $(grep '^gc_share ' <<<"$st" | sort -k2,2V | awk '{ printf "%s%s %s %%", sep, $2, $3; sep = ", " }')."
			fi
			echo "- Samples suspended: $(val suspended_samples); sessions the server refused: $(val server_refused)."
			echo "- number_of_sessions in the steady part: $(val sessions_steady)."
			echo "- Workers' Go heap from: $(cat "$work/heap.source" 2>/dev/null || echo NA); GC CPU from: $(cat "$work/gc.source" 2>/dev/null || echo NA)."
		fi
	done
} >"$summary"
log "wrote $csv and $summary"

if (cd "$REPO_DIR" && timeout 600 go run ./bench/soakplot -in "$csv" -out "$png") >"$workroot/soakplot.log" 2>&1; then
	log "wrote $png"
else
	log "no chart: $(tail -3 "$workroot/soakplot.log")"
fi
cat "$summary"
