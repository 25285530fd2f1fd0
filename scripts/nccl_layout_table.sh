#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Derives the ncclComm offsets table of agent/gpu/nccl_layout.c from NCCL's sources: for each
# release tag, compiles offsetof(struct ncclComm, rank | nRanks | commHash) and sizeof with g++
# against that tag's src/include and the CUDA headers, and prints one KNOWN(...) row.
#   scripts/nccl_layout_table.sh NCCL_GIT_DIR [TAG_REGEX]     (default: v2.14 .. v2.28 tags)
# NCCL_GIT_DIR is a clone (or bare mirror) of github.com/NVIDIA/nccl. Needs g++ and
# /usr/local/cuda/include (with cccl/). Check a row against a library with DWARF first:
# build/tests/unit/agent/test_nccl_layout does that for the library on this machine.
set -euo pipefail
git_dir=${1:?usage: nccl_layout_table.sh NCCL_GIT_DIR [TAG_REGEX]}
regex=${2:-'^v2\.(1[4-9]|2[0-8])\.'}
cuda=${CUDA_INCLUDE:-/usr/local/cuda/include}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -d "$git_dir/.git" ] && git_dir=$git_dir/.git

# CUDA 13's cudaTypedefs.h dropped the unversioned PFN_x names older NCCL releases use: alias
# each to its newest versioned typedef (function pointers: the layout does not change).
echo '#include <cudaTypedefs.h>' | g++ -E -x c++ -I"$cuda" - >"$work/pre.txt"
python3 - "$work/pre.txt" >"$work/shim.h" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
defined = set(re.findall(r'\(\s*\*\s*PFN_(\w+)\s*\)', t))
versions = {}
for n in defined:
    m = re.match(r'(\w+?)_v(\d+)$', n)
    if m:
        versions.setdefault(m.group(1), []).append(int(m.group(2)))
print('#include <cudaTypedefs.h>')
for name, vs in sorted(versions.items()):
    if name not in defined:
        print('typedef PFN_%s_v%d PFN_%s;' % (name, max(vs), name))
PY
cat >"$work/off.cc" <<'CC'
#include "comm.h"
#include <cstddef>
#include <cstdio>
int main() {
#ifdef NO_COMMHASH
	printf("%zu %zu 0 0 %zu\n", offsetof(struct ncclComm, rank), offsetof(struct ncclComm, nRanks),
	       sizeof(struct ncclComm));
#else
	printf("%zu %zu %zu 8 %zu\n", offsetof(struct ncclComm, rank),
	       offsetof(struct ncclComm, nRanks), offsetof(struct ncclComm, commHash),
	       sizeof(struct ncclComm));
#endif
	return 0;
}
CC

for tag in $(git --git-dir="$git_dir" tag | grep -E "$regex" | sort -V); do
	d=$work/$tag
	mkdir -p "$d"
	git --git-dir="$git_dir" archive "$tag" src/include src/nccl.h.in makefiles/version.mk | tar -x -C "$d"
	eval "$(sed -n 's/^NCCL_\(MAJOR\|MINOR\|PATCH\) *:= *\([0-9]*\)/\1=\2/p' "$d/makefiles/version.mk")"
	sed -e "s/\${nccl:Major}/$MAJOR/g" -e "s/\${nccl:Minor}/$MINOR/g" -e "s/\${nccl:Patch}/$PATCH/g" \
		-e "s/\${nccl:Suffix}//g" -e "s/\${nccl:Version}/$((MAJOR * 10000 + MINOR * 100 + PATCH))/g" \
		"$d/src/nccl.h.in" >"$d/src/include/nccl.h"
	extra=()
	grep -q commHash "$d/src/include/comm.h" || extra+=(-DNO_COMMHASH)
	compile() {
		g++ "$@" -w -fpermissive "${extra[@]}" -I"$d/src/include" -I"$d/src/include/plugin" \
			-I"$cuda" -I"$cuda/cccl" -include "$work/shim.h" -o "$d/off" "$work/off.cc" 2>"$d/err"
	}
	# 2.16's nvtx.h calls a non-constexpr function from a constexpr constructor: C++11 with
	# NVTX's relaxed constexpr off accepts it.
	if compile -std=c++17 || compile -std=c++11 -DNVTX3_RELAXED_CONSTEXPR=; then
		read -r rank nranks hash hsize size < <("$d/off")
		echo "	KNOWN($MAJOR, $MINOR, $PATCH, $rank, $nranks, $hash, $hsize, $size),"
	else
		echo "	/* $tag: does not compile here: $(grep -m1 error "$d/err" | cut -c1-120) */"
	fi
done
