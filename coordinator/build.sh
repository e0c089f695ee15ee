#!/usr/bin/env bash
# Builds linkcpp-server: llama.cpp's server from the source pinned inside node-llama-cpp@3.21.1, plus our patches.
# Offline after the one `npm pack`; CPU-only; ccache kept outside the clone so CI and later runs reuse it.
# Idempotent: with nothing changed, a second run only asks cmake whether anything is out of date (seconds).
#
#   coordinator/build.sh            # build (or refresh) coordinator/bin/linkcpp-server, linkcpp-quantize, linkcpp-expert-ref
#   LINKCPP_VARIANT=stock coordinator/build.sh   # same source without our patches -> coordinator/bin-stock/ (benchmarks)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
variant=${LINKCPP_VARIANT:-hooked}
pkg=node-llama-cpp
pkg_version=3.21.1
# npm registry integrity of node-llama-cpp-3.21.1.tgz: a tarball that does not match is refused.
pkg_integrity='sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg=='
llama_commit=80fb11ac

cache_root=${EXPERTSWARM_CACHE:-$HOME/.cache/expertswarm}
work="$here/.work"
src="$work/llama.cpp-$variant"
build="$work/build-$variant"
case "$variant" in
  hooked) bin="$here/bin" ;;
  stock)  bin="$here/bin-stock" ;;
  *) echo "build.sh: LINKCPP_VARIANT must be hooked or stock, not '$variant'" >&2; exit 2 ;;
esac
mkdir -p "$cache_root" "$work" "$bin"
# One build per variant at a time: `npm test` runs this script, and two runs laying or building the same tree at once
# break each other. A second run waits for the first, then finds little or nothing left to do.
exec 9>"$work/.lock-$variant"
if ! flock -n 9; then
  printf '[build:coordinator] another build of %s is running; waiting for it\n' "$variant"
  flock 9
fi
export CCACHE_DIR=${CCACHE_DIR:-$cache_root/ccache}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
# Source paths differ between clones (CI clones elsewhere); let ccache hit across them.
export CCACHE_BASEDIR="$here"
export CCACHE_NOHASHDIR=1

log() { printf '[build:coordinator] %s\n' "$*"; }
t0=$(date +%s)

tgz="$cache_root/$pkg-$pkg_version.tgz"
if [ ! -f "$tgz" ]; then
  log "fetching $pkg@$pkg_version tarball (npm pack, ~35 MB)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack "$pkg@$pkg_version" --silent >/dev/null)
  mv "$tmp/$pkg-$pkg_version.tgz" "$tgz.part"
  rm -rf "$tmp"
  got="sha512-$(openssl dgst -sha512 -binary "$tgz.part" | base64 -w0)"
  if [ "$got" != "$pkg_integrity" ]; then
    rm -f "$tgz.part"
    echo "build.sh: integrity mismatch for $pkg@$pkg_version: got $got" >&2; exit 1
  fi
  mv "$tgz.part" "$tgz"
fi

bundle="$cache_root/llama-$pkg_version.bundle"
if [ ! -f "$bundle" ]; then
  tar -xzf "$tgz" -O package/llama/gitRelease.bundle > "$bundle.part"
  mv "$bundle.part" "$bundle"
fi

patches=()
if [ "$variant" = hooked ]; then
  while IFS= read -r p; do patches+=("$p"); done < <(find "$here/patches" -name '*.patch' | sort)
fi
# The stamp names everything the source tree depends on (the commit, every patch, every overlay file under src/); a
# change re-lays the tree.
stamp_want=$( { echo "$llama_commit $variant"; for p in "${patches[@]}"; do sha256sum "$p"; done; \
                if [ "$variant" = hooked ] && [ -d "$here/src" ]; then find "$here/src" -type f -print0 | sort -z | xargs -0 -r sha256sum; fi; } \
              | sha256sum | cut -d' ' -f1)
stamp_file="$src/.linkcpp-stamp"
if [ ! -f "$stamp_file" ] || [ "$(cat "$stamp_file")" != "$stamp_want" ]; then
  kept="$work/.kept-$variant"
  : > "$kept"
  if [ -d "$src/.git" ] && git -C "$src" rev-parse -q --verify "$llama_commit^{commit}" >/dev/null 2>&1; then
    # Re-lay in place. Files our patches and overlay touched are restored and laid again, and those whose content comes
    # out the same get their old mtime back, so make recompiles only what really changed (an overlay edit: one file).
    log "re-laying llama.cpp $llama_commit ($variant) in $src"
    while IFS= read -r -d '' f; do
      [ -f "$src/$f" ] && printf '%s %s %s\0' "$(sha256sum < "$src/$f" | cut -d' ' -f1)" "$(stat -c %Y "$src/$f")" "$f" >> "$kept"
    done < <(git -C "$src" ls-files -z -m -o --exclude-standard)
    git -C "$src" -c advice.detachedHead=false checkout -q -f "$llama_commit"
    git -C "$src" clean -q -f -d -x
  else
    log "laying llama.cpp $llama_commit ($variant) in $src"
    rm -rf "$src"
    git -c advice.detachedHead=false clone -q "$bundle" "$src"
    git -C "$src" -c advice.detachedHead=false checkout -q "$llama_commit"
  fi
  if [ "$variant" = hooked ]; then
    [ -d "$here/src" ] && cp -r "$here/src/." "$src/"
    for p in "${patches[@]}"; do
      log "applying $(basename "$p")"
      git -C "$src" apply --whitespace=nowarn "$p"
    done
  fi
  while IFS= read -r -d '' line; do
    sum=${line%% *}; rest=${line#* }; mtime=${rest%% *}; f=${rest#* }
    if [ -f "$src/$f" ] && [ "$(sha256sum < "$src/$f" | cut -d' ' -f1)" = "$sum" ]; then touch -m -d "@$mtime" "$src/$f"; fi
  done < "$kept"
  rm -f "$kept"
  echo "$stamp_want" > "$stamp_file"
fi

# Portable x86-64 baseline (AVX2/FMA/F16C), not -march=native: the machine that builds is not always the one that runs,
# and AMX/AVX-512 paths chosen natively have died with SIGILL on virtual machines that advertise them.
cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
  -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_OPENMP=ON
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF
)
flags_file="$build/.linkcpp-cmake-flags"
if [ ! -f "$build/CMakeCache.txt" ] || [ "$(cat "$flags_file" 2>/dev/null)" != "${cmake_flags[*]}" ]; then
  log "configuring (CPU only, static, ccache at $CCACHE_DIR)"
  rm -rf "$build"
  mkdir -p "$build"
  cmake -S "$src" -B "$build" "${cmake_flags[@]}" >"$work/cmake-$variant.log" 2>&1 \
    || { tail -40 "$work/cmake-$variant.log" >&2; exit 1; }
  echo "${cmake_flags[*]}" > "$flags_file"
fi

jobs=${LINKCPP_JOBS:-$(nproc)}
targets=(llama-server llama-quantize)
[ "$variant" = hooked ] && targets+=(linkcpp-expert-ref)
log "building ${targets[*]} with $jobs jobs"
cmake --build "$build" --target "${targets[@]}" -j "$jobs" >"$work/build-$variant.log" 2>&1 \
  || { tail -60 "$work/build-$variant.log" >&2; exit 1; }
# Install only what changed (an unchanged binary keeps its file, so a server started from it meanwhile is not disturbed).
install_bin() {
  if ! cmp -s "$1" "$2"; then install -m 0755 "$1" "$2.tmp" && mv "$2.tmp" "$2"; fi
}
install_bin "$build/bin/llama-server" "$bin/linkcpp-server"
install_bin "$build/bin/llama-quantize" "$bin/linkcpp-quantize"
[ "$variant" = hooked ] && install_bin "$build/bin/linkcpp-expert-ref" "$bin/linkcpp-expert-ref"
log "done in $(( $(date +%s) - t0 )) s: $bin/linkcpp-server"
