#!/usr/bin/env bash
# Side-by-side benchmark of sipvisor and Kamailio at fixed rates.
#
# For each repetition, each server and each rate: SIPp UAC -> server -> SIPp
# UAS (calls: INVITE, ACK, BYE through the stateful proxy) and SIPp UAC ->
# server (REGISTER, each a new binding); with --refuse-rates, then the server
# refusing every new session (sipvisor suspended, Kamailio's $shv(refuse)
# on) and SIPp UAC -> server (INVITE, 503, ACK), so that a refused session's
# CPU can be set beside a served call's. Records completed and failed calls,
# response times, and the CPU seconds of the server's whole process tree per
# 1,000 calls, read from /proc before and after the run. Repetitions
# alternate the servers, so a change in the shared machine's load hits both.
#
#   bench/run.sh [--servers sipvisor,kamailio] [--rates 200,500,1000]
#                [--reg-rates 200,500,1000] [--refuse-rates 200,1000]
#                [--reps 3] [--secs 20]
#                [--reg-secs 10] [--settle 5] [--warmup 0] [--children N]
#                [--kamailio-store memory,sqlite-wt,sqlite-wt1,sqlite-wb]
#                [--transport u1|t1|tn] [--out DIR]
#
# --transport is SIPp's -t on both sides (bench/lib.sh): u1, UDP (the
# default); t1, TCP with one connection for all calls, as a trunk connects;
# tn, TCP with a connection per call. Over TCP both servers also listen on
# TCP with --children TCP workers and relay to the UAS over TCP.
#
# --kamailio-store runs Kamailio once per store named, as a server of its
# own in the tables: memory (usrloc db_mode 0, the default, reported as
# kamailio), sqlite-wt (db_mode 1, each REGISTER written through to an SQLite
# file before its 200 OK, as sipvisor writes it; kamailio-sqlite-wt),
# sqlite-wt1 (the same with one SIP worker, children=1: Kamailio's db_sqlite
# waits for no lock, so two workers' writes collide and fail;
# kamailio-sqlite-wt1) and sqlite-wb (db_mode 2, written back by usrloc's
# timer every $KAMAILIO_WB_TIMER s, default 2; kamailio-sqlite-wb). Each
# server's store starts empty at the start of the run and is kept across its
# repetitions; KAMAILIO_DB_DIR puts Kamailio's files in another directory.
#
# --warmup S counts the CPU of each run and its calls only from S seconds
# after its start, so that a long run (--secs 150 --warmup 60, say) measures
# the servers at their steady state, after their heaps have levelled off,
# rather than while they grow. The per-1,000 figure is then the CPU from S
# on over the calls completed from S on. REGISTER runs longer than S
# (--reg-secs) are counted the same way; shorter ones whole.
#
# Writes DIR/results.csv, DIR/summary.md and DIR/machine.txt. Each row of
# results.csv also has the share of the machine's CPU its host took over the
# span counted (steal_pct, from /proc/stat): on a virtual machine it makes
# every process of the span dearer, and the summary names the rows it
# touched.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=sipvisor,kamailio
rates=200,500,1000
reg_rates=200,500,1000
refuse_rates=
reps=3
secs=20
reg_secs=10
settle=5
warmup=0
CHILDREN=$(nproc)
kamailio_store=memory
out=${BENCH_OUT:-/tmp/sipvisor-bench/compare}

usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(servers rates reg-rates refuse-rates reps secs reg-secs settle warmup children=CHILDREN kamailio-store transport=TRANSPORT out)
parse_flags "$@"
need_positive reps secs reg_secs CHILDREN
need_transport
need_whole seconds settle
need_whole seconds warmup
[ -z "$rates" ] || ((warmup < secs)) || die "--warmup ($warmup) must be shorter than --secs ($secs)"
for r in ${rates//,/ } ${reg_rates//,/ } ${refuse_rates//,/ }; do
	[[ $r =~ ^[0-9]+$ ]] && ((r > 0)) || die "rates must be positive integers, have '$r'"
done
# Each Kamailio store a server of its own: kamailio, kamailio-sqlite-wt, ...
run_servers=
for s in ${servers//,/ }; do
	case $s in
	sipvisor | kamailio-sqlite-wt | kamailio-sqlite-wt1 | kamailio-sqlite-wb) run_servers+=,$s ;;
	kamailio)
		for st in ${kamailio_store//,/ }; do
			case $st in
			memory) run_servers+=,kamailio ;;
			sqlite-wt | sqlite-wt1 | sqlite-wb) run_servers+=,kamailio-$st ;;
			*) die "--kamailio-store takes memory, sqlite-wt, sqlite-wt1 and sqlite-wb, have '$st'" ;;
			esac
		done
		;;
	*) die "--servers takes sipvisor and kamailio, have '$s'" ;;
	esac
done
servers=${run_servers#,}
[ -n "$servers" ] || die "no server to run"
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
case ",$servers," in *,kamailio*) command -v kamailio >/dev/null || die "kamailio not installed: run make bench-install" ;; esac
case ",$servers," in *,kamailio-sqlite-*)
	moddir=$(kamailio -I 2>/dev/null | sed -n 's/^ *Default paths to modules: *//p')
	[ -e "${moddir%%:*}/db_sqlite.so" ] || die "Kamailio's db_sqlite module not installed: run make bench-install"
	command -v sqlite3 >/dev/null || die "sqlite3 not installed: run make bench-install"
	;;
esac

mkdir -p "$out"
out=$(cd "$out" && pwd)
# Every store starts empty: one left by an earlier run into the same DIR
# would make this run's writes land in a bigger file.
for server in ${servers//,/ }; do
	rm -f "$out/$server/location.db" "$out/$server/location.db-wal" "$out/$server/location.db-shm" \
		"$out/$server/kamailio.cfg.run/location.db" "$out/$server/kamailio.cfg.run/location.db-wal" \
		"$out/$server/kamailio.cfg.run/location.db-shm"
	[ -z "${KAMAILIO_DB_DIR:-}" ] || case $server in kamailio-sqlite-*)
		db=$(kamailio_db_file "$server" "$out/$server")
		rm -f "$db" "$db-wal" "$db-shm"
		;;
	esac
done
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
case ",$servers," in *,sipvisor,*) build_sipvisor "$out" ;; esac
machine_info >"$out/machine.txt"
echo "settings: servers=$servers rates=$rates reg_rates=$reg_rates refuse_rates=$refuse_rates reps=$reps secs=$secs reg_secs=$reg_secs settle=$settle warmup=$warmup children=$CHILDREN kamailio_store=$kamailio_store transport=$TRANSPORT kamailio_wb_timer=$KAMAILIO_WB_TIMER kamailio_db_dir=${KAMAILIO_DB_DIR:-}" >>"$out/machine.txt"
csv=$out/results.csv
echo "server,kind,rate,rep,offered,successful,failed,retransmissions,rt_p50_ms,rt_p99_ms,elapsed_s,cpu_s,cpu_s_per_1k,steal_pct" >"$csv"

for ((rep = 1; rep <= reps; rep++)); do
	for server in ${servers//,/ }; do
		work=$out/$server
		mkdir -p "$work"
		start_uas "$work"
		start_server "$server" "$work"
		# What the idle server costs, for reading the rows below: once
		# its start has settled (its first reports, its supervisor's
		# first seconds), and exactly, as an idle tree spends few ticks.
		sleep "$settle"
		c0=$(tree_cpu_exact "$SERVER_PID")
		sleep "$settle"
		c1=$(tree_cpu_exact "$SERVER_PID")
		echo "$server,idle,0,$rep,0,0,0,0,NA,NA,$settle,$(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.4f", b-a}'),NA,NA" >>"$csv"
		for kind in call register refuse; do
			case $kind in
			call) list=$rates d=$secs ;;
			register) list=$reg_rates d=$reg_secs ;;
			refuse)
				list=$refuse_rates d=$secs
				[ -z "$list" ] || server_refuse "$server" "$work" on
				;;
			esac
			for rate in ${list//,/ }; do
				dir=$work/$kind-$rate-$rep
				rm -rf "$dir"
				log "rep $rep/$reps $server $kind $rate/s for ${d}s"
				c0=$(tree_cpu "$SERVER_PID")
				s0=$(machine_steal)
				ok0=0
				if [ "$kind" != refuse ] && ((warmup > 0 && warmup < d)); then
					run_uac "$dir" $kind "$rate" $((rate * d)) "$UAC_PORT" -d 0 &
					uac=$!
					BG_PIDS+=("$uac")
					sleep "$warmup"
					c0=$(tree_cpu "$SERVER_PID")
					s0=$(machine_steal)
					ok0=$(stat_last "$dir" 'SuccessfulCall(C)')
					[[ $ok0 =~ ^[0-9]+$ ]] || ok0=0
					wait "$uac" || true
				else
					run_uac "$dir" $kind "$rate" $((rate * d)) "$UAC_PORT" -d 0
				fi
				# Transactions linger after their last message (Kamailio's
				# wait timer, sipvisor's 5 s); their cleanup belongs to the run.
				sleep "$settle"
				c1=$(tree_cpu "$SERVER_PID")
				steal=$(steal_pct "$s0" "$(machine_steal)")
				kill -0 "$SERVER_PID" 2>/dev/null || die "$server exited during the run"
				ok=$(stat_last "$dir" 'SuccessfulCall(C)')
				failed=$(stat_last "$dir" 'FailedCall(C)')
				retrans=$(stat_last "$dir" 'Retransmissions(C)')
				elapsed=$(stat_last "$dir" 'ElapsedTime(C)')
				p50=$(rtt_pct "$dir" 50)
				p99=$(rtt_pct "$dir" 99)
				row=$(awk -v a="$c0" -v b="$c1" -v ok="$ok" -v ok0="$ok0" 'BEGIN {
					cpu = b - a
					n = ok - ok0
					printf "%.2f,%s", cpu, (n > 0) ? sprintf("%.3f", cpu / n * 1000) : "NA"
				}')
				echo "$server,$kind,$rate,$rep,$((rate * d)),$ok,$failed,$retrans,$p50,$p99,$elapsed,$row,$steal" >>"$csv"
				log "  successful $ok failed $failed p50 ${p50}ms p99 ${p99}ms cpu ${row/,/ s, per 1000: }, host's steal ${steal} %"
			done
		done
		[ -z "$refuse_rates" ] || server_refuse "$server" "$work" off
		stop_server
		stop_uas
	done
done

# summary.md: median and spread (min-max) of each point over the repetitions.
summarize() {
	local metric=$1
	awk -F, -v m="$metric" '
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		$2 != "idle" { k = $2 SUBSEP $3 SUBSEP $1; v[k] = v[k] " " $col[m] }
		END { for (k in v) { split(k, p, SUBSEP); print p[1], p[2], p[3], v[k] } }' "$csv"
}
stats() { # values... -> "median (min-max)"
	printf '%s\n' "$@" | { grep -v '^NA$' || true; } | sort -g | awk '
		{ x[NR] = $1 }
		END {
			if (NR == 0) { print "NA"; exit }
			med = (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
			if (NR == 1) print med; else printf "%s (%s–%s)\n", med, x[1], x[NR]
		}'
}
median() { stats "$@" | cut -d' ' -f1; }
{
	echo "| kind | rate/s | server | successful | failed | RT p50 ms | RT p99 ms | CPU s / 1000 |"
	echo "|---|---:|---|---:|---:|---:|---:|---:|"
	summarize successful | sort -k1,1 -k2,2n -k3,3 | while read -r kind rate server vals; do
		line="| $kind | $rate | $server"
		for m in successful failed rt_p50_ms rt_p99_ms cpu_s_per_1k; do
			# shellcheck disable=SC2046
			line="$line | $(stats $(summarize $m | awk -v k="$kind" -v r="$rate" -v s="$server" '$1 == k && $2 == r && $3 == s { $1 = $2 = $3 = ""; print }'))"
		done
		echo "$line |"
	done
	echo
	# The host's steal inflates every figure of its span: the repetitions
	# it touched are named, so that a reader can tell an outlier's cause.
	stolen=$(awk -F, 'NR > 1 && $14 != "NA" && $14 + 0 >= 2 { printf "%s%s %s/s rep %s: %s %%", sep, $1, $3, $4, $14; sep = "; " }' "$csv")
	echo "Counted spans during which the host took 2 % or more of the machine's CPU (steal): ${stolen:-none}."
	echo
	echo "Idle CPU seconds over ${settle} s (median of $reps):"
	for server in ${servers//,/ }; do
		# shellcheck disable=SC2046
		echo "- $server: $(median $(awk -F, -v s="$server" '$1 == s && $2 == "idle" { print $12 }' "$csv"))"
	done
	# One pair of columns per Kamailio store run: its CPU and sipvisor's over it.
	kams=$(printf '%s\n' ${servers//,/ } | grep '^kamailio' || true)
	case ",$servers," in *,sipvisor,*)
		if [ -n "$kams" ]; then
			echo
			head="| kind | rate/s | CPU s / 1000, sipvisor"
			rule="|---|---:|---:"
			for kam in $kams; do
				label=Kamailio${kam#kamailio}
				head="$head | CPU s / 1000, $label | ratio sipvisor/$label"
				rule="$rule|---:|---:"
			done
			echo "$head |"
			echo "$rule|"
			summarize cpu_s_per_1k | awk '$3 == "sipvisor" { print $1, $2 }' | sort -k1,1 -k2,2n | while read -r kind rate; do
				# shellcheck disable=SC2046
				s=$(median $(summarize cpu_s_per_1k | awk -v k="$kind" -v r="$rate" '$1 == k && $2 == r && $3 == "sipvisor" { $1 = $2 = $3 = ""; print }'))
				line="| $kind | $rate | $s"
				for kam in $kams; do
					# shellcheck disable=SC2046
					k=$(median $(summarize cpu_s_per_1k | awk -v k="$kind" -v r="$rate" -v srv="$kam" '$1 == k && $2 == r && $3 == srv { $1 = $2 = $3 = ""; print }'))
					line="$line | $k | $(awk -v s="$s" -v k="$k" 'BEGIN { print (k + 0 > 0 && s != "NA") ? sprintf("%.2f", s / k) : "NA" }')"
				done
				echo "$line |"
			done
		fi
		;;
	esac
	if [ -n "$refuse_rates" ]; then
		echo
		echo "A refused new session beside a served call, each server on its own (medians):"
		echo
		echo "| server | rate/s | CPU s / 1000 refused | CPU s / 1000 calls | refused ÷ served |"
		echo "|---|---:|---:|---:|---:|"
		for server in ${servers//,/ }; do
			for rate in ${refuse_rates//,/ }; do
				# shellcheck disable=SC2046
				r=$(median $(summarize cpu_s_per_1k | awk -v r="$rate" -v s="$server" '$1 == "refuse" && $2 == r && $3 == s { $1 = $2 = $3 = ""; print }'))
				# shellcheck disable=SC2046
				c=$(median $(summarize cpu_s_per_1k | awk -v r="$rate" -v s="$server" '$1 == "call" && $2 == r && $3 == s { $1 = $2 = $3 = ""; print }'))
				echo "| $server | $rate | $r | $c | $(awk -v r="$r" -v c="$c" 'BEGIN { print (c + 0 > 0 && r != "NA") ? sprintf("%.3f", r / c) : "NA" }') |"
			done
		done
	fi
} >"$out/summary.md"
log "wrote $csv and $out/summary.md"
cat "$out/summary.md"
