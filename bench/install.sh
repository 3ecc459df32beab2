#!/usr/bin/env bash
# Installs what the benchmarks need from Debian: Kamailio (the server
# sipvisor is compared with), its TLS module (bench/tls.sh), its SQLite
# module (run.sh --kamailio-store sqlite-wt|sqlite-wb: registrations written
# to a file, as sipvisor writes them), SIPp (sip-tester), and perf and strace
# for profile.sh and syscalls.sh. Does nothing for a package that is already
# there.
set -euo pipefail

need=()
command -v kamailio >/dev/null 2>&1 || need+=(kamailio)
command -v sipp >/dev/null 2>&1 || need+=(sip-tester)
# run.sh creates the SQLite store's tables with the sqlite3 shell.
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
# profile.sh records with perf, syscalls.sh counts with strace.
command -v perf >/dev/null 2>&1 || need+=(linux-perf)
command -v strace >/dev/null 2>&1 || need+=(strace)
# The module is a file, not a command: ask dpkg. (Read into a variable, as
# below, so that pipefail does not trip on grep closing the pipe.)
for mod in kamailio-tls-modules kamailio-sqlite-modules; do
	status=$(dpkg-query -W -f='${Status}' "$mod" 2>/dev/null || true)
	[ "$status" = "install ok installed" ] || need+=("$mod")
done
if [ ${#need[@]} -eq 0 ]; then
	echo "kamailio, its tls and sqlite modules, sqlite3, sipp, perf and strace already installed"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "install.sh: need root to install ${need[*]}" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# An empty candidate means the package lists are stale or absent. (The
# policy is read into a variable: grep -q closing the pipe early would
# fail the pipeline under pipefail.)
candidate() { apt-cache policy kamailio 2>/dev/null | sed -n 's/^ *Candidate: *//p'; }
case "$(candidate)" in [0-9]*) ;; *) timeout 300 apt-get update ;; esac
if ! [[ "$(candidate)" =~ ^[0-9] ]]; then
	echo "install.sh: no kamailio package in the configured Debian sources" >&2
	exit 1
fi
timeout 600 apt-get install -y --no-install-recommends "${need[@]}"

# The Debian package starts a system service on the default port; the
# benchmarks run their own instance, so keep the system one out of the way.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet kamailio 2>/dev/null; then
	systemctl stop kamailio || true
	systemctl disable kamailio || true
fi
kamailio -v | head -1
sipp -v 2>&1 | grep -m1 -i 'sipp v' || true
