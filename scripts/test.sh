#!/usr/bin/env bash
# The project's one test command (README: `npm test`; .ci/run calls it too).
# 1. typecheck, 2. build the coordinator if needed (ccache makes a rebuild cheap), 3. node's test runner over test/**.test.ts.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== typecheck"
npx tsc -p tsconfig.json --noEmit
echo "== coordinator build"
bash coordinator/build.sh
echo "== tests"
mapfile -t files < <(find test -name '*.test.ts' | sort)
# Integration tests start real servers; one file at a time keeps 2-core machines from timing out.
node --import tsx --test --test-concurrency=1 --test-reporter=spec "${files[@]}"
