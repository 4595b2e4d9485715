#!/usr/bin/env bash
# Make Docker usable for the sandbox tests, idempotently: install docker.io and debootstrap if
# missing, start dockerd in the background if it is not answering, build the sandbox image if absent.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null || ! command -v iptables >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq docker.io debootstrap iptables >/dev/null
fi
# A half-finished earlier install leaves packages unpacked but not configured.
DEBIAN_FRONTEND=noninteractive dpkg --configure -a >/dev/null

if ! docker info >/dev/null 2>&1; then
    nohup dockerd >/tmp/dockerd.log 2>&1 &
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /tmp/dockerd.log" >&2; exit 1; }
fi

PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python -m envgym.cli sandbox build-image --json
