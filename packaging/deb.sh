#!/usr/bin/env bash
# deb.sh NFPM ARCH — package $DIST/lmos-hub-linux-ARCH (make dist) as a .deb
# in $DIST. ARCH is a dist name: amd64, arm64, armv6, armv7. The two 32-bit
# ARM packages are both Debian armhf; the file name says which CPU:
#   lmos-hub_V_armhf.deb        GOARM=6: every Raspberry Pi on 32-bit
#                               Raspberry Pi OS (Zero/1 included)
#   lmos-hub_V_armhf-armv7.deb  GOARM=7: ARMv7 and later only (Pi 2/3/4 and
#                               other armhf boards); dies on a Pi Zero/1
set -euo pipefail
nfpm=$1 arch=$2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
: "${DIST:?}" "${VERSION:?}"

case $arch in
amd64) nfpm_arch=amd64 file=amd64 ;;
arm64) nfpm_arch=arm64 file=arm64 ;;
armv6) nfpm_arch=arm6 file=armhf ;;
armv7) nfpm_arch=arm7 file=armhf-armv7 ;;
*) echo "deb.sh: unknown arch $arch" >&2; exit 2 ;;
esac
# Debian versions start with a digit: v1.2.3 -> 1.2.3; a bare commit
# (git describe without tags) -> 0.0.0~git<commit>.
version=${VERSION#v}
[[ $version =~ ^[0-9] ]] || version="0.0.0~git${version}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$DIST/lmos-hub-linux-$arch" "$stage/lmos-hub"
ln -s "$repo/packaging" "$stage/packaging"
ln -s "$repo/systemd" "$stage/systemd"
out="$DIST/lmos-hub_${version}_${file}.deb"
(cd "$stage" && NFPM_ARCH=$nfpm_arch VERSION=$version "$nfpm" package --config packaging/nfpm.yaml --packager deb --target "$out" >/dev/null)
echo "$out"
