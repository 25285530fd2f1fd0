#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the Debian packages (debian/) from a copy of the working tree (tracked and untracked,
# not ignored files), so dpkg-buildpackage's outputs and debian/build stay out of the tree.
# Usage: scripts/build-debs.sh OUTDIR. The .deb files end up in OUTDIR; the log in OUTDIR/build.log.
set -euo pipefail
out=${1:?usage: scripts/build-debs.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=$(dpkg-parsechangelog -l "$root/debian/changelog" -S Version)
src=$out/src/sysom-$version
rm -rf "$out/src" "$out"/*.deb "$out"/*.ddeb "$out"/*.buildinfo "$out"/*.changes
mkdir -p "$src"
# (a tracked file deleted in the work tree is skipped: --ignore-failed-read)
(cd "$root" && git ls-files -z -co --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) |
	tar -C "$src" -xf -
start=$SECONDS
if ! (cd "$src" && DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1; then
	tail -40 "$out/build.log" >&2
	echo "build-debs: dpkg-buildpackage failed (log: $out/build.log)" >&2
	exit 1
fi
mv "$out"/src/*.deb "$out"/
mv "$out"/src/*.ddeb "$out"/ 2>/dev/null || true
rm -rf "$out/src"
echo "build-debs: $(cd "$out" && ls *.deb | tr '\n' ' ')in $((SECONDS - start)) s"
