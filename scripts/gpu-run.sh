#!/usr/bin/env bash
# The GPU bundle's runner (copied to .cache/gpu-bundle/run.sh by `npm run gpu:pack`, scripts/gpu-pack.ts). Plain bash,
# for a bare GPU host with no Node, npm or network (../shared/reference/gpu-host.md): unpacks node and app/ into a work
# folder, installs the Vulkan loader and GL dispatch libraries only where the host lacks them, points Dawn at the NVIDIA
# driver, then runs, each step with its own timeout and log in $OUT, the cheap checks first:
#
#   adapter   which adapter Dawn finds; STOP at once on SwiftShader/llvmpipe unless --allow-software
#   model     bench:elastic's model (realistic qwen3moe Q4_K, or --quick's small one)
#   kernels   bench:kernels:node (Q4_K: decode 1/4, batched 64/512; ORT wasm beside)
#   sweep     bench:kernels:sweep (its markdown table in the log, its JSON as sweep.json)
#   elastic   bench:elastic with GPU volunteers (--backend webgpu --pin none --threads 8)
#
#   bash run.sh [--allow-software] [--quick] [--steps adapter,model,kernels,sweep,elastic] [--work DIR]
#
# $OUT (default ./gpu-out) gets at most 8 files: run.log (environment, each step's exit status and headline lines),
# adapter.log, model.log, kernels.log, sweep.log, sweep.json, elastic.log. The whole run is held under
# GPU_RUN_BUDGET_S (default 540 s): a step's timeout is its own or what is left, whichever is less. Each step's
# timeout and extra arguments can be set: T_KERNELS=200 KERNELS_ARGS='--types Q4_K,Q8_0' SWEEP_ARGS='--iterations 5'
# ELASTIC_ARGS='--rounds 3' (T_ADAPTER, T_MODEL, T_SWEEP, T_ELASTIC likewise).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ALLOW_SOFTWARE=0
QUICK=0
STEPS=adapter,model,kernels,sweep,elastic
WORK=${WORK:-/tmp/expertswarm-gpu}
while [ $# -gt 0 ]; do
  case "$1" in
    --allow-software) ALLOW_SOFTWARE=1 ;;
    --quick) QUICK=1 ;;
    --steps) STEPS=$2; shift ;;
    --work) WORK=$2; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
RUNLOG=$OUT/run.log
START=$(date +%s)
BUDGET=${GPU_RUN_BUDGET_S:-540}

say() { echo "[$(date -u +%H:%M:%S) +$(($(date +%s) - START))s] $*" | tee -a "$RUNLOG"; }

# xz may be missing from a minimal image; Python's lzma module is in every Python image.
unxz_stream() {
  if command -v xz >/dev/null 2>&1; then xz -dc; else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)'; fi
}

: >"$RUNLOG"
say "expertswarm GPU run: bundle $HERE, work $WORK, out $OUT, steps $STEPS, quick $QUICK, allow-software $ALLOW_SOFTWARE, budget ${BUDGET}s"
[ -f "$HERE/MANIFEST.txt" ] && sed 's/^/  manifest: /' "$HERE/MANIFEST.txt" >>"$RUNLOG"

# --- unpack (a folder left by an earlier run of the same bundle is reused)

STAMP=$(cat "$HERE/MANIFEST.txt" 2>/dev/null | head -1)
if [ ! -x "$WORK/bin/node" ] || [ "$(cat "$WORK/.stamp" 2>/dev/null)" != "$STAMP" ]; then
  rm -rf "$WORK/bin" "$WORK/app"
  mkdir -p "$WORK/bin"
  unxz_stream <"$HERE/node.xz" >"$WORK/bin/node" && chmod +x "$WORK/bin/node" || { say "FAILED: unpacking node"; exit 1; }
  unxz_stream <"$HERE/app.tar.xz" | tar -x -C "$WORK" || { say "FAILED: unpacking app"; exit 1; }
  echo "$STAMP" >"$WORK/.stamp"
  say "unpacked node and app/ ($(du -sh "$WORK" | cut -f1))"
fi
APP=$WORK/app
# Only the bundled node on PATH first: nothing of a node elsewhere on the host is used.
export PATH=$WORK/bin:$PATH
say "node $(node -v) at $(command -v node)"

# --- the Vulkan loader and GL dispatch libraries, each only where the host lacks it

declare -A SONAME=([libvulkan1]=libvulkan.so.1 [libglvnd0]=libGLdispatch.so.0 [libegl1]=libEGL.so.1 [libopengl0]=libOpenGL.so.0
  [libgl1]=libGL.so.1 [libglx0]=libGLX.so.0 [libgles2]=libGLESv2.so.2)
# The cache read once: `ldconfig -p | grep -q` under pipefail can fail on the SIGPIPE grep leaves behind.
LDCACHE=$(ldconfig -p)
installed=""
for deb in "$HERE"/debs/*.deb; do
  [ -e "$deb" ] || break
  pkg=$(basename "$deb" | cut -d_ -f1)
  so=${SONAME[$pkg]:-}
  if [ -n "$so" ] && grep -q "$so " <<<"$LDCACHE"; then continue; fi
  if dpkg -x "$deb" / 2>>"$RUNLOG"; then installed="$installed $pkg"; else say "dpkg -x $deb failed"; fi
done
if [ -n "$installed" ]; then
  ldconfig
  LDCACHE=$(ldconfig -p)
  say "installed from the bundle's .debs:$installed"
fi
grep -E 'libvulkan\.so\.1 |libGLX\.so\.0 |libEGL\.so\.1 ' <<<"$LDCACHE" | sed 's/^/  /' >>"$RUNLOG"
grep -q 'libvulkan.so.1 ' <<<"$LDCACHE" || say "WARNING: no libvulkan.so.1 after install: Dawn will find no adapter"

# --- the driver: VK_DRIVER_FILES to the NVIDIA ICD, unless the caller named one

if [ -z "${VK_DRIVER_FILES:-}" ] && [ -z "${VK_ICD_FILENAMES:-}" ]; then
  for f in /usr/local/nvidia/share/vulkan/icd.d/*.json /usr/share/vulkan/icd.d/nvidia*.json /etc/vulkan/icd.d/nvidia*.json; do
    if [ -f "$f" ]; then export VK_DRIVER_FILES=$f; break; fi
  done
  for f in /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json /usr/share/glvnd/egl_vendor.d/10_nvidia.json; do
    if [ -f "$f" ]; then export __EGL_VENDOR_LIBRARY_FILENAMES=$f; break; fi
  done
fi
say "VK_DRIVER_FILES=${VK_DRIVER_FILES:-} VK_ICD_FILENAMES=${VK_ICD_FILENAMES:-}"
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
  say "WARNING: no Vulkan driver file found (looked in /usr/local/nvidia/share/vulkan/icd.d, /usr/share/vulkan/icd.d, /etc/vulkan/icd.d)"
fi

# --- the coordinator's libgomp, only where the host has none

missing_libs() { ldd "$APP/coordinator/bin/linkcpp-server" 2>&1 | grep 'not found' | tr -s ' \t' ' '; }
if [ -n "$(missing_libs)" ]; then
  export LD_LIBRARY_PATH=$APP/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  say "the host lacks a library of the coordinator ($(missing_libs | head -c 200)): LD_LIBRARY_PATH=$APP/lib"
  [ -n "$(missing_libs)" ] && say "WARNING: still missing: $(missing_libs)"
fi

# --- the machine, for the record

{
  echo "== machine"
  uname -a
  grep -m1 'model name' /proc/cpuinfo
  echo "cores: $(nproc), memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 2^20}' /proc/meminfo), load: $(cut -d' ' -f1-3 /proc/loadavg)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
} >>"$RUNLOG" 2>&1

# --- the steps

want() { [[ ",$STEPS," == *",$1,"* ]]; }

# step NAME DEFAULT_TIMEOUT_S LOGFILE COMMAND…: runs in app/ (the bundles resolve .cache/ and coordinator/ from there)
# under min(its timeout, what is left of the budget); its exit status and headline lines go to run.log.
step() {
  local name=$1 limit=$2 logfile=$3
  shift 3
  local left=$((BUDGET - ($(date +%s) - START)))
  if [ "$left" -lt 10 ]; then
    say "$name: SKIPPED (the ${BUDGET}s budget is spent)"
    return 99
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "$name: $* (timeout ${limit}s, log $(basename "$logfile"))"
  local t0 rc
  t0=$(date +%s)
  (cd "$APP" && timeout -k 10 "$limit" "$@") >"$logfile" 2>&1
  rc=$?
  local verdict="exit $rc"
  [ "$rc" -eq 124 ] && verdict="TIMED OUT after ${limit}s"
  say "$name: $verdict in $(($(date +%s) - t0))s"
  return "$rc"
}

# headline FILE PATTERN: the log lines that say what a step found, into run.log.
headline() { grep -E "$2" "$1" 2>/dev/null | head -n "${3:-40}" | sed 's/^/  | /' | tee -a "$RUNLOG"; }

QUICK_ARG=()
[ "$QUICK" = 1 ] && QUICK_ARG=(--quick)
status=0

if want adapter; then
  args=()
  [ "$ALLOW_SOFTWARE" = 1 ] && args=(--allow-software)
  step adapter "${T_ADAPTER:-60}" "$OUT/adapter.log" node dist/gpu-adapter.js ${args[@]+"${args[@]}"}
  rc=$?
  headline "$OUT/adapter.log" '^(adapter|features|STOP|software|wasm kernel)'
  if [ "$rc" -ne 0 ]; then
    say "STOP: the adapter check failed (exit $rc): nothing else is run"
    exit "$rc"
  fi
fi

if want model; then
  # No --allow-software gate here: the model is plain CPU work.
  step model "${T_MODEL:-180}" "$OUT/model.log" node dist/gpu-make-model.js ${QUICK_ARG[@]+"${QUICK_ARG[@]}"} || status=1
  headline "$OUT/model.log" '^model'
fi

if want kernels; then
  # shellcheck disable=SC2086 # KERNELS_ARGS is a list of flags
  step kernels "${T_KERNELS:-150}" "$OUT/kernels.log" node dist/node-gpu.js ${QUICK_ARG[@]+"${QUICK_ARG[@]}"} ${KERNELS_ARGS:---types Q4_K} || status=1
  headline "$OUT/kernels.log" '^(adapter|timestamp-query)|\((decode|batched), auto\)|fair ORT' 40
fi

if want sweep; then
  # The sweep's roofline defaults to an H200 (4800 GB/s HBM3e); an H100 SXM has 3350 GB/s (the same 67 FP32 TFLOP/s).
  roofline=""
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$gpu_name" in *H100*) roofline="--bandwidth-gbs 3350 --peak-tflops 67" ;; esac
  # shellcheck disable=SC2086
  step sweep "${T_SWEEP:-180}" "$OUT/sweep.log" node dist/sweep-kernels.js ${QUICK_ARG[@]+"${QUICK_ARG[@]}"} --out "$WORK/sweep" $roofline ${SWEEP_ARGS:-} || status=1
  json=$(ls -t "$WORK"/sweep/*.json 2>/dev/null | head -1)
  [ -n "$json" ] && cp "$json" "$OUT/sweep.json"
  headline "$OUT/sweep.log" '^(adapter|best|threshold|suggest)|[Bb]est|[Tt]hreshold' 40
fi

if want elastic; then
  # gain.ts wants a volunteer per MoE layer (2): both compute on the one GPU. The coordinator gets 8 of the 16 cores.
  # shellcheck disable=SC2086
  step elastic "${T_ELASTIC:-300}" "$OUT/elastic.log" node dist/gain.js ${QUICK_ARG[@]+"${QUICK_ARG[@]}"} --backend webgpu --pin none --threads 8 ${ELASTIC_ARGS:-} || status=1
  headline "$OUT/elastic.log" 'RATIO|round [0-9]+/[0-9]+ [AB]:|every MoE layer served|pairs: |serving |failed requests|^machine' 40
fi

say "done: exit $status (logs in $OUT: $(cd "$OUT" && ls | tr '\n' ' '))"
exit "$status"
