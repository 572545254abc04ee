#!/usr/bin/env bash
# The library as others link it: libkvstitch.so exports exactly the KVS_API
# declarations of include/kvstitch.h; `make install PREFIX=...` lays out the
# header, both libraries and kvstitch.pc; examples/prefix_reuse.c builds
# against the installed copy through pkg-config and runs (bit-exact reuse).
# Prints "ok NAME" / "FAIL NAME" per check.
set -u
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
MODEL="${KVSTITCH_MODEL:?}"
SO="$BUILD/libkvstitch.so"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
status=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; status=1; }

# --- exported symbols == public declarations ------------------------------------
grep -o '^KVS_API[^(]*(' include/kvstitch.h | sed -E 's/.*[ *]([a-z0-9_]+)\($/\1/' | sort > "$tmp/declared"
nm -D --defined-only "$SO" | awk '$2 == "T" { print $3 }' | sort > "$tmp/exported"
n_decl=$(wc -l < "$tmp/declared")
[ "$n_decl" -ge 50 ] && ok "library_declarations_found" || fail library_declarations_found "only $n_decl KVS_API lines parsed"
if cmp -s "$tmp/declared" "$tmp/exported"; then ok "library_exports_equal_public_api"
else fail library_exports_equal_public_api "$(diff "$tmp/declared" "$tmp/exported" | grep '^[<>]' | head -10 | tr '\n' ' ')"; fi
grep -qv '^kvs_' "$tmp/exported" && fail library_exports_prefixed "$(grep -v '^kvs_' "$tmp/exported" | head -5)" || ok library_exports_prefixed
# Internal functions exist in the objects but are hidden (the check above is not vacuous).
nm "$BUILD/libkvstitch.a" 2>/dev/null | grep -q ' T kvs_store_insert$' && ! grep -qx kvs_store_insert "$tmp/exported" \
    && ok library_internal_hidden || fail library_internal_hidden "kvs_store_insert not in the archive or exported"

# --- make install ----------------------------------------------------------------
P="$tmp/prefix"
if make --no-print-directory -s install PREFIX="$P" BUILD="$BUILD" > "$tmp/install.log" 2>&1; then ok library_make_install
else fail library_make_install "$(tail -5 "$tmp/install.log")"; fi
for f in include/kvstitch.h lib/libkvstitch.a lib/libkvstitch.so lib/pkgconfig/kvstitch.pc; do
    [ -e "$P/$f" ] || fail library_install_layout "missing $P/$f"
done
soname=$(readelf -d "$P/lib/libkvstitch.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -e "$P/lib/$soname" ] && ok library_install_layout || fail library_install_layout "soname '$soname' not installed"
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
want=$(sed -n 's/^#define KVS_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' include/kvstitch.h | paste -sd.)
[ "$(pkg-config --modversion kvstitch)" = "$want" ] && ok library_pc_version || fail library_pc_version "pc says $(pkg-config --modversion kvstitch), header $want"
pkg-config --cflags --libs kvstitch | grep -q -- "-I$P/include" && ok library_pc_flags || fail library_pc_flags "$(pkg-config --cflags --libs kvstitch)"

# --- the example, against the installed library only ----------------------------
# (SANITIZE builds: the installed library is instrumented, so is the example)
san=${SANITIZE:+-fsanitize=$SANITIZE}
if cc -std=c11 -Wall -Wextra -Werror $san examples/prefix_reuse.c $(pkg-config --cflags --libs kvstitch) \
      -o "$tmp/prefix_reuse" 2> "$tmp/cc.log"; then ok library_example_builds
else fail library_example_builds "$(head -5 "$tmp/cc.log")"; fi
LD_LIBRARY_PATH="$P/lib" ldd "$tmp/prefix_reuse" 2>/dev/null | grep -q "$P/lib/$soname" \
    && ok library_example_links_installed || fail library_example_links_installed "$(LD_LIBRARY_PATH="$P/lib" ldd "$tmp/prefix_reuse" | grep kvstitch)"
out=$(LD_LIBRARY_PATH="$P/lib" "$tmp/prefix_reuse" "$MODEL" 2>&1); rc=$?
echo "$out" | grep -q "^kvstitch $want (header $want)" && ok library_version_runtime || fail library_version_runtime "$(echo "$out" | head -1)"
cached=$(echo "$out" | sed -n 's/.*tokens, \([0-9]*\) from the cache/\1/p')
[ $rc -eq 0 ] && [ "${cached:-0}" -gt 100 ] && echo "$out" | grep -q "bit-identical to cold: yes" \
    && ok library_example_prefix_reuse || fail library_example_prefix_reuse "rc=$rc $out"
exit $status
