#!/usr/bin/env bash
# make wheel: dist/oomscope-VERSION-py3-none-manylinux_2_N_x86_64.whl from a build tree, offline,
# with Debian's Python build tools (python3-build, python3-wheel, python3-setuptools, patchelf).
#   tools/make_wheel.sh BUILD_DIR OUT_DIR [PYTHON]
# The wheel holds the install tree's runtime part (cmake --install --component runtime: the
# stripped CLI and preload, the libunwind and libdw the preload loads, the adapter's
# sitecustomize) under oomscope/_native, the oomscope package itself, and what the bundled
# libraries need beyond the manylinux libraries (liblzma, libz, libbz2), found by their RUNPATH
# $ORIGIN. N is the newest glibc symbol version any of its binaries uses.
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

# What the bundled libraries (libunwind; elfutils' libdw and libelf) need outside the manylinux
# set, beside them, found by their RUNPATH $ORIGIN.
for bundled in libunwind.so.8 libdw.so.1 libelf.so.1; do
  file="$native/lib/oomscope/$bundled"
  [ -f "$file" ] || continue
  for lib in $(objdump -p "$file" | awk '/NEEDED/ {print $2}'); do
    case "$lib" in
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libgcc_s.so.*|libstdc++.so.*) ;;
      *)
        [ -f "$native/lib/oomscope/$lib" ] && continue
        # awk reads to the end: leaving early would end ldconfig by SIGPIPE, which pipefail
        # makes this script's status (141) when the machine is loaded
        path=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ && !found {print $NF; found = 1}')
        [ -n "$path" ] || { echo "make wheel: $lib (needed by $bundled) not found" >&2; exit 1; }
        cp -L "$path" "$native/lib/oomscope/$lib"
        # and its copyright file, as its Debian package ships it
        # (by name in the architecture's folder: with merged /usr, dpkg knows some under /lib)
        package=$(dpkg-query -S "*/$(uname -m)-linux-gnu/$(basename "$(readlink -f "$path")")" 2>/dev/null |
                  sed -n '1s/:.*//p')
        if [ -n "$package" ] && [ -f "/usr/share/doc/$package/copyright" ]; then
          mkdir -p "$native/share/doc/oomscope/third-party"
          cp "/usr/share/doc/$package/copyright" "$native/share/doc/oomscope/third-party/$package.copyright"
        fi
        ;;
    esac
  done
  chmod u+w "$file"
  patchelf --set-rpath '$ORIGIN' "$file"
done

glibc=$(find "$native" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} \; 2>/dev/null |
        grep -o 'GLIBC_2\.[0-9]*' | sed 's/GLIBC_2\.//' | sort -n | tail -n 1)
version=$(sed -n 's/^project(oomscope VERSION \([0-9.]*\).*/\1/p' "$source/CMakeLists.txt")
export OOMSCOPE_WHEEL_PLATFORM="manylinux_2_${glibc}_$(uname -m)" OOMSCOPE_VERSION="$version"
(cd "$stage" && "$python" -m build --wheel --no-isolation --outdir "$out" . >"$stage/build.log" 2>&1) ||
  { cat "$stage/build.log" >&2; exit 1; }
ls "$out"/oomscope-"$version"-py3-none-"$OOMSCOPE_WHEEL_PLATFORM".whl
