#!/usr/bin/env bash
# Gathers what scripts/gpu_check.sh needs on a machine with no package index whose image already
# holds torch, torchvision, numpy, Pillow, tqdm, psutil and ninja (BUNDLE=dir there):
#   dir/wheels  the other wheels (orjson; webdataset and braceexpand for the tars row), for
#               PYVER (default 3.12) on manylinux x86-64, downloaded here
#   dir/jpeg    libjpeg-turbo's headers and shared library from this machine (include/, lib/)
# Usage: bash scripts/offline_bundle.sh dir
set -euo pipefail
dir="${1:?usage: offline_bundle.sh DIR}"
pyver="${PYVER:-3.12}"
mkdir -p "$dir/wheels" "$dir/jpeg/include" "$dir/jpeg/lib"
plat=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  plat+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
  --implementation cp "${plat[@]}" -d "$dir/wheels" orjson
python3 -m pip download -q --no-deps --only-binary=:all: -d "$dir/wheels" webdataset braceexpand
header() {  # the first of the compiler's include folders holding $1
  for d in /usr/include /usr/include/"$(gcc -print-multiarch 2>/dev/null)" /usr/local/include; do
    [ -f "$d/$1" ] && { cp "$d/$1" "$dir/jpeg/include/"; return 0; }
  done
  echo "offline_bundle: $1 not found: install libjpeg-turbo's development files" >&2; exit 1
}
for h in jpeglib.h jconfig.h jmorecfg.h jerror.h; do header "$h"; done
so="$(gcc -print-file-name=libjpeg.so)"
[ -e "$so" ] || { echo "offline_bundle: libjpeg.so not found" >&2; exit 1; }
real="$(readlink -f "$so")"
cp "$real" "$dir/jpeg/lib/"
ln -sf "$(basename "$real")" "$dir/jpeg/lib/libjpeg.so"
soname="$(objdump -p "$real" 2>/dev/null | awk '/SONAME/ {print $2}')"
[ -n "$soname" ] && ln -sf "$(basename "$real")" "$dir/jpeg/lib/$soname"
du -sh "$dir"
