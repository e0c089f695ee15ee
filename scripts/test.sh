#!/usr/bin/env bash
# The project's one test command (README: `npm test`; .ci/run calls it too).
# 1. typecheck (the Node tree with tsc, the pages in web/ with svelte-check), 2. format + lint (biome), 3. build the
# coordinator if needed (ccache makes a rebuild cheap) and the wasm kernel, 4. node's test runner over
# test/**.test.ts (the page tests build web/ themselves, into temporary folders). `npm run test:unit` is the fast
# loop: test/unit/ only, no build.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== system packages"
bash scripts/ensure-packages.sh
echo "== typecheck"
npx tsc -p tsconfig.json --noEmit
npx svelte-check --tsconfig web/tsconfig.json --fail-on-warnings --output machine
echo "== format and lint (biome ci; npm run format fixes what it can)"
npm run --silent lint
echo "== coordinator build"
bash coordinator/build.sh
echo "== wasm fallback kernel, both builds (AssemblyScript; cached in .cache/wasm by the digest of its sources)"
# Both here, one after the other: the relaxed-simd build takes ~25 s, and left to the tests two files that need it at
# once would each compile it.
node --import tsx -e 'Promise.all([import("./shaders/wasm/build.ts"), import("./shaders/wasm/features.ts")]).then(async ([m, f]) => { for (const v of f.KERNEL_VARIANTS) console.log(`kernel ${v}: ${(await m.expertKernelBytes(v)).length} bytes`); })'
echo "== tests"
# Unit tests (no servers, no browsers, no GPU) two files at a time, as `npm run test:unit` runs them: ~55 s less on
# 2 cores. The rest start real servers, Chromium and SwiftShader; one file at a time keeps 2-core machines from timing
# out. Both run whatever the other gave; the command fails if either did.
mapfile -t units < <(find test/unit -name '*.test.ts' | sort)
mapfile -t rest < <(find test -name '*.test.ts' -not -path 'test/unit/*' | sort)
status=0
node --import tsx --test --test-concurrency=2 --test-reporter=spec "${units[@]}" || status=$?
node --import tsx --test --test-concurrency=1 --test-reporter=spec "${rest[@]}" || status=$?
exit "$status"
