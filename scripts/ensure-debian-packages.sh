#!/bin/sh
# Install the Debian packages the tests need, only when their command is missing (idempotent).
#
#   scripts/ensure-debian-packages.sh PACKAGE[:COMMAND] ...
#
# COMMAND is what the package provides and defaults to the package's name, e.g.
#   scripts/ensure-debian-packages.sh prometheus:promtool chromium
# Nothing is installed when every command is already on PATH. Needs root (or sudo) and apt-get otherwise.
set -eu

missing=""
for spec in "$@"; do
    package=${spec%%:*}
    command=${spec#*:}
    if ! command -v "$command" >/dev/null 2>&1; then
        missing="$missing $package"
    fi
done
[ -z "$missing" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-debian-packages: missing:$missing, and apt-get is not here; install them by hand" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "ensure-debian-packages: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086 # the package list is meant to split
$sudo apt-get -o DPkg::Lock::Timeout=300 update -qq
# shellcheck disable=SC2086
$sudo apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing
