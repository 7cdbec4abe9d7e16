#!/usr/bin/env bash
# mcp-size.sh: the binary size the MCP door (its SDK) adds. Builds lmos-hub
# for linux/arm64 and linux/arm GOARM=7 as `make dist` does (static,
# -trimpath, -ldflags "-s -w"), at BEFORE (default 8351cd0, main before the
# door) and AFTER (default HEAD), from `git archive` copies in a temp dir,
# and prints each size in bytes and the difference.
#
#   scripts/mcp-size.sh [BEFORE [AFTER]]
set -euo pipefail

before=${1:-8351cd0}
after=${2:-HEAD}
repo=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# build REV ARCH-ENV... prints the size of the binary of REV.
build() {
	local rev=$1
	shift
	local src="$tmp/src-$rev"
	if [ ! -d "$src" ]; then
		mkdir -p "$src"
		git -C "$repo" archive "$rev" | tar -x -C "$src"
	fi
	(cd "$src" && env CGO_ENABLED=0 GOOS=linux "$@" go build -trimpath -ldflags "-s -w" -o "$tmp/bin" ./cmd/lmos-hub)
	stat -c %s "$tmp/bin"
}

printf '%-8s %12s %12s %10s\n' arch "$before" "$after" added
for arch in arm64 armv7; do
	case $arch in
	arm64) envs=(GOARCH=arm64) ;;
	armv7) envs=(GOARCH=arm GOARM=7) ;;
	esac
	b=$(build "$before" "${envs[@]}")
	a=$(build "$after" "${envs[@]}")
	printf '%-8s %12d %12d %10d (%+.2f MiB, %+.1f %%)\n' "$arch" "$b" "$a" $((a - b)) \
		"$(echo "($a - $b) / 1048576" | bc -l)" "$(echo "($a - $b) * 100 / $b" | bc -l)"
done
