#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU machines have CMake and a compiler but no package registry. Copy
# Criterion (headers, library and the shared libraries it needs beyond libc)
# from this machine into .gpudeps/, an ignored folder that the device run
# carries; scripts/test.sh uses it when present.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$(ls /usr/lib/x86_64-linux-gnu/libcriterion.so.3 2>/dev/null) || {
  echo "pack-gpu-deps.sh: install libcriterion-dev first" >&2; exit 1; }
rm -rf .gpudeps && mkdir -p .gpudeps/lib .gpudeps/include
cp -r /usr/include/criterion .gpudeps/include/
cp -L "$lib" .gpudeps/lib/libcriterion.so.3
ln -s libcriterion.so.3 .gpudeps/lib/libcriterion.so
ldd "$lib" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' |
  while read -r dep; do cp -L "$dep" .gpudeps/lib/; done
du -sh .gpudeps
