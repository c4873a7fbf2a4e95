#!/usr/bin/env bash
# Usage: scripts/system-packages.sh. Installs the Debian packages the test suite runs for real, if any
# is missing: PostgreSQL (the audit store's PostgreSQL path), Prometheus and Alertmanager (the metrics
# tool and the webhook against real servers), Chromium (the audit page and the optimizer's report in a
# real browser), and nginx, rsyslog, logrotate and a JDK (logs written and rotated by the real
# programs). The tests start each server themselves on a loopback port; a test whose program is
# missing fails, it never skips.
#
# It installs with apt-get as root, or through passwordless sudo. Where it can do neither it installs
# nothing and exits 1 with the one command to run, so the suite never starts half-equipped.
set -euo pipefail

missing=()
has() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || missing+=(postgresql)
has prometheus || missing+=(prometheus)
has prometheus-alertmanager || missing+=(prometheus-alertmanager)
has chromium || missing+=(chromium)
has nginx || missing+=(nginx)
has rsyslogd || missing+=(rsyslog)
has logrotate || missing+=(logrotate)
# Java's single-file launcher needs the compiler: a Java program writes the stack-trace log.
has javac || missing+=(openjdk-17-jdk-headless)
[ ${#missing[@]} -eq 0 ] && exit 0

command=(apt-get install -y -qq --no-install-recommends "${missing[@]}")
if [ "$(id -u)" -eq 0 ]; then
  run=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  run=(sudo -n)
else
  echo "the test suite needs Debian packages that are not installed; run: sudo apt-get update && sudo ${command[*]}" >&2
  exit 1
fi
started=$(date +%s)
echo "installing ${missing[*]} from Debian for the test suite" >&2
"${run[@]}" apt-get update -qq
"${run[@]}" env DEBIAN_FRONTEND=noninteractive "${command[@]}" >/dev/null
echo "installed ${missing[*]} from Debian in $(( $(date +%s) - started )) s" >&2
