#!/usr/bin/env bash
# Copies a build's tools into DIR as a relocatable bundle for a machine that lacks mlprof's
# libraries (elfutils, fmt, libcurl and theirs): a GPU machine with no package access, say.
#   scripts/bundle.sh DIR        (build from $MLPROF_BUILD_DIR, default ./build)
# DIR/bin holds mlprof, mlprof-run and the preload variants; DIR/bin/lib the shared libraries the
# tools link, except the C and C++ runtimes (the target's own, which must be as new as the build
# machine's: glibc >= this machine's). The tools find DIR/bin/lib through DT_RPATH ($ORIGIN/lib),
# which covers their libraries' own dependencies too; nothing is put in LD_LIBRARY_PATH, so the
# profiled program never sees these copies. The preload links libc alone and needs none of them.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/bundle.sh DIR" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MLPROF_BUILD_DIR:-$root/build}
out=$1
command -v patchelf >/dev/null || { echo "bundle.sh: patchelf not found: run scripts/install-deps.sh" >&2; exit 2; }
for f in mlprof mlprof-run libmlprof_preload.so; do
  [ -e "$build/bin/$f" ] || { echo "bundle.sh: $build/bin/$f missing: run scripts/build.sh first" >&2; exit 2; }
done
rm -rf "$out"; mkdir -p "$out/bin/lib"
cp "$build"/bin/mlprof "$build"/bin/mlprof-run "$build"/bin/libmlprof_preload*.so "$out/bin/"
# The runtimes stay the target's: bundling an older libstdc++ or glibc piece would break there.
keep='^(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libresolv)\.so'
for tool in mlprof mlprof-run; do
  ldd "$build/bin/$tool" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $keep ]] || cp -L "$path" "$out/bin/lib/$name"
  done
  patchelf --force-rpath --set-rpath '$ORIGIN/lib' "$out/bin/$tool"
done
# Debug sections only (symbol tables stay), of the tools and their libraries: most of a
# RelWithDebInfo build's size. The preload keeps its own (the report names its frames with lines).
strip --strip-debug "$out"/bin/mlprof "$out"/bin/mlprof-run "$out"/bin/lib/*
echo "bundle.sh: $out/bin ($(ls "$out/bin/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1)); needs glibc >= $(ldd --version | head -1 | awk '{print $NF}')"
