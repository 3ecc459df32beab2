#!/usr/bin/env bash
# TLS side by side: sipvisor and Kamailio's tls module, each relaying TLS
# to UDP (bench/sipvisor-tls.cfg, bench/kamailio-tls.cfg), in one run.
#
# For each repetition and each server (alternating, so a change in the
# shared machine's load hits both): the idle server's CPU; full TLS
# handshakes at each --hs-rates for --hs-secs, then resumed ones (the
# session of a first connection, by its ticket), each connection closed
# once its handshake is done (sipload -tls_handshakes; open loop: a
# handshake due while 200 are under way is not made, and counted
# limited); calls (INVITE, 200, ACK, BYE, 200) over --conns TLS
# connections (a sipload each) to SIPp's UAS on UDP at each --rates for
# --secs, the CPU counted from --warmup seconds on, so that a run is
# measured at its steady state; last, full handshakes as fast as
# --hs-inflight at a time allow for --hs-max-secs (handshakes per second,
# client and server on the same cores). CPU is the server's whole process
# tree's, from /proc, as run.sh reads it. A server that exits during a run
# is counted, its log kept, and started again. The certificate is an ECDSA
# P-256 one made here with openssl; the key exchange X25519, TLS 1.3
# (--tls 1.2 to compare).
#
#   bench/tls.sh [--servers sipvisor,kamailio] [--hs-rates 200]
#                [--hs-secs 20] [--hs-max-secs 10] [--hs-inflight 16]
#                [--rates 100,300] [--secs 90] [--warmup 30] [--conns 4]
#                [--tls 1.3] [--reps 1] [--settle 5] [--children N]
#                [--out DIR]
#
# Writes DIR/results.csv, DIR/summary.md and DIR/machine.txt; in
# DIR/SERVER/KIND-RATE-REP/ each run's sipload summary (out.txt, for calls
# cN/out.txt, one per connection), its counts every second (stat.csv), the
# server's CPU by process role (procs.txt) and, for calls, its CPU every
# 10 s (cpu.csv).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=sipvisor,kamailio
hs_rates=200
hs_secs=20
hs_max_secs=10
hs_inflight=16
rates=100,300
secs=90
warmup=30
conns=4
tls_version=1.3
reps=1
settle=5
CHILDREN=$(nproc)
out=${BENCH_OUT:-/tmp/sipvisor-bench/tls}

usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
FLAGS=(servers hs-rates hs-secs hs-max-secs hs-inflight rates secs warmup conns tls=tls_version reps settle children=CHILDREN out)
parse_flags "$@"
need_positive reps secs hs_secs hs_inflight conns CHILDREN
need_whole seconds settle warmup hs_max_secs
((warmup < secs)) || die "--warmup ($warmup) must be shorter than --secs ($secs)"
for r in ${rates//,/ } ${hs_rates//,/ }; do
	[[ $r =~ ^[0-9]+$ ]] && ((r > 0)) || die "rates must be positive integers, have '$r'"
done
case $tls_version in 1.2 | 1.3) ;; *) die "--tls must be 1.2 or 1.3, have '$tls_version'" ;; esac
for s in ${servers//,/ }; do
	case $s in sipvisor | kamailio) ;; *) die "--servers: unknown server '$s'" ;; esac
done
command -v sipp >/dev/null || die "sipp not installed: run make bench-install"
command -v openssl >/dev/null || die "openssl not installed"
case ",$servers," in *,kamailio,*)
	command -v kamailio >/dev/null || die "kamailio not installed: run make bench-install"
	tls_status=$(dpkg-query -W -f='${Status}' kamailio-tls-modules 2>/dev/null || true)
	[ "$tls_status" = "install ok installed" ] || die "kamailio-tls-modules not installed: run make bench-install"
	;;
esac

mkdir -p "$out"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

# One certificate for both servers: ECDSA P-256, self-signed, for
# 127.0.0.1; sipload trusts it as its own root and checks it.
CERT_DIR=$out/cert
mkdir -p "$CERT_DIR"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
	-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$CERT_DIR/server.key" -out "$CERT_DIR/server.pem" 2>/dev/null ||
	die "openssl could not make the certificate"
export CERT_DIR
SIPVISOR_CFG=$BENCH_DIR/sipvisor-tls.cfg
KAMAILIO_CFG=$BENCH_DIR/kamailio-tls.cfg
KAMAILIO_TLS_CFG=$BENCH_DIR/kamailio-tls-module.cfg

# The client, sipload, comes from the same build.
build_sipvisor "$out"
machine_info >"$out/machine.txt"
echo "openssl: $(openssl version)" >>"$out/machine.txt"
echo "settings: servers=$servers hs_rates=$hs_rates hs_secs=$hs_secs hs_max_secs=$hs_max_secs hs_inflight=$hs_inflight rates=$rates secs=$secs warmup=$warmup conns=$conns tls=$tls_version reps=$reps settle=$settle children=$CHILDREN" >>"$out/machine.txt"

csv=$out/results.csv
echo "server,kind,rate,rep,started,successful,failed,p50_ms,p99_ms,elapsed_s,achieved_per_s,resumed,cpu_s,cpu_ms_per_op,ctxsw_per_op,server_exited" >"$csv"

# val FILE KEY prints KEY's value from a sipload summary, NA if absent:
# started, successful, failed, limited, elapsed_s, rate_per_s, p50_ms,
# p99_ms, resumed.
val() {
	awk -v k="$2" '
		$1 == "sipload" { v["elapsed_s"] = $3 + 0 }
		$1 == "calls" { v["started"] = $3; v["successful"] = $5; v["failed"] = $7; r = $10; sub(/^[(]/, "", r); v["rate_per_s"] = r }
		$1 == "setup" { p = $3; sub(/ms$/, "", p); v["p50_ms"] = p; p = $7; sub(/ms$/, "", p); v["p99_ms"] = p }
		$1 == "messages" { v["limited"] = $NF }
		$1 == "handshakes" { v["resumed"] = $5 }
		END { print (k in v) ? v[k] : "NA" }' "$1" 2>/dev/null || echo NA
}

# sipload DIR SECS FLAGS... runs sipload against the TLS socket, bounded
# by timeout(1) past its own bounds, its summary in DIR/out.txt and its
# counts every second in DIR/stat.csv.
sipload() {
	local dir=$1 secs=$2
	shift 2
	mkdir -p "$dir"
	timeout -k 5 $((secs + 60)) "$SIPLOAD_BIN" "127.0.0.1:$TLS_PORT" -t l1 -tls_ca "$CERT_DIR/server.pem" \
		-tls_version "$tls_version" -tls_groups x25519 -trace_stat -stf "$dir/stat.csv" -q "$@" \
		>"$dir/out.txt" 2>"$dir/err.txt" || echo "$?" >"$dir/exit"
}

# ok_now DIR prints the calls the sipload runs under DIR have completed so
# far (each writes a row a second).
ok_now() {
	local f n=0 v
	for f in "$1"/c*/stat.csv; do
		v=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "succeeded_total") c = i; next } { v = $c } END { print v + 0 }' "$f" 2>/dev/null)
		n=$((n + ${v:-0}))
	done
	echo "$n"
}

# snapshot PID prints a line per process of PID's tree: pid, role (the
# worker group sipvisor gave it, main for the root), CPU ticks and context
# switches, to tell where a run's CPU went.
snapshot() {
	local p role
	for p in $(tree_pids "$1"); do
		role=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^SIPVISOR_GROUP=//p' || true)
		[ -n "$role" ] || { [ "$p" = "$1" ] && role=main || role=child; }
		printf '%s %s %s %s\n' "$p" "$role" \
			"$(awk '{ i = length($0); while (i > 0 && substr($0, i, 1) != ")") i--; split(substr($0, i + 2), f, " "); print f[12] + f[13] }' "/proc/$p/stat" 2>/dev/null || echo 0)" \
			"$(cat /proc/"$p"/task/*/status 2>/dev/null | awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ { n += $2 } END { print n + 0 }')"
	done
}

# role_split BEFORE AFTER N prints, by role, the CPU seconds and the context
# switches between two snapshots, and both per operation of N. A process
# that came or went between them counts from 0 or is left out.
role_split() {
	awk -v hz="$CLK_TCK" -v n="$3" '
		FNR == NR { t0[$1] = $3; x0[$1] = $4; next }
		{ cpu[$2] += ($3 - t0[$1]) / hz; sw[$2] += $4 - x0[$1] }
		END {
			printf "%-10s %9s %12s %12s %14s\n", "role", "cpu_s", "ms_per_op", "ctxsw", "ctxsw_per_op"
			for (r in cpu) printf "%-10s %9.2f %12.4f %12d %14.2f\n", r, cpu[r], (n > 0) ? cpu[r] / n * 1000 : 0, sw[r], (n > 0) ? sw[r] / n : 0
		}' <(echo "$1") <(echo "$2")
}

# record SERVER KIND RATE REP DIR C0 C1 OK0 X0 X1 EXITED writes a row: CPU
# from C0 to C1 and context switches from X0 to X1 over the operations
# that succeeded after OK0; none when the server exited (EXITED 1), as its
# tree's CPU went with it.
record() {
	local server=$1 kind=$2 rate=$3 rep=$4 dir=$5 c0=$6 c1=$7 ok0=$8 x0=$9 x1=${10} exited=${11} o row
	o=$dir/out.txt
	row=$(awk -v a="$c0" -v b="$c1" -v ok="$(val "$o" successful)" -v ok0="$ok0" -v x0="$x0" -v x1="$x1" -v exited="$exited" 'BEGIN {
		cpu = b - a; n = ok - ok0
		if (exited) { print "NA,NA,NA,1"; exit }
		printf "%.2f,%s,%s,0", cpu, (n > 0) ? sprintf("%.4f", cpu / n * 1000) : "NA", (n > 0) ? sprintf("%.2f", (x1 - x0) / n) : "NA"
	}')
	echo "$server,$kind,$rate,$rep,$(val "$o" started),$(val "$o" successful),$(val "$o" failed),$(val "$o" p50_ms),$(val "$o" p99_ms),$(val "$o" elapsed_s),$(val "$o" rate_per_s),$(val "$o" resumed),$row" >>"$csv"
	log "  $(val "$o" successful) ok ($(val "$o" resumed) resumed), $(val "$o" failed) failed, $(val "$o" limited) limited, $(val "$o" rate_per_s)/s, p50 $(val "$o" p50_ms) ms p99 $(val "$o" p99_ms) ms, cpu ${row//,/ } (s, ms and context switches per one, exited)"
	[ ! -s "$dir/err.txt" ] || log "  sipload: $(tail -1 "$dir/err.txt")"
}

# alive_or_restart SERVER WORK DIR: after a run, a server that exited
# (Kamailio 5.6.3's tls module with OpenSSL 3 can crash under handshakes)
# leaves its log in DIR/server.log and is started again for the next run.
# Sets EXITED to 1 if it had exited, else 0.
alive_or_restart() {
	EXITED=0
	kill -0 "$SERVER_PID" 2>/dev/null && return
	EXITED=1
	log "  $1 EXITED during the run; its log is in $3/server.log; starting it again"
	cp "$2/$1.log" "$3/server.log" 2>/dev/null || true
	end_tree "$SERVER_PID" 5
	SERVER_PID=
	local i
	for ((i = 0; i < 100; i++)); do port_free "$SIP_PORT" && port_free "$TLS_PORT" && break; sleep 0.1; done
	start_server "$1" "$2"
}

# handshake_run SERVER WORK KIND RATE SECS INFLIGHT: KIND handshake (full)
# or handshake-resumed at RATE per second, or handshake-max (RATE 0) with
# INFLIGHT at a time: offered at 5,000/s, those due while INFLIGHT are
# under way not made (limited).
handshake_run() {
	local server=$1 work=$2 kind=$3 rate=$4 secs=$5 inflight=$6 dir c0 c1 x0 x1 s0 flags
	dir=$work/$kind-$rate-$rep
	[ "$kind" != handshake-max ] || dir=$work/$kind-$rep
	rm -rf "$dir"
	flags=(-tls_handshakes -l "$inflight" -recv_timeout 10s)
	[ "$kind" != handshake-resumed ] || flags+=(-tls_resume)
	if ((rate > 0)); then
		log "rep $rep/$reps $server $kind $rate/s for ${secs}s"
		flags+=(-r "$rate" -m $((rate * secs)))
	else
		log "rep $rep/$reps $server handshakes, $inflight at a time, for ${secs}s"
		flags+=(-r 5000 -timeout "$secs")
	fi
	c0=$(tree_cpu "$SERVER_PID") x0=$(tree_ctxsw "$SERVER_PID") s0=$(snapshot "$SERVER_PID")
	sipload "$dir" "$secs" "${flags[@]}"
	# Closed connections are cleaned up after the last handshake.
	sleep "$settle"
	c1=$(tree_cpu "$SERVER_PID") x1=$(tree_ctxsw "$SERVER_PID")
	role_split "$s0" "$(snapshot "$SERVER_PID")" "$(val "$dir/out.txt" successful)" >"$dir/procs.txt"
	alive_or_restart "$server" "$work" "$dir"
	record "$server" "$kind" "$rate" "$rep" "$dir" "$c0" "$c1" 0 "$x0" "$x1" "$EXITED"
}

# call_run SERVER WORK RATE
call_run() {
	local server=$1 work=$2 rate=$3 dir uac begin next counted c0 c1 x0 x1 s0 ok0 t
	dir=$work/call-$rate-$rep
	rm -rf "$dir"
	mkdir -p "$dir"
	log "rep $rep/$reps $server calls $rate/s over $conns connections for ${secs}s, counted from ${warmup}s"
	# A sipload per connection, each a share of the rate; the servers route
	# every call to the UAS whatever its Request-URI.
	(
		for ((i = 1; i <= conns; i++)); do
			sipload "$dir/c$i" $((secs + 35)) -sn uac -i 127.0.0.1 \
				-r "$(awk -v r="$rate" -v n="$conns" 'BEGIN { print r / n }')" -m $(((rate * secs + conns - 1) / conns)) &
		done
		wait
	) &
	uac=$!
	BG_PIDS+=("$uac")
	# DIR/cpu.csv samples the server's CPU and the calls done every 10 s,
	# to show whether the counted part was steady.
	begin=$SECONDS next=10 counted=0
	c0=$(tree_cpu "$SERVER_PID") x0=$(tree_ctxsw "$SERVER_PID") s0=$(snapshot "$SERVER_PID")
	ok0=0
	echo "t_s,cpu_s,successful" >"$dir/cpu.csv"
	while kill -0 "$uac" 2>/dev/null; do
		sleep 1
		t=$((SECONDS - begin))
		if ((warmup > 0 && !counted && t >= warmup)); then
			c0=$(tree_cpu "$SERVER_PID") x0=$(tree_ctxsw "$SERVER_PID") s0=$(snapshot "$SERVER_PID")
			ok0=$(ok_now "$dir")
			counted=1
		fi
		if ((t >= next)); then
			echo "$t,$(tree_cpu "$SERVER_PID"),$(ok_now "$dir")" >>"$dir/cpu.csv"
			next=$((next + 10))
		fi
	done
	wait "$uac" || true
	# Transactions linger after their last message (Kamailio's wait
	# timer, sipvisor's 5 s); their cleanup belongs to the run.
	sleep "$settle"
	c1=$(tree_cpu "$SERVER_PID") x1=$(tree_ctxsw "$SERVER_PID")
	# The run's summary: the connections' counts summed, the first one's
	# setup times.
	awk '
		FNR == 1 { f++ }
		$1 == "calls" { o += $3; s += $5; x += $7; r += substr($10, 2) }
		$1 == "setup" && f == 1 { setup = $0 }
		$1 == "sipload" && f == 1 { head = $0 }
		END { print head; printf "  calls      offered %d  succeeded %d  failed %d  aborted 0  (%.1f succeeded/s)\n", o, s, x, r; print setup }' \
		"$dir"/c*/out.txt >"$dir/out.txt"
	cat "$dir"/c*/err.txt >"$dir/err.txt" 2>/dev/null || true
	role_split "$s0" "$(snapshot "$SERVER_PID")" "$(awk -v ok="$(val "$dir/out.txt" successful)" -v ok0="$ok0" 'BEGIN { print ok - ok0 }')" >"$dir/procs.txt"
	alive_or_restart "$server" "$work" "$dir"
	record "$server" call "$rate" "$rep" "$dir" "$c0" "$c1" "$ok0" "$x0" "$x1" "$EXITED"
}

for ((rep = 1; rep <= reps; rep++)); do
	for server in ${servers//,/ }; do
		work=$out/$server
		mkdir -p "$work"
		start_uas "$work"
		start_server "$server" "$work"
		c0=$(tree_cpu "$SERVER_PID")
		sleep "$settle"
		c1=$(tree_cpu "$SERVER_PID")
		echo "$server,idle,0,$rep,0,0,0,NA,NA,$settle,NA,NA,$(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b-a}'),NA,NA,0" >>"$csv"
		for rate in ${hs_rates//,/ }; do
			handshake_run "$server" "$work" handshake "$rate" "$hs_secs" 200
			handshake_run "$server" "$work" handshake-resumed "$rate" "$hs_secs" 200
		done
		for rate in ${rates//,/ }; do
			call_run "$server" "$work" "$rate"
		done
		# Last, as it is the run most likely to bring a server down.
		((hs_max_secs == 0)) || handshake_run "$server" "$work" handshake-max 0 "$hs_max_secs" "$hs_inflight"
		stop_server
		stop_uas
	done
done

# summary.md: the median of each point over the repetitions, and the ratio.
median_of() { # SERVER KIND RATE COLUMN
	awk -F, -v s="$1" -v k="$2" -v r="$3" -v m="$4" '
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		$1 == s && $2 == k && $3 == r && $col[m] != "NA" { print $col[m] }' "$csv" | sort -g | awk '
		{ x[NR] = $1 }
		END {
			if (NR == 0) { print "NA"; exit }
			print (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
		}'
}
ratio() { awk -v s="$1" -v k="$2" 'BEGIN { print (s != "NA" && k != "NA" && k + 0 > 0) ? sprintf("%.2f", s / k) : "NA" }'; }
row() { # LABEL KIND RATE COLUMN
	local line="| $1" s k v
	for server in ${servers//,/ }; do
		v=$(median_of "$server" "$2" "$3" "$4")
		line="$line | $v"
		case $server in sipvisor) s=$v ;; kamailio) k=$v ;; esac
	done
	case ",$servers," in *,sipvisor,*kamailio,* | *,kamailio,*sipvisor,*) line="$line | $(ratio "$s" "$k")" ;; esac
	echo "$line |"
}
{
	head="| measure"
	sep="|---"
	for server in ${servers//,/ }; do head="$head | $server"; sep="$sep|---:"; done
	case ",$servers," in *,sipvisor,*kamailio,* | *,kamailio,*sipvisor,*) head="$head | sipvisor ÷ Kamailio"; sep="$sep|---:" ;; esac
	echo "$head |"
	echo "$sep|"
	for rate in ${hs_rates//,/ }; do
		row "CPU ms per full handshake at $rate/s" handshake "$rate" cpu_ms_per_op
		row "context switches per handshake at $rate/s" handshake "$rate" ctxsw_per_op
		row "handshakes done / failed of those started at $rate/s (${hs_secs} s)" handshake "$rate" successful
		row "" handshake "$rate" failed
		row "handshake time p50 / p99 at $rate/s (ms), at the client" handshake "$rate" p50_ms
		row "" handshake "$rate" p99_ms
		row "CPU ms per resumed handshake at $rate/s" handshake-resumed "$rate" cpu_ms_per_op
		row "context switches per resumed handshake at $rate/s" handshake-resumed "$rate" ctxsw_per_op
		row "resumed handshakes done / of them resumed / failed at $rate/s" handshake-resumed "$rate" successful
		row "" handshake-resumed "$rate" resumed
		row "" handshake-resumed "$rate" failed
		row "resumed handshake time p50 / p99 at $rate/s (ms)" handshake-resumed "$rate" p50_ms
		row "" handshake-resumed "$rate" p99_ms
	done
	if ((hs_max_secs > 0)); then
		row "handshakes/s, $hs_inflight at a time, client on the same cores" handshake-max 0 achieved_per_s
		row "CPU ms per handshake at that rate" handshake-max 0 cpu_ms_per_op
	fi
	for rate in ${rates//,/ }; do
		row "CPU ms per call over TLS at $rate/s (counted from ${warmup} s of ${secs} s)" call "$rate" cpu_ms_per_op
		row "context switches per call at $rate/s" call "$rate" ctxsw_per_op
		row "calls completed / failed at $rate/s" call "$rate" successful
		row "" call "$rate" failed
		row "call setup p50 / p99 at $rate/s (ms)" call "$rate" p50_ms
		row "" call "$rate" p99_ms
	done
	row "idle CPU s over ${settle} s" idle 0 cpu_s
	line="| runs in which the server exited (crashed)"
	for server in ${servers//,/ }; do
		line="$line | $(awk -F, -v s="$server" 'NR > 1 && $1 == s && $NF == 1 { n++; k = k sep $2 (($3 > 0) ? " " $3 "/s" : ""); sep = ", " } END { print n + 0 (n ? " (" k ")" : "") }' "$csv")"
	done
	case ",$servers," in *,sipvisor,*kamailio,* | *,kamailio,*sipvisor,*) line="$line | " ;; esac
	echo "$line |"
	echo
	echo "Medians of $reps repetition(s); TLS $tls_version, X25519, ECDSA P-256; calls over $conns connections; TCP workers (sipvisor) or TCP readers (Kamailio): $CHILDREN."
} >"$out/summary.md"
log "wrote $csv and $out/summary.md"
cat "$out/summary.md"
