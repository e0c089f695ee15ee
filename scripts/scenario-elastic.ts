/**
 * The elastic loop, full size (issue 13's scenario): a hub with its real coordinator (4 slots, `--dispatch auto`,
 * target base 1, boost 1), four volunteers waiting on the channel — two headless (`expertswarm volunteer`) and two
 * headless Chromium tabs on the hub's volunteer page, joined with the page's own controls — and 0 → 6 → 0 concurrent
 * streaming completions through the `openai` client. Prints the numbers, writes the timeline as JSON and SVG into
 * .cache/artifacts/scenario-elastic/ (with screenshots of the pages at the peak and at the end), and exits 1 if any check fails (bench/elastic/scenario.ts says what each is).
 * docs/elastic.md has the numbers of the last run. test/integration/scenario-elastic.test.ts is the CI-sized one.
 *
 *   npm run scenario:elastic [-- --volunteers 4 --pages 2 --peak 6 --tokens 64 --backend webgpu --network PROFILE]
 *
 * `--pages` is how many of the volunteers are Chromium tabs (0: all headless); `--backend` is the headless ones'
 * `--backend` and the tabs' "Compute with" choice; `--network` (lan, broadband, far, mobile) puts every volunteer in a
 * network lab home of that profile, behind NAT (root; docs/netlab.md).
 */
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { GGMLType } from '../gguf/quant-types.ts';
import { PROFILES, type ProfileName } from '../harness/netlab-profiles.ts';
import { type ElasticBounds, type ElasticScenario, judgeElastic, runElasticScenario, summaryLines } from '../bench/elastic/scenario.ts';

const { values } = parseArgs({
  options: {
    volunteers: { type: 'string', default: '4' },
    pages: { type: 'string', default: '2' },
    peak: { type: 'string', default: '6' },
    tokens: { type: 'string', default: '64' },
    backend: { type: 'string', default: 'webgpu' },
    network: { type: 'string' },
  },
});
const int = (v: string, name: string): number => {
  const x = Number(v);
  if (!Number.isInteger(x) || x < 1) throw new Error(`--${name} must be a positive integer, got ${v}`);
  return x;
};
const pages = Number(values.pages);
if (!Number.isInteger(pages) || pages < 0 || pages > int(values.volunteers, 'volunteers'))
  throw new Error(`--pages must be a whole number from 0 to --volunteers, got ${values.pages}`);
const network = values.network;
if (network !== undefined && !(network in PROFILES))
  throw new Error(`--network must be one of ${Object.keys(PROFILES).join(', ')}, got ${network}`);
const backend = values.backend as ElasticScenario['backend'];
if (!['webgpu', 'wasm', 'auto'].includes(backend)) throw new Error(`--backend must be webgpu, wasm or auto, got ${backend}`);

/**
 * Two MoE layers of 16 experts (n_embd 512, ff 768, Q4_K): a whole-layer slice is 10.6 MB, the "~10 MB slice on
 * loopback" of the issue. Target base 1 + boost 1 wants two copies of each layer while saturated: four volunteers,
 * of which two are surplus once the load passes. Every volunteer is recruited, so every page must serve.
 */
const POLL_MS = 1000;
const scenario: ElasticScenario = {
  name: 'full',
  model: {
    arch: 'qwen3moe',
    layers: 2,
    nEmbd: 512,
    ff: 768,
    nExpert: 16,
    nExpertUsed: 2,
    type: GGMLType.Q4_K,
    seed: 41,
    expertScale: 2,
  },
  volunteers: int(values.volunteers, 'volunteers'),
  pages,
  backend,
  slots: 4,
  ctxPerSlot: 1024,
  // Busy 3 of 4 slots: with 6 streams two wait in the coordinator's queue and refill a slot the moment a request
  // ends; a threshold one below full keeps two requests that end in the same decode step from reading as calm.
  saturateAt: 3,
  targetBase: 1,
  boost: 1,
  pollMs: POLL_MS,
  maxReadingAgeMs: 30_000,
  dispatchIdleMs: 20_000,
  graceMs: 15_000,
  load: { peak: int(values.peak, 'peak'), stepMs: 1500, maxTokens: int(values.tokens, 'tokens'), prompts: 6 },
  minHoldMs: 5_000,
  maxHoldMs: 60_000,
  waitMs: 120_000,
  artifacts: fileURLToPath(new URL('../.cache/artifacts/scenario-elastic/', import.meta.url)),
  log: (line) => console.log(`# ${line}`),
  ...(network !== undefined ? { network: network as ProfileName } : {}),
};

/**
 * Saturation: one poll, plus 250 ms for the /slots round trip and the reading's processing. Recruitment: ≤ 5 s, the
 * issue's goal. Back at base: one poll + the reading TTL. Releases: within the channel's idle timeout (10 s here).
 */
const bounds: ElasticBounds = {
  detectionMs: POLL_MS + 250,
  recruitmentLatencyMs: 5_000,
  baseAgainMs: POLL_MS + scenario.maxReadingAgeMs,
  releaseMs: 10_000,
  noFlaps: true,
};

const t0 = Date.now();
const result = await runElasticScenario(scenario);
const checks = judgeElastic(result, bounds);
for (const line of summaryLines(result, checks)) console.log(line);
console.log(`# ${((Date.now() - t0) / 1000).toFixed(0)} s in all`);
process.exit(checks.every((c) => c.ok) ? 0 : 1);
