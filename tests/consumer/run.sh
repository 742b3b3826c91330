#!/usr/bin/env bash
# Builds and runs the consumer program (quadrants.c) the four ways another
# project can depend on tensorgrad, and checks that the subproject build
# brings in the library alone. Prints one line per way.
#   usage: tests/consumer/run.sh <source-root> <install-prefix> <workdir>
# <install-prefix> must hold an installed tensorgrad (meson install).
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 <source-root> <install-prefix> <workdir>" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
prefix=$(cd "$2" && pwd)
mkdir -p "$3"
work=$(cd "$3" && pwd)
here="$src/tests/consumer"
export OMP_WAIT_POLICY=passive

fail() { echo "consumer: $*" >&2; exit 1; }

pc_file=$(find "$prefix" -name tensorgrad.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc_file" ] || fail "no tensorgrad.pc under $prefix"
pc_dir=$(dirname "$pc_file")
lib_dir=$(dirname "$pc_dir")

# A fresh copy of the consumer for each way, so no way sees another's files.
fresh() {
  rm -rf "${work:?}/$1"
  mkdir -p "$work/$1"
  cp "$here/quadrants.c" "$here/Makefile" "$here/meson.build" "$here/CMakeLists.txt" "$work/$1/"
  echo "$work/$1"
}

# 1. pkg-config, shared library. The program is told where libtensorgrad is;
# libtensorgrad finds its OpenBLAS by itself.
dir=$(fresh make-dynamic)
PKG_CONFIG_PATH="$pc_dir" make -s -C "$dir" quadrants >/dev/null
grep -q -- '-rpath\|/libopenblas' "$pc_file" && fail "tensorgrad.pc names a run path or a library file"
LD_LIBRARY_PATH="$lib_dir" "$dir/quadrants" >/dev/null || fail "pkg-config (dynamic) program failed"
echo "consumer: pkg-config, shared library: ok"

# 2. pkg-config --static and -static: no shared library at all. A tensorgrad
# built with MPI requires it, and Open MPI as Debian ships it has no static
# library (libmpi.a): then there is no static program to make.
static_libs=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --static --libs tensorgrad)
static_mpi=yes
if grep -qw -- '-lmpi' <<<"$static_libs"; then
  static_mpi=no
  for d in $(grep -o -- '-L[^ ]*' <<<"$static_libs" | cut -c3-) $(dirname "$(cc -print-file-name=libmpi.a)"); do
    [ -f "$d/libmpi.a" ] && static_mpi=yes
  done
fi
if [ $static_mpi = no ]; then
  echo "consumer: pkg-config --static, static program: skipped (built with MPI, which has no libmpi.a here)"
else
  dir=$(fresh make-static)
  PKG_CONFIG_PATH="$pc_dir" make -s -C "$dir" static >/dev/null 2>"$dir/link.log" ||
    { cat "$dir/link.log" >&2; fail "static link failed"; }
  if readelf -d "$dir/quadrants-static" 2>/dev/null | grep -q NEEDED; then
    fail "the static program still needs shared libraries"
  fi
  "$dir/quadrants-static" >/dev/null || fail "pkg-config (static) program failed"
  echo "consumer: pkg-config --static, static program: ok"
fi

# 3. meson subproject through the wrap. subprojects/tensorgrad is a link to
# the checkout under test, so its working tree is what gets built; the wrap
# names the same place. PKG_CONFIG_PATH is cleared and the fallback forced,
# so no installed tensorgrad can stand in for the subproject.
dir=$(fresh meson-subproject)
mkdir -p "$dir/subprojects"
sed "s|@TENSORGRAD_URL@|$src|" "$here/subprojects/tensorgrad.wrap" >"$dir/subprojects/tensorgrad.wrap"
ln -s "$src" "$dir/subprojects/tensorgrad"
(cd "$dir" && env -u PKG_CONFIG_PATH meson setup build --force-fallback-for=tensorgrad \
   >setup.log 2>&1) || { cat "$dir/setup.log" >&2; fail "meson setup of the subproject build failed"; }
# What the parent is given, read from the configured build before building.
tests=$(meson test -C "$dir/build" --no-rebuild --list 2>/dev/null)
[ "$tests" = "quadrants" ] || fail "the parent's meson test lists more than its own test: $tests"
targets=$(ninja -C "$dir/build" -t targets all | cut -d: -f1)
if grep -E '^subprojects/tensorgrad/(tests|examples|bench|fuzz)/' <<<"$targets" >/dev/null; then
  fail "the subproject builds tensorgrad's tests, examples, bench or fuzz targets"
fi
log="$dir/build/meson-logs/meson-log.txt"
grep -q 'Executing subproject tensorgrad' "$log" || fail "tensorgrad did not come from the subproject"
if grep -Ei "dependency check( |$)|'check'|check\.pc" "$log" >/dev/null; then
  fail "the subproject looked up the Check library"
fi
# The dependency carries the public headers alone: compiled with the include
# flags the consumer got, neither an internal header nor the generated config
# header may be found.
inc_flags=$(python3 -c '
import json, shlex, sys
for c in json.load(open(sys.argv[1])):
    if c["file"].endswith("quadrants.c"):
        args = shlex.split(c["command"])
        print(" ".join(a for a in args if a.startswith("-I")))
' "$dir/build/compile_commands.json")
[ -n "$inc_flags" ] || fail "no include flags found for quadrants.c"
echo "#include <tensorgrad/tensorgrad.h>" >"$dir/probe.c"
# shellcheck disable=SC2086
(cd "$dir/build" && cc $inc_flags -fsyntax-only "$dir/probe.c") ||
  fail "<tensorgrad/tensorgrad.h> is not reachable through the tensorgrad dependency"
for hidden in internal.h tg_config.h; do
  echo "#include \"$hidden\"" >"$dir/probe.c"
  # shellcheck disable=SC2086
  if (cd "$dir/build" && cc $inc_flags -fsyntax-only "$dir/probe.c" 2>/dev/null); then
    fail "$hidden is reachable through the tensorgrad dependency"
  fi
done
# What the parent builds and runs.
ninja -C "$dir/build" >/dev/null || fail "subproject build failed"
meson test -C "$dir/build" --no-rebuild >/dev/null || fail "subproject program failed"
echo "consumer: meson subproject (wrap), library only, internal headers hidden: ok"

# 4. CMake find_package, the shared library and then the static one.
for variant in OFF ON; do
  dir=$(fresh "cmake-static-$variant")
  cmake -S "$dir" -B "$dir/build" -DCMAKE_PREFIX_PATH="$prefix" -DQUADRANTS_STATIC=$variant \
    >"$dir/cmake.log" 2>&1 || { cat "$dir/cmake.log" >&2; fail "cmake configure failed"; }
  cmake --build "$dir/build" >>"$dir/cmake.log" 2>&1 || { cat "$dir/cmake.log" >&2; fail "cmake build failed"; }
  "$dir/build/quadrants" >/dev/null || fail "CMake program (QUADRANTS_STATIC=$variant) failed"
done
echo "consumer: CMake find_package, tensorgrad::tensorgrad and tensorgrad::tensorgrad_static: ok"
