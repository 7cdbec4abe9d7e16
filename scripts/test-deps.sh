#!/usr/bin/env bash
# test-deps.sh — install what the test suite needs. Idempotent: a second run
# with nothing to do returns in well under a second.
#
#   * Debian packages providing required commands (node, npm, ...), installed
#     with apt-get when the command is missing — only when running as root;
#     otherwise the missing packages are listed and the script exits 1.
#   * test/interop/node_modules via `npm install --no-save` from the lock
#     file, skipped when the stamp file
#     test/interop/node_modules/.lock-stamp holds the sha256 of
#     test/interop/package-lock.json.
#
# To require another Debian package, add a `need_deb <command> <package>` line
# below (e.g. `need_deb mosquitto_sub mosquitto-clients`).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'test-deps: %s\n' "$*" >&2; }

# ---- Debian packages -------------------------------------------------------

MISSING_DEBS=()
MISSING_CMDS=()

# need_deb COMMAND PACKAGE: PACKAGE must be installed when COMMAND is not on PATH.
need_deb() {
	local cmd=$1 pkg=$2 p
	command -v "$cmd" >/dev/null 2>&1 && return 0
	MISSING_CMDS+=("$cmd")
	for p in "${MISSING_DEBS[@]+"${MISSING_DEBS[@]}"}"; do
		[[ $p == "$pkg" ]] && return 0
	done
	MISSING_DEBS+=("$pkg")
}

need_deb node nodejs
need_deb npm npm
need_deb mosquitto_pub mosquitto-clients
need_deb ip iproute2 # network namespaces for the mDNS tests
need_deb curl curl # a client of its own for conditional requests and content codings
need_deb avahi-daemon avahi-daemon # mDNS interop (in a namespace, on a private D-Bus)
need_deb avahi-browse avahi-utils
need_deb dbus-daemon dbus
need_deb python3 python3 # serves the Avahi-published TD
need_deb mosquitto_rr mosquitto-clients # mosquitto_pub/sub/rr: independent MQTT clients
need_deb /usr/sbin/mosquitto mosquitto # the upstream broker of the MQTT bridge tests (each test runs its own on a loopback port)
need_deb dig bind9-dnsutils # legacy unicast DNS queries to the hub's mDNS port
need_deb openssl openssl # the TLS certificate's fingerprint as openssl prints it
need_deb promtool prometheus # promtool check metrics on /metrics

# need_py MODULE PACKAGE: Debian's python3 (/usr/bin/python3, not a pyenv or
# venv one earlier on PATH) must import MODULE, else PACKAGE is installed.
MISSING_PY=()
need_py() {
	local mod=$1 pkg=$2
	/usr/bin/python3 -c "import $mod" >/dev/null 2>&1 && return 0
	MISSING_PY+=("$mod")
	MISSING_DEBS+=("$pkg")
}
need_py paho.mqtt.client python3-paho-mqtt # Python paho-mqtt as an independent MQTT client
# Debian's Chromium, driven headless by npm playwright-core for the dashboard's
# browser tests (test/e2e/dashboard_browser_test.go). playwright-core is
# pinned in test/interop/package.json to the release built against the
# Chromium major that bookworm-security ships (1.64.1: Chromium 156); it
# talks CDP to /usr/bin/chromium and downloads no browser of its own.
need_deb chromium chromium
# Packaging (test/packaging): make, dpkg-deb and dpkg for the .debs and an
# install into a scratch root, useradd/userdel for its scripts,
# systemd-analyze for the unit, qemu-aarch64-static to run the arm64 build.
need_deb make make
need_deb dpkg-deb dpkg
need_deb useradd passwd
need_deb systemd-analyze systemd
need_deb qemu-aarch64-static qemu-user-static
need_deb systemd-nspawn systemd-container # boots Debian with systemd to run the unit for real
need_deb debootstrap debootstrap # that Debian's tree (cached in .cache/nspawn-bookworm)
need_deb nsenter util-linux

if ((${#MISSING_DEBS[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		log "missing commands: ${MISSING_CMDS[*]+"${MISSING_CMDS[*]}"} ${MISSING_PY[*]+"python modules: ${MISSING_PY[*]}"}"
		log "install the Debian packages: ${MISSING_DEBS[*]}"
		log "  e.g. sudo apt-get install --no-install-recommends ${MISSING_DEBS[*]}"
		exit 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "missing commands: ${MISSING_CMDS[*]}; apt-get is not available to install ${MISSING_DEBS[*]}"
		exit 1
	fi
	log "installing Debian packages: ${MISSING_DEBS[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${MISSING_DEBS[@]}"
	hash -r
	for c in "${MISSING_CMDS[@]+"${MISSING_CMDS[@]}"}"; do
		if ! command -v "$c" >/dev/null 2>&1; then
			log "still missing after apt-get install: $c"
			exit 1
		fi
	done
	for m in "${MISSING_PY[@]+"${MISSING_PY[@]}"}"; do
		if ! /usr/bin/python3 -c "import $m" >/dev/null 2>&1; then
			log "still missing after apt-get install: python module $m"
			exit 1
		fi
	done
fi

# ---- Go tools ----------------------------------------------------------------

# need_go NAME MODULE/PATH VERSION: the command NAME built from PATH at
# VERSION in .cache/bin (gitignored); `go version -m` tells the version.
need_go() {
	local name=$1 path=$2 ver=$3 bin=.cache/bin/$1
	if [[ -x $bin ]] && go version -m "$bin" 2>/dev/null | grep -q "[[:space:]]$ver\b"; then
		return 0
	fi
	log "go install $path@$ver into .cache/bin"
	GOBIN=$PWD/.cache/bin go install "$path@$ver"
}
# nfpm builds the .debs (make deb); v2.45.2 and v2.44.0 install here, later
# ones do not install here.
need_go nfpm github.com/goreleaser/nfpm/v2/cmd/nfpm v2.45.2

# ---- npm packages for test/interop -----------------------------------------

INTEROP=test/interop
LOCK=$INTEROP/package-lock.json
STAMP=$INTEROP/node_modules/.lock-stamp

if [[ ! -f $LOCK ]]; then
	log "$LOCK is missing"
	exit 1
fi

want=$(sha256sum "$LOCK" | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
if [[ $want == "$have" ]]; then
	log "$INTEROP/node_modules is up to date"
else
	log "npm install in $INTEROP (node $(node --version), npm $(npm --version))"
	# Not `npm ci`: cbor-x's optional native helper (cbor-extract) has
	# per-platform packages that the registry mirror here lacks, so the lock
	# cannot list them and `npm ci` refuses the lock as out of sync. `npm
	# install` installs the same locked versions and skips a missing optional
	# package (cbor-x then uses its pure-JavaScript decoder); --no-save keeps
	# the lock file as committed. A fresh node_modules keeps it a clean install.
	rm -rf "$INTEROP/node_modules"
	npm install --no-save --no-audit --no-fund --prefix "$INTEROP"
	printf '%s\n' "$want" >"$STAMP"
fi
