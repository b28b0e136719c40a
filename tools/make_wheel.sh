#!/usr/bin/env bash
# make wheel: dist/oomscope-VERSION-py3-none-manylinux_2_N_x86_64.whl from a build tree, offline,
# with Debian's Python build tools (python3-build, python3-wheel, python3-setuptools, patchelf).
#   tools/make_wheel.sh BUILD_DIR OUT_DIR [PYTHON]
# The wheel holds the install tree's runtime part (cmake --install --component runtime: the
# stripped CLI and preload, the libunwind the preload loads, the adapter's sitecustomize) under
# oomscope/_native, the oomscope package itself, and what the bundled libunwind needs beyond
# the manylinux libraries (liblzma), found by its RUNPATH $ORIGIN. N is the newest glibc symbol
# version any of its binaries uses.
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
python=${3:-python3}
source=$(cd "$(dirname "$0")/.." && pwd)
stage="$build/wheel"
native="$stage/oomscope/_native"

rm -rf "$stage"
mkdir -p "$stage"
cmake --install "$build" --prefix "$native" --component runtime >/dev/null
# The package is the wheel's own oomscope/ (the sitecustomize finds it from _native).
cp -r "$source/src/python/oomscope/." "$stage/oomscope/"
rm -rf "$native/share/oomscope/python/oomscope" "$stage/oomscope/__pycache__"
cp "$source/packaging/wheel/setup.py" "$source/packaging/wheel/pyproject.toml" "$stage/"
cp "$source/README.md" "$stage/"

# libunwind's own needs outside the manylinux set, beside it.
unwind="$native/lib/oomscope/libunwind.so.8"
for lib in $(objdump -p "$unwind" | awk '/NEEDED/ {print $2}'); do
  case "$lib" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libgcc_s.so.*|libstdc++.so.*) ;;
    *)
      path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}')
      [ -n "$path" ] || { echo "make wheel: $lib (needed by libunwind) not found" >&2; exit 1; }
      cp -L "$path" "$native/lib/oomscope/$lib"
      ;;
  esac
done
chmod u+w "$unwind"
patchelf --set-rpath '$ORIGIN' "$unwind"

glibc=$(find "$native" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} \; 2>/dev/null |
        grep -o 'GLIBC_2\.[0-9]*' | sed 's/GLIBC_2\.//' | sort -n | tail -n 1)
version=$(sed -n 's/^project(oomscope VERSION \([0-9.]*\).*/\1/p' "$source/CMakeLists.txt")
export OOMSCOPE_WHEEL_PLATFORM="manylinux_2_${glibc}_$(uname -m)" OOMSCOPE_VERSION="$version"
(cd "$stage" && "$python" -m build --wheel --no-isolation --outdir "$out" . >"$stage/build.log" 2>&1) ||
  { cat "$stage/build.log" >&2; exit 1; }
ls "$out"/oomscope-"$version"-py3-none-"$OOMSCOPE_WHEEL_PLATFORM".whl
