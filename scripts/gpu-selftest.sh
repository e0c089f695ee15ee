#!/usr/bin/env bash
# Tests the GPU bundle (.cache/gpu-bundle, `npm run gpu:pack`) here, as the GPU host will run it, against SwiftShader:
# from a copy outside the checkout (no node_modules above it), with a PATH that has no node but the bundle's, and a
# clean environment — so a file missing from the bundle fails here and not on the GPU host.
#
#   1. without --allow-software the adapter check must stop the run at once (exit 3) on SwiftShader;
#   2. then every step with --allow-software --quick (ELASTIC_ARGS etc. pass through, e.g. ELASTIC_ARGS='--rounds 1').
#
#   bash scripts/gpu-selftest.sh [run.sh arguments, e.g. --steps adapter,kernels]
#
# Logs: /tmp/expertswarm-gpu-selftest/out/ (SELFTEST_DIR to move it). Slow on 2 busy cores: wrap it in flock there.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE=$ROOT/.cache/gpu-bundle
T=${SELFTEST_DIR:-/tmp/expertswarm-gpu-selftest}
ICD=/usr/lib/chromium/vk_swiftshader_icd.json
[ -f "$BUNDLE/run.sh" ] || { echo "no bundle: run npm run gpu:pack first" >&2; exit 2; }
[ -f "$ICD" ] || { echo "no SwiftShader ICD at $ICD" >&2; exit 2; }

rm -rf "$T/bundle" "$T/out" "$T/out-gate"
mkdir -p "$T/sysbin"
cp -r "$BUNDLE" "$T/bundle"
# The system's tools without node, npm or npx: the only node the run can find is the bundle's.
for dir in /usr/local/bin /usr/bin /bin; do
  for f in "$dir"/*; do
    name=$(basename "$f")
    case "$name" in node | nodejs | npm | npx | corepack | tsx) continue ;; esac
    [ -e "$T/sysbin/$name" ] || ln -s "$f" "$T/sysbin/$name"
  done
done
cd "$T"
clean_env=(env -i "HOME=$T" "PATH=$T/sysbin:/usr/sbin:/sbin" "VK_ICD_FILENAMES=$ICD" "WORK=$T/work")
for v in T_ADAPTER T_MODEL T_KERNELS T_SWEEP T_ELASTIC KERNELS_ARGS SWEEP_ARGS ELASTIC_ARGS GPU_RUN_BUDGET_S; do
  [ -n "${!v:-}" ] && clean_env+=("$v=${!v}")
done

echo "== 1. SwiftShader without --allow-software: the run must stop at the adapter check"
set +e
"${clean_env[@]}" OUT="$T/out-gate" bash bundle/run.sh --steps adapter,kernels
rc=$?
set -e
if [ "$rc" -ne 3 ] || [ -e "$T/out-gate/kernels.log" ]; then
  echo "FAIL: expected exit 3 and no kernels step, got exit $rc" >&2
  exit 1
fi
echo "ok: stopped with exit 3"

echo "== 2. --allow-software --quick $*"
"${clean_env[@]}" OUT="$T/out" bash bundle/run.sh --allow-software --quick "$@"
grep -q "node v.* at $T/work/bin/node" "$T/out/run.log" || { echo "FAIL: the run did not use the bundle's node" >&2; exit 1; }
echo "ok: logs in $T/out"
