#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sysom-symrepo end to end: add a stripped binary and its separate debug file, look up known
# functions by file offset (what agents send) and by address against nm/addr2line, info,
# verify, a corrupted symbol file caught by verify and repaired by gc. Needs no root.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

SYMREPO_BIN=$BUILD/sysom-symrepo
[ -x "$SYMREPO_BIN" ] || { echo "missing $SYMREPO_BIN: build first" >&2; exit 1; }
for t in gcc g++ objcopy strip nm readelf addr2line; do
	command -v "$t" >/dev/null || skip_all "$t is not installed"
done

W=$E2E_TMP/symrepo
REPO=$W/repo
mkdir -p "$W"
sr() { "$SYMREPO_BIN" --repo "$REPO" "$@"; }

# A C++ program with plain, namespaced and inlined functions; -fno-inline keeps the named
# ones out of line, always_inline puts `mix` inside `gamma`.
cat >"$W/prog.cc" <<'EOF'
#include <cstdio>
#include <cstdlib>
namespace sysom_test {
int alpha(int x) { return x * 3 + 1; }
int beta(int x) { return alpha(x) ^ 0x55; }
}
static inline __attribute__((always_inline)) int mix(int x) {
	int s = 0;
	for (int i = 0; i < x; i++)
		s += (i * 7) ^ x;
	return s;
}
extern "C" int gamma_fn(int x) { return mix(x) + sysom_test::beta(x); }
int main(int argc, char **argv) { std::printf("%d\n", gamma_fn(argc + (argv[1] ? atoi(argv[1]) : 0))); return 0; }
EOF
# -no-pie: file offsets (0x1...) differ from addresses (0x401...), so the translation matters.
# -falign-functions=64: padding between functions, gaps no symbol covers.
g++ -g -O1 -fno-inline -no-pie -falign-functions=64 -Wl,--build-id -o "$W/prog" "$W/prog.cc" || { echo "compile failed" >&2; exit 1; }
objcopy --only-keep-debug "$W/prog" "$W/prog.debug"
strip -o "$W/prog.stripped" "$W/prog"
want_bid=$(readelf -n "$W/prog" | awk '/Build ID/ {print $3}')

# file offset of a virtual address, through the executable PT_LOAD segments (as agents do)
offset_of() {
	local v=$((16#$1)) off va fsz
	while read -r off va fsz; do
		if [ "$v" -ge $((va)) ] && [ "$v" -lt $((va + fsz)) ]; then
			printf '0x%x\n' $((v - va + off))
			return 0
		fi
	done < <(readelf -lW "$W/prog" | awk '$1 == "LOAD" && / E / {print $2, $3, $5}')
	return 1
}
nm_addr() { nm "$W/prog" | awk -v f="$1" '$3 == f {print $1; exit}'; }

# ---- add
sr add "$W/prog.stripped" --debug "$W/prog.debug" >"$W/add.out" 2>"$W/add.err"
check "add exits 0" [ $? = 0 ]
got_bid=$(awk 'NR == 1 {print $1}' "$W/add.out")
check "add prints the build ID ($want_bid)" test -n "$want_bid" -a "$got_bid" = "$want_bid"
check "add reports writer stats" grep -q "symbol file: built in" "$W/add.out"
check "add reports functions from DWARF/symtab" grep -Eq "functions: [0-9]+ from .symtab" "$W/add.out"
check "repository layout .build-id/xx/rest" test -f "$REPO/.build-id/${want_bid:0:2}/${want_bid:2}.executable" -a \
	-f "$REPO/.build-id/${want_bid:0:2}/${want_bid:2}.debug" -a -f "$REPO/.build-id/${want_bid:0:2}/${want_bid:2}.sym"
check "add again: already held, exit 0" sh -c "'$SYMREPO_BIN' --repo '$REPO' add '$W/prog.stripped' --debug '$W/prog.debug' | grep -q 'already held'"

# ---- lookup by file offset: the function nm names, the line addr2line names
lookup_ok=true
for fn in _ZN10sysom_test5alphaEi _ZN10sysom_test4betaEi gamma_fn main; do
	v=$(nm_addr "$fn")
	[ -n "$v" ] || { diag "nm has no $fn"; lookup_ok=false; continue; }
	a=$(printf '%x' $((16#$v + 4)))
	off=$(offset_of "$a")
	sr lookup "$want_bid" "$off" >"$W/lookup.out"
	first=$(head -1 "$W/lookup.out")
	last=$(tail -1 "$W/lookup.out")
	want_name=$(echo "$fn" | c++filt)
	# addr2line without -i names the innermost location: our last (innermost) line.
	want_line=$(addr2line -e "$W/prog" "0x$a" | sed 's/ .*//; s/.*://')
	diag "offset $off ($fn+4 = 0x$a): $(tr '\n' '|' <"$W/lookup.out")"
	case "$first" in
	"$off  $want_name  "*) ;;
	*) diag "expected '$off  $want_name  ...'"; lookup_ok=false ;;
	esac
	case "$last" in
	*":$want_line") ;;
	*) diag "expected the innermost frame at line $want_line"; lookup_ok=false ;;
	esac
done
check "lookup of file offsets names the nm function (demangled) and addr2line's line" $lookup_ok

v=$(nm_addr _ZN10sysom_test4betaEi)
check "lookup --vaddr takes addresses" sh -c "'$SYMREPO_BIN' --repo '$REPO' lookup --vaddr $want_bid 0x$v | grep -q 'sysom_test::beta(int)'"
check "several addresses: one line each" [ "$(sr lookup --vaddr "$want_bid" "0x$v" "0x$(nm_addr main)" | grep -c '^0x')" = 2 ]
check "an offset in no executable segment is [no symbol]" sh -c "'$SYMREPO_BIN' --repo '$REPO' lookup $want_bid 0x0 | grep -q '^0x0  \[no symbol\]'"

# The padding after alpha (aligned functions): a gap, never the neighbour's name.
al=$(nm -S "$W/prog" | awk '$4 == "_ZN10sysom_test5alphaEi" {print $1, $2; exit}')
gap=$(printf '%x' $((16#${al% *} + 16#${al#* } + 1)))
next_fn=$(nm -n "$W/prog" | awk -v a="${al% *}" 'found && ($2 == "T" || $2 == "t") {print $1; exit} $1 == a {found = 1}')
if [ $((16#$gap)) -lt $((16#$next_fn)) ]; then
	check "an address in the padding between functions is [no symbol]" \
		sh -c "'$SYMREPO_BIN' --repo '$REPO' lookup --vaddr $want_bid 0x$gap | grep -q '^0x$gap  \[no symbol\]$'"
else
	not_ok "no padding after alpha (next function at 0x$next_fn)"
fi

# An address inside gamma_fn where addr2line -i sees `mix` inlined: shown indented.
g=$(nm -S "$W/prog" | awk '$4 == "gamma_fn" {print $1, $2; exit}')
gstart=$((16#${g% *})) gsize=$((16#${g#* }))
inl=""
for ((a = gstart; a < gstart + gsize; a++)); do
	if [ "$(addr2line -i -f -e "$W/prog" "$(printf 0x%x $a)" | sed -n 3p)" = gamma_fn ]; then
		inl=$(printf '%x' $a)
		break
	fi
done
if [ -n "$inl" ]; then
	sr lookup --vaddr "$want_bid" "0x$inl" >"$W/inline.out"
	diag "inlined at 0x$inl: $(tr '\n' '|' <"$W/inline.out")"
	check "inlined frame shown indented under its function" \
		sh -c "sed -n 1p '$W/inline.out' | grep -q '  gamma_fn  ' && sed -n 2p '$W/inline.out' | grep -Eq '^ +\(inlined\) mix'"
else
	not_ok "addr2line found no inlined address in gamma_fn (the compiler did not inline mix)"
fi

# ---- errors and exit codes
sr lookup 0123456789abcdef0123456789abcdef01234567 0x10 >/dev/null 2>&1
check "unknown Build ID: exit 1" [ $? = 1 ]
sr lookup "$want_bid" zz >/dev/null 2>&1
check "bad address: exit 2" [ $? = 2 ]
sr lookup >/dev/null 2>&1
check "missing arguments: exit 2" [ $? = 2 ]
sr frobnicate >/dev/null 2>&1
check "unknown command: exit 2" [ $? = 2 ]
"$SYMREPO_BIN" --no-such-flag gc >/dev/null 2>&1
check "unknown flag: exit 2" [ $? = 2 ]
sr add --debug "$W/prog.debug" >/dev/null 2>&1
check "add --debug without FILE: exit 2" [ $? = 2 ]
sr add "$W/prog.cc" --debug "$W/prog.debug" >/dev/null 2>"$W/mismatch.err"
check "add with another build's debug file: exit 1" [ $? = 1 ]
check "  ... saying the build IDs differ" grep -q "build ID" "$W/mismatch.err"

# ---- info and verify
sr info "$want_bid" >"$W/info.out"
check "info exits 0" [ $? = 0 ]
check "info lists the three files with sizes" sh -c "grep -Eq '^executable: .* bytes\)' '$W/info.out' && grep -Eq '^debug file: .* bytes\)' '$W/info.out' && grep -Eq '^symbols: .* bytes\)' '$W/info.out'"
check "info shows symbol file statistics" sh -c "grep -Eq '^functions: +[1-9]' '$W/info.out' && grep -Eq '^lines: +[1-9]' '$W/info.out'"
sr verify >"$W/verify.out"
check "verify passes on a good repository" [ $? = 0 ]
check "  ... and says how many Build IDs it checked" grep -q "^1 Build IDs checked, 0 problems" "$W/verify.out"

# ---- corruption: verify fails, lookups refuse, gc repairs
sym=$REPO/.build-id/${want_bid:0:2}/${want_bid:2}.sym
size=$(stat -c %s "$sym")
truncate -s $((size / 2)) "$sym"
sr verify >"$W/verify2.out"
check "verify fails on a truncated symbol file" [ $? = 1 ]
check "  ... and names the problem" grep -q "^PROBLEM $want_bid symbol file" "$W/verify2.out"
sr lookup "$want_bid" "$off" >/dev/null 2>&1
check "lookup refuses the corrupt symbol file: exit 1" [ $? = 1 ]
sr gc >"$W/gc.out"
check "gc exits 0" [ $? = 0 ]
check "gc rebuilt the symbol file" grep -q "^symbol files rebuilt: *1$" "$W/gc.out"
check "verify passes after gc" sh -c "'$SYMREPO_BIN' --repo '$REPO' verify >/dev/null"
check "lookup works again after gc" sh -c "'$SYMREPO_BIN' --repo '$REPO' lookup --vaddr $want_bid 0x$v | grep -q 'sysom_test::beta(int)'"

# An executable whose content no longer matches its name: verify fails, gc removes it.
exe=$REPO/.build-id/${want_bid:0:2}/${want_bid:2}.executable
cp "$W/prog.cc" "$exe"
sr verify >"$W/verify3.out"
check "verify fails on an executable that is not its Build ID" [ $? = 1 ]
sr gc >"$W/gc2.out"
check "gc removes it" grep -q "^corrupt files removed: *1$" "$W/gc2.out"
check "the debug and symbol files stay; verify passes" sh -c "'$SYMREPO_BIN' --repo '$REPO' verify >/dev/null"

# A file without a build ID note (here not even ELF) is held under its content hash.
sr add "$W/prog.cc" >"$W/add2.out"
check "add of a non-ELF file: exit 0" [ $? = 0 ]
hash_id=$(awk 'NR == 1 {print $1}' "$W/add2.out")
check "  ... identified by its 32-hex content hash" test "${#hash_id}" = 32
check "  ... stored under .file-hash/" test -f "$REPO/.file-hash/${hash_id:0:2}/${hash_id:2}.executable"
check "  ... info knows it" sh -c "'$SYMREPO_BIN' --repo '$REPO' info $hash_id | grep -q 'not an ELF file'"
check "verify passes with it (2 Build IDs)" sh -c "'$SYMREPO_BIN' --repo '$REPO' verify | grep -q '^2 Build IDs checked, 0 problems'"

finish
