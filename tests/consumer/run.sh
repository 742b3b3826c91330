#!/usr/bin/env bash
# Builds and runs the consumer programs the ways another project can depend
# on tensorgrad: quadrants.c against tensorgrad (shared, and fully static
# even where tensorgrad-dist and MPI are installed), averaged.c against
# tensorgrad-dist where the prefix has it; checks that tensorgrad.pc never
# brings MPI and that the subproject build brings in the libraries alone.
# Prints one line per way.
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
# averaged runs under mpiexec (as root in CI, more ranks than cores is fine).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

fail() { echo "consumer: $*" >&2; exit 1; }

pc_file=$(find "$prefix" -name tensorgrad.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc_file" ] || fail "no tensorgrad.pc under $prefix"
pc_dir=$(dirname "$pc_file")
lib_dir=$(dirname "$pc_dir")
# tensorgrad-dist.pc is there when tensorgrad was built with MPI.
has_dist=no
[ -f "$pc_dir/tensorgrad-dist.pc" ] && has_dist=yes

# A fresh copy of the consumer for each way, so no way sees another's files.
fresh() {
  rm -rf "${work:?}/$1"
  mkdir -p "$work/$1"
  cp "$here/quadrants.c" "$here/averaged.c" "$here/Makefile" "$here/meson.build" \
     "$here/CMakeLists.txt" "$work/$1/"
  echo "$work/$1"
}

# 1. pkg-config, shared library. The program is told where libtensorgrad is;
# libtensorgrad finds its OpenBLAS by itself. tensorgrad.pc must not bring
# MPI, directly or privately: that is tensorgrad-dist's.
dir=$(fresh make-dynamic)
PKG_CONFIG_PATH="$pc_dir" make -s -C "$dir" quadrants >/dev/null
grep -q -- '-rpath\|/libopenblas' "$pc_file" && fail "tensorgrad.pc names a run path or a library file"
if PKG_CONFIG_PATH="$pc_dir" pkg-config --print-requires --print-requires-private tensorgrad |
     grep -Eq '^(ompi|mpi)'; then
  fail "tensorgrad.pc requires MPI"
fi
LD_LIBRARY_PATH="$lib_dir" "$dir/quadrants" >/dev/null || fail "pkg-config (dynamic) program failed"
echo "consumer: pkg-config, shared library, no MPI: ok"

# 2. pkg-config --static and -static: no shared library at all. This works
# beside an installed tensorgrad-dist too: Open MPI as Debian ships it has
# no static library, and tensorgrad.pc does not ask for it.
dir=$(fresh make-static)
PKG_CONFIG_PATH="$pc_dir" make -s -C "$dir" static >/dev/null 2>"$dir/link.log" ||
  { cat "$dir/link.log" >&2; fail "static link failed"; }
if readelf -d "$dir/quadrants-static" 2>/dev/null | grep -q NEEDED; then
  fail "the static program still needs shared libraries"
fi
"$dir/quadrants-static" >/dev/null || fail "pkg-config (static) program failed"
echo "consumer: pkg-config --static, static program: ok"

# 2b. pkg-config tensorgrad-dist, shared: averaged.c over two ranks (or
# alone where there is no mpiexec).
if [ $has_dist = yes ]; then
  dir=$(fresh make-dist)
  PKG_CONFIG_PATH="$pc_dir" make -s -C "$dir" dist >/dev/null
  readelf -d "$dir/averaged" | grep -q 'NEEDED.*libtensorgrad-dist\.so' ||
    fail "averaged does not link libtensorgrad-dist.so"
  launch=()
  command -v mpiexec >/dev/null && launch=(mpiexec -n 2 --bind-to none)
  LD_LIBRARY_PATH="$lib_dir" OMP_NUM_THREADS=1 "${launch[@]}" "$dir/averaged" >"$dir/run.log" 2>&1 ||
    { cat "$dir/run.log" >&2; fail "pkg-config tensorgrad-dist program failed"; }
  echo "consumer: pkg-config tensorgrad-dist, shared library, ${launch[*]:-one process}: ok"
else
  echo "consumer: pkg-config tensorgrad-dist: skipped (tensorgrad was built without MPI)"
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
# What the parent is given, read from the configured build before building:
# its own tests alone (averaged where the subproject found MPI).
tests=$(meson test -C "$dir/build" --no-rebuild --list 2>/dev/null)
grep -qx quadrants <<<"$tests" || fail "the parent's meson test lacks quadrants: $tests"
if grep -vxE 'quadrants|averaged' <<<"$tests" >/dev/null; then
  fail "the parent's meson test lists more than its own tests: $tests"
fi
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
echo "consumer: meson subproject (wrap), libraries only, internal headers hidden: ok"

# 4. CMake find_package, the shared library and then the static one; with
# tensorgrad-dist, the component dist too. Without it, nothing looks for MPI.
for variant in OFF ON; do
  for dist in OFF $([ $has_dist = yes ] && echo ON); do
    dir=$(fresh "cmake-static-$variant-dist-$dist")
    cmake -S "$dir" -B "$dir/build" -DCMAKE_PREFIX_PATH="$prefix" -DQUADRANTS_STATIC=$variant \
      -DQUADRANTS_DIST=$dist >"$dir/cmake.log" 2>&1 || { cat "$dir/cmake.log" >&2; fail "cmake configure failed"; }
    if [ $dist = OFF ] && grep -q 'MPI' "$dir/cmake.log"; then
      fail "find_package(tensorgrad) without the dist component looked for MPI"
    fi
    cmake --build "$dir/build" >>"$dir/cmake.log" 2>&1 || { cat "$dir/cmake.log" >&2; fail "cmake build failed"; }
    "$dir/build/quadrants" >/dev/null || fail "CMake program (QUADRANTS_STATIC=$variant) failed"
    if [ $dist = ON ]; then
      OMP_NUM_THREADS=1 "$dir/build/averaged" >/dev/null ||
        fail "CMake dist program (QUADRANTS_STATIC=$variant) failed"
    fi
  done
done
echo "consumer: CMake find_package, tensorgrad::tensorgrad and tensorgrad::tensorgrad_static$(
  [ $has_dist = yes ] && echo ', COMPONENTS dist: tensorgrad::dist and tensorgrad::dist_static'): ok"
