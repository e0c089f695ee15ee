/**
 * The elastic loop end to end (issue 13's scenario harness): a hub with its real coordinator (linkcpp-server, 4 slots,
 * `--dispatch auto`), N volunteers waiting on the channel — headless ones (`expertswarm volunteer`) and headless
 * Chromium tabs on the hub's own volunteer page `/`, joined with the page's controls as a visitor does — and a load of
 * streaming greedy completions (the `openai` client) ramped 0 → peak → 0. It records the hub's dashboard stream and dispatch map
 * (timeline.ts), draws the timeline (svg.ts), and measures the story:
 *
 *   saturate  the poller sees the slots full (detection: onset event − the moment saturateAt streams generated);
 *   recruit   the effective target goes base → base + boost and the waiting volunteers are offered slices;
 *   serve     recruitment latency: onset → the first recruited volunteer's first served pair; every recruited
 *             worker serves while saturated, and keeps being dispatched past the dispatch idle timeout;
 *   drain     the load ends: the saturation ends, the target returns to base;
 *   release   the workers beyond the base target are released (release events), go back to waiting, and the
 *             market's demand is met with nothing left over;
 *   exact     every request's token ids equal those of a `--dispatch off` hub on the same prompts.
 *
 * `runElasticScenario` measures; `judgeElastic` (pure) turns the numbers into named checks against bounds, so the
 * full run (`npm run scenario:elastic`) and the CI-sized test assert the same story with their own bounds.
 * Nothing here assumes the order of things that happen concurrently (a recruit may precede the boosted tick, a
 * release may precede the tick that shows base): each wait returns as soon as what it waits for is there.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { Browser } from 'playwright-core';
import { DEFAULT_SATURATION } from '../../hub/market/saturation.ts';
import type { VolunteerTab } from '../../harness/browser.ts';
import { testModel } from '../../harness/models.ts';
import { type HeadlessVolunteer, moeLayersOf, spawnVolunteer, startSwarmHub } from '../../harness/swarm.ts';
import { launchChromiumIn } from '../../harness/netlab-browser.ts';
import type { ProfileName } from '../../harness/netlab-profiles.ts';
import { type LabNetwork, labNetwork } from '../netlab-network.ts';
import type { ModelConfig } from '../../tools/model-arch.ts';
import { completeWithRetry, RampLoad, type RequestRecord } from './load.ts';
import { timelineSvg } from './svg.ts';
import { type Timeline, TimelineRecorder } from './timeline.ts';

export interface ElasticScenario {
  /** Names the artifacts: `<artifacts>/<name>.json`, `<name>.svg`. */
  name: string;
  model: Partial<ModelConfig> & Pick<ModelConfig, 'arch' | 'layers' | 'nExpert' | 'nExpertUsed'>;
  /** Every volunteer, headless processes and Chromium pages together. */
  volunteers: number;
  /**
   * How many of the volunteers are headless Chromium tabs (one browser, a fresh context each: its own key, worker id
   * and slice cache) on the hub's volunteer page `/`, a production build of web/ made for the run, joined with the
   * page's own controls ("Compute with" `backend`, then Join); the rest are `expertswarm volunteer` processes. 0 unless
   * told.
   */
  pages?: number;
  /**
   * The volunteers' backend: `webgpu` (Dawn, or Chromium's WebGPU; bit-exact with ggml for Q4_K), `wasm` or `auto`
   * (`--backend` for the headless ones, the page's "Compute with" choice for the tabs).
   */
  backend: 'webgpu' | 'wasm' | 'auto';
  slots: number;
  ctxPerSlot: number;
  saturateAt: number;
  targetBase: number;
  boost: number;
  /** The hub's /slots poll interval (`--poll-ms`). */
  pollMs: number;
  /** Readings older than this stop recruitment (`--max-reading-age-ms`, "the reading TTL"). */
  maxReadingAgeMs: number;
  /** The dispatch map's idle timeout: at rest a worker idle this long is no longer dispatched (DispatchConfig.idleMs). */
  dispatchIdleMs: number;
  /** A worker that never served is dispatched only this long after it is listed (DispatchConfig.graceMs). */
  graceMs: number;
  /** Concurrent streams at the top, one more (then one fewer) every stepMs; tokens per request; distinct prompts. */
  load: { peak: number; stepMs: number; maxTokens: number; prompts: number };
  /**
   * The load stays at its peak at least minHoldMs, then until every recruited worker was seen serving dispatchIdleMs
   * after its first serve (dispatched past the idle timeout while saturated), at most maxHoldMs.
   */
  minHoldMs: number;
  maxHoldMs: number;
  /** The bound of every wait (each returns as soon as what it waits for happened). */
  waitMs: number;
  artifacts: string;
  log: (line: string) => void;
  /**
   * A network lab profile (issue 29, docs/netlab.md): every volunteer, headless and tab, in one lab home behind NAT and
   * the link emulator, reaching the hub here through bench/netlab-network.ts's bridge. Absent: loopback. Root only.
   */
  network?: ProfileName;
}

/** What the run measured; times are ms on the hub's clock (Date.now: the hub runs in this process). */
export interface ElasticNumbers {
  /** The volunteers by worker id, as the hub's events and dispatch map name them: `v<i>` headless, `page-…` tabs. */
  volunteerIds: { headless: string[]; pages: string[] };
  /** How many volunteers the boosted target wants (each holds a whole layer), at most the volunteers. */
  wanted: number;
  loadStartMs: number;
  /** When saturateAt streams first generated at once (on a fast machine a passing moment: short requests flicker). */
  streamsAtOnceMs: number | null;
  /**
   * When the load first had more requests in flight than the coordinator has slots: one waits in its queue and takes a
   * slot the moment another request ends, so every slot is busy from here on — the load's view of "saturated".
   */
  slotsFullByLoadMs: number | null;
  onsetMs: number | null;
  /** onset − slotsFullByLoad; negative when the hub saw saturation before the queue formed. */
  detectionMs: number | null;
  /** The first tick with effective target base + boost, and what it showed. */
  boostedTick: { t: number; effectiveTarget: number; baseTarget: number } | null;
  recruited: string[];
  /** Each recruited worker's first served pair (≤ true first serve + the map poll interval). */
  firstServeMs: Record<string, number | null>;
  /** onset → the first recruited worker's first served pair. */
  recruitmentLatencyMs: number | null;
  /** Per recruited worker: a serve seen ≥ dispatchIdleMs after its first, before the saturation ended. */
  servedPastIdle: Record<string, boolean>;
  /** Served pairs per second at the saturated ticks, summed (all workers). */
  servedPairsWhileSaturated: number;
  /** When, ramping down, fewer than saturateAt requests were in flight. */
  calmByLoadMs: number | null;
  endMs: number | null;
  /**
   * Saturation ends the hub logged while the load was still at its peak-and-hold (between the first onset and the
   * ramp-down): each one releases the surplus and recruits it again a poll later. The full run asserts none.
   */
  flaps: Array<{ atMs: number; busyAtTick: number | null }>;
  /** end − calmByLoad. */
  endDetectionMs: number | null;
  /** The first tick at base target after the end, − calmByLoad. */
  baseAgainMs: number | null;
  releases: Array<{ worker: string; atMs: number }>;
  /** Last release − saturation end. */
  releaseMs: number | null;
  /** After the releases: replicas of every (MoE layer, expert) (min, max). */
  replicasAfter: { min: number; max: number } | null;
  /** After the releases: whether /api/expert-demand still wants any expert. */
  demandLeft: boolean | null;
  /** Volunteers waiting on the channel again after the releases (from a tick). */
  waitingAfter: number | null;
  requests: number;
  /** 503 answers retried (the hub's keep-alive race with the coordinator: see load.ts completeWithRetry). */
  retried503: number;
  requestErrors: string[];
  /** Requests whose token ids differ from the local-only run of the same prompt: `#k prompt p at token i`. */
  mismatches: string[];
  /** Whether the local-only run generated anything varied (a collapsed baseline would make "identical" vacuous). */
  baselineDistinct: number;
  /** What failed along the way (a wait that timed out); the checks then fail with it. */
  failures: string[];
  /**
   * Each Chromium tab: its headline (`#state-title`) at rest, at the end of the peak and after the releases, and its
   * uncaught script errors; screenshots of the last two in the artifacts folder.
   */
  pageReports: PageReport[];
}

export interface PageReport {
  workerId: string;
  atRest: string | null;
  atPeak: string | null;
  atEnd: string | null;
  errors: string[];
  screenshots: string[];
}

export interface ElasticResult {
  scenario: Omit<ElasticScenario, 'log'>;
  numbers: ElasticNumbers;
  timeline: Timeline;
  requests: RequestRecord[];
  baseline: number[][];
  jsonPath: string;
  svgPath: string;
}

/**
 * Both hubs' coordinators keep every weight in ggml's standard layout. With the repacked layouts a stock server uses
 * for the weights around the experts, a row's result depends on how many rows share its batch (the repacked gemm and
 * gemv add in different orders), so under concurrent load a request's tokens move at near-ties with no swarm at all
 * (bench:elastic's control: the coordinator alone against its own one-at-a-time answers, 46 of 60 identical). With
 * them standard, the one-at-a-time baseline is each request's answer under any load, and a token that moves is the
 * swarm's doing.
 */
const BATCH_INVARIANT = ['--no-repack'];

/** A scenario's prompts: fixed, distinct, a few words each. */
export function scenarioPrompts(n: number): string[] {
  const topics = ['The swarm serves', 'Experts in a browser tab', 'A saturated coordinator', 'Volunteers wait', 'The load passes'];
  return Array.from({ length: n }, (_, i) => `${topics[i % topics.length]} (request ${i}):`);
}

const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Each prompt's token ids from a `--dispatch off` hub, one request at a time, through the same client code. */
async function localOnly(modelPath: string, sc: ElasticScenario, prompts: string[], ban: number[]): Promise<number[][]> {
  const hub = await startSwarmHub(modelPath, 'off', { slots: sc.slots, ctxPerSlot: sc.ctxPerSlot, coordinatorArgs: BATCH_INVARIANT });
  try {
    const client = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600_000 });
    const out: number[][] = [];
    for (let p = 0; p < prompts.length; p++) {
      const r = await completeWithRetry(client, hub.model, { maxTokens: sc.load.maxTokens, prompts, ban }, p, 0);
      if (r.error !== null) throw new Error(`local-only run, prompt ${p}: ${r.error}`);
      out.push(r.ids);
    }
    return out;
  } finally {
    await hub.close();
  }
}

export async function runElasticScenario(sc: ElasticScenario): Promise<ElasticResult> {
  const { log } = sc;
  if (sc.load.peak <= sc.slots)
    throw new RangeError(`the load's peak (${sc.load.peak}) must exceed the slots (${sc.slots}): see slotsFullByLoadMs`);
  const nPages = sc.pages ?? 0;
  if (!Number.isInteger(nPages) || nPages < 0 || nPages > sc.volunteers)
    throw new RangeError(`pages (${nPages}) must be a whole number of the ${sc.volunteers} volunteers`);
  const nHeadless = sc.volunteers - nPages;
  const m = await testModel(sc.model);
  const moeLayers = moeLayersOf(m.config);
  const prompts = scenarioPrompts(sc.load.prompts);
  const t0 = Date.now();
  // The pages are built (vite, production) while the local-only run generates: neither is measured.
  const pagesBuild = nPages > 0 ? import('../../harness/pages-build.ts').then((b) => b.buildPages('production')) : null;
  pagesBuild?.catch(() => {});
  let baseline: number[][];
  let pagesDir: string | null = null;
  try {
    baseline = await localOnly(m.path, sc, prompts, m.ban);
    log(`local-only run: ${prompts.length} prompts × ${sc.load.maxTokens} tokens in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    if (pagesBuild) {
      pagesDir = await pagesBuild;
      log(`volunteer page built (production) ${((Date.now() - t0) / 1000).toFixed(1)} s after the start`);
    }
  } catch (e) {
    void pagesBuild?.then((d) => rmSync(d, { recursive: true, force: true })).catch(() => {});
    throw e;
  }

  const swarm = await startSwarmHub(
    m.path,
    'auto',
    {
      slots: sc.slots,
      ctxPerSlot: sc.ctxPerSlot,
      coordinatorArgs: BATCH_INVARIANT,
      saturation: {
        ...DEFAULT_SATURATION,
        saturateAt: sc.saturateAt,
        targetBase: sc.targetBase,
        boost: sc.boost,
        maxReadingAgeMs: sc.maxReadingAgeMs,
      },
      poller: { intervalMs: sc.pollMs, timeoutMs: Math.min(1500, sc.pollMs) },
      dispatch: { graceMs: sc.graceMs, idleMs: sc.dispatchIdleMs },
    },
    'm',
    pagesDir ? { dir: pagesDir } : {},
  ).catch((e: unknown) => {
    if (pagesDir) rmSync(pagesDir, { recursive: true, force: true });
    throw e;
  });
  const n: ElasticNumbers = {
    volunteerIds: { headless: Array.from({ length: nHeadless }, (_, i) => `v${i}`), pages: [] },
    wanted: Math.min(sc.volunteers, moeLayers.length * (sc.targetBase + sc.boost)),
    loadStartMs: 0,
    streamsAtOnceMs: null,
    slotsFullByLoadMs: null,
    onsetMs: null,
    detectionMs: null,
    boostedTick: null,
    recruited: [],
    firstServeMs: {},
    recruitmentLatencyMs: null,
    servedPastIdle: {},
    servedPairsWhileSaturated: 0,
    calmByLoadMs: null,
    endMs: null,
    flaps: [],
    endDetectionMs: null,
    baseAgainMs: null,
    releases: [],
    releaseMs: null,
    replicasAfter: null,
    demandLeft: null,
    waitingAfter: null,
    requests: 0,
    retried503: 0,
    requestErrors: [],
    mismatches: [],
    baselineDistinct: new Set(baseline.flat()).size,
    failures: [],
    pageReports: [],
  };
  const vols: HeadlessVolunteer[] = [];
  const tabs: VolunteerTab[] = [];
  let browser: Browser | null = null;
  /**
   * Each tab's headline into its report (`at`), once it is `until` (up to 5 s: the page renders the state the hub
   * already counts), and a screenshot named `<name>-page<i>-<shot>.png` if told.
   */
  const readPages = async (at: 'atRest' | 'atPeak' | 'atEnd', shot?: string, until?: string): Promise<void> => {
    for (const [i, t] of tabs.entries()) {
      const report = n.pageReports[i] as PageReport;
      if (until !== undefined)
        await t.page
          .waitForFunction((want) => document.querySelector('#state-title')?.textContent?.trim() === want, until, {
            timeout: 5_000,
            polling: 100,
          })
          .catch(() => {});
      report[at] = await t.title().catch(() => null);
      if (shot === undefined) continue;
      const file = `${sc.name}-page${i}-${shot}.png`;
      await t.page
        .screenshot({ path: join(sc.artifacts, file), fullPage: true })
        .then(() => report.screenshots.push(file))
        .catch(() => {});
    }
  };
  const volunteersSaid = (): string =>
    [
      ...vols.map((v) => v.output().slice(-500)),
      ...n.pageReports.map((p, i) => `page${i} ${p.workerId}: "${p.atRest ?? '?'}" ${p.errors.join(' | ')}`),
    ].join(' | ');
  let rampDownMs = Number.POSITIVE_INFINITY;
  let lab: LabNetwork | null = null;
  let load: RampLoad | null = null;
  let rec: TimelineRecorder | null = null;
  let timeline: Timeline | null = null;
  try {
    load = new RampLoad(swarm.url, swarm.model, { ...sc.load, prompts, ban: m.ban });
    const l = load;
    rec = await TimelineRecorder.start(swarm.url, swarm.model, () => ({
      lanes: l.lanesOn,
      inFlight: l.requestsInFlight,
      streaming: l.streaming,
    }));
    const r = rec;
    if (sc.network) {
      lab = await labNetwork(sc.network, Number(new URL(swarm.url).port));
      sc.log(`network: the volunteers in a lab home at the ${sc.network} profile, reaching the hub as ${lab.hubUrl}`);
    }
    const hubUrl = lab?.hubUrl ?? swarm.url;
    for (const id of n.volunteerIds.headless) {
      const args = ['--backend', sc.backend, '--quiet'];
      vols.push(lab ? lab.spawnVolunteer(['--worker-id', id, ...args]) : spawnVolunteer(swarm.url, id, args));
    }
    if (nPages > 0) {
      // One browser, a context per tab; tabs joined one after another (a busy 2-core machine starts them faster in
      // turn than all at once), while the headless ones start beside them.
      const { launchChromium, joinVolunteerPage } = await import('../../harness/browser.ts');
      mkdirSync(sc.artifacts, { recursive: true });
      browser = lab ? await launchChromiumIn(lab.lab.nsOf('home'), [lab.hubUrl]) : await launchChromium();
      for (let i = 0; i < nPages; i++) {
        const tab = await joinVolunteerPage(browser, hubUrl, sc.backend);
        tabs.push(tab);
        n.volunteerIds.pages.push(tab.workerId);
        n.pageReports.push({ workerId: tab.workerId, atRest: null, atPeak: null, atEnd: null, errors: tab.errors, screenshots: [] });
      }
    }
    // At rest nobody is wanted (dispatch auto, not saturated): every volunteer waits on the channel.
    await r
      .waitTick(`${sc.volunteers} volunteers waiting`, sc.waitMs, 0, (t) => (t.volunteers.waiting ?? 0) === sc.volunteers)
      .catch(async (e: Error) => {
        await readPages('atRest');
        throw new Error(`${e.message}; the volunteers said: ${volunteersSaid()}`);
      });
    await readPages('atRest', undefined, 'Waiting for demand');
    log(`${nHeadless} headless + ${nPages} page volunteers waiting; ramping 0 → ${sc.load.peak} streams`);

    n.loadStartMs = Date.now();
    l.rampUp();
    await step(n, 'the load fills the slots', async () => {
      n.streamsAtOnceMs = await l.waitStreaming(sc.saturateAt, sc.waitMs);
      n.slotsFullByLoadMs = await l.waitInFlight(sc.slots + 1, sc.waitMs);
    });
    await step(n, 'saturation-onset', async () => {
      n.onsetMs = (await r.waitEvent('saturation-onset', sc.waitMs, n.loadStartMs)).atMs;
      if (n.slotsFullByLoadMs !== null) n.detectionMs = n.onsetMs - n.slotsFullByLoadMs;
    });
    await step(n, 'the boosted target', async () => {
      const t = await r.waitTick('a tick at base + boost', sc.waitMs, n.loadStartMs, (x) => x.effectiveTarget === sc.targetBase + sc.boost);
      n.boostedTick = { t: t.t, effectiveTarget: t.effectiveTarget, baseTarget: t.baseTarget };
    });
    // Recruited: as many as the boosted target has room for (each holds a whole layer), at most the volunteers.
    const wanted = n.wanted;
    const recruitedNow = (): string[] => [
      ...new Set(
        r.events
          .filter((e) => e.kind === 'recruit' && e.model === swarm.model && e.atMs >= n.loadStartMs)
          .map((e) => / to (\S+)$/.exec(e.detail)?.[1])
          .filter((w): w is string => w !== undefined),
      ),
    ];
    await step(n, `${wanted} recruited volunteers serving`, async () => {
      await r.waitFor(`${wanted} recruited volunteers serving`, sc.waitMs, () => {
        const ids = recruitedNow();
        return ids.length >= wanted && ids.every((w) => r.workers.get(w)?.firstServeMs != null) ? ids : undefined;
      });
    });
    // Hold the peak: until each recruited worker served again dispatchIdleMs after its first serve, or maxHoldMs.
    const peakAt = Date.now();
    const pastIdle = (w: string): boolean => {
      const tr = r.workers.get(w);
      return tr?.firstServeMs != null && tr.serves.some((s) => s >= (tr.firstServeMs as number) + sc.dispatchIdleMs);
    };
    while (n.failures.length === 0 && Date.now() - peakAt < sc.maxHoldMs) {
      if (Date.now() - peakAt >= sc.minHoldMs && recruitedNow().every(pastIdle)) break;
      await wait(200);
    }
    await readPages('atPeak', 'peak');
    log(`holding the peak ${((Date.now() - peakAt) / 1000).toFixed(1)} s; ramping down`);
    rampDownMs = Date.now();
    await l.rampDown();
    n.calmByLoadMs = l.inFlightBelow.get(sc.saturateAt) ?? null;
    const calm = n.calmByLoadMs ?? Date.now();
    await step(n, 'saturation-end', async () => {
      const onsets = r.events.filter((e) => e.kind === 'saturation-onset' && e.model === swarm.model);
      const lastOnset = onsets.at(-1)?.seq ?? 0;
      n.endMs = (await r.waitEvent('saturation-end', sc.waitMs, 0, (e) => e.seq > lastOnset)).atMs;
      n.endDetectionMs = n.endMs - calm;
    });
    await step(n, 'the target back at base', async () => {
      const t = await r.waitTick('a tick at base target', sc.waitMs, calm, (x) => !x.recruiting && x.effectiveTarget === sc.targetBase);
      n.baseAgainMs = t.t - calm;
    });
    const surplus = Math.max(0, wanted - moeLayers.length * sc.targetBase);
    await step(n, `${surplus} releases and every expert at base`, async () => {
      const after = n.endMs ?? calm;
      await r.waitFor(`${surplus} releases`, sc.waitMs, () =>
        r.events.filter((e) => e.kind === 'release' && e.model === swarm.model && e.atMs >= after).length >= surplus ? true : undefined,
      );
      const replicas = await waitReplicas(swarm.url, swarm.model, moeLayers, m.config.nExpert, sc.targetBase, sc.waitMs);
      n.replicasAfter = replicas;
      const idle = sc.volunteers - Math.min(sc.volunteers, moeLayers.length * sc.targetBase);
      const t = await r.waitTick(`${idle} volunteers waiting again`, sc.waitMs, after, (x) => (x.volunteers.waiting ?? 0) === idle);
      n.waitingAfter = t.volunteers.waiting ?? 0;
      n.demandLeft = await demandLeft(swarm.url, swarm.model);
    });
    await readPages('atEnd', 'end');
    // Two more ticks, so the image shows the calm after the releases too.
    const last = r.ticks.at(-1)?.t ?? Date.now();
    await r.waitTick('the tail', 5_000, last + 1500, () => true).catch(() => {});
  } catch (e) {
    n.failures.push(e instanceof Error ? e.message : String(e));
  } finally {
    await load?.abort();
    timeline = rec?.stop() ?? null;
    for (const v of vols) await v.stop();
    for (const t of tabs) await t.close();
    await browser?.close().catch(() => {});
    await lab?.close();
    await swarm.close();
    if (pagesDir) rmSync(pagesDir, { recursive: true, force: true });
  }

  const tl: Timeline = timeline ?? {
    model: swarm.model,
    startedMs: t0,
    stoppedMs: Date.now(),
    mapPollMs: 0,
    ticks: [],
    events: [],
    workers: {},
  };
  const requests = load?.records ?? [];
  measureAfter(n, sc, tl, requests, baseline, rampDownMs);
  mkdirSync(sc.artifacts, { recursive: true });
  const jsonPath = join(sc.artifacts, `${sc.name}.json`);
  const svgPath = join(sc.artifacts, `${sc.name}.svg`);
  const { log: _log, ...scenario } = sc;
  writeFileSync(jsonPath, `${JSON.stringify({ scenario, numbers: n, timeline: tl, requests, baseline }, null, 1)}\n`);
  writeFileSync(
    svgPath,
    timelineSvg(
      tl,
      n.loadStartMs || tl.startedMs,
      `elastic scenario "${sc.name}": ${nHeadless} headless + ${nPages} Chromium page volunteers, ${sc.slots} slots, 0 → ${sc.load.peak} → 0 streams`,
    ),
  );
  return { scenario, numbers: n, timeline: tl, requests, baseline, jsonPath, svgPath };
}

/** Runs one stage; a failure is recorded and ends the story there (the checks then say what was not reached). */
async function step(n: ElasticNumbers, what: string, f: () => Promise<void>): Promise<void> {
  if (n.failures.length > 0) return;
  try {
    await f();
  } catch (e) {
    n.failures.push(`${what}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** Numbers read from the whole timeline once the run is over. */
function measureAfter(
  n: ElasticNumbers,
  sc: ElasticScenario,
  tl: Timeline,
  requests: RequestRecord[],
  baseline: number[][],
  rampDownMs: number,
): void {
  if (n.onsetMs !== null) {
    const onset = n.onsetMs;
    n.flaps = tl.events
      .filter((e) => e.kind === 'saturation-end' && e.model === tl.model && e.atMs > onset && e.atMs < rampDownMs)
      .map((e) => ({ atMs: e.atMs, busyAtTick: tl.ticks.find((t) => t.t >= e.atMs)?.busy ?? null }));
  }
  n.recruited = [
    ...new Set(
      tl.events
        .filter((e) => e.kind === 'recruit' && e.model === tl.model && e.atMs >= n.loadStartMs)
        .map((e) => / to (\S+)$/.exec(e.detail)?.[1])
        .filter((w): w is string => w !== undefined),
    ),
  ];
  for (const w of n.recruited) {
    const tr = tl.workers[w];
    n.firstServeMs[w] = tr?.firstServeMs ?? null;
    const endOrNow = n.endMs ?? tl.stoppedMs;
    n.servedPastIdle[w] =
      tr?.firstServeMs != null && tr.serves.some((s) => s >= (tr.firstServeMs as number) + sc.dispatchIdleMs && s <= endOrNow);
  }
  const firsts = Object.values(n.firstServeMs).filter((t): t is number => t !== null);
  if (n.onsetMs !== null && firsts.length > 0) n.recruitmentLatencyMs = Math.min(...firsts) - n.onsetMs;
  n.servedPairsWhileSaturated = tl.ticks.filter((t) => t.recruiting).reduce((a, t) => a + t.pairsPerS.served, 0);
  n.releases = tl.events
    .filter((e) => e.kind === 'release' && e.model === tl.model && e.atMs >= (n.endMs ?? Number.POSITIVE_INFINITY))
    .map((e) => ({ worker: /^(\S+):/.exec(e.detail)?.[1] ?? '?', atMs: e.atMs }));
  if (n.endMs !== null && n.releases.length > 0) n.releaseMs = Math.max(...n.releases.map((x) => x.atMs)) - n.endMs;
  n.requests = requests.length;
  n.retried503 = requests.reduce((a, r) => a + r.retried, 0);
  for (const [k, r] of requests.entries()) {
    if (r.error !== null) {
      n.requestErrors.push(`#${k} (lane ${r.lane}, prompt ${r.prompt}): ${r.error}`);
      continue;
    }
    const want = baseline[r.prompt] ?? [];
    const at = r.ids.findIndex((id, i) => id !== want[i]);
    if (at >= 0 || r.ids.length !== want.length) n.mismatches.push(`#${k} prompt ${r.prompt} at token ${at >= 0 ? at : r.ids.length}`);
  }
}

/** Waits until every (MoE layer, expert) has exactly `target` serving replicas in the dispatch map. */
async function waitReplicas(
  url: string,
  model: string,
  moeLayers: readonly number[],
  nExpert: number,
  target: number,
  timeoutMs: number,
): Promise<{ min: number; max: number }> {
  const until = Date.now() + timeoutMs;
  let seen = { min: -1, max: -1 };
  while (Date.now() < until) {
    const rows = (
      (await (await fetch(`${url}/api/expert-dispatch-map?model=${encodeURIComponent(model)}`)).json()) as {
        rows: Array<{ layer: number; experts: [number, number] }>;
      }
    ).rows;
    const counts = moeLayers.map((layer) => {
      const c = new Int32Array(nExpert);
      for (const r of rows) if (r.layer === layer) for (let e = r.experts[0]; e < r.experts[1]; e++) c[e] = (c[e] as number) + 1;
      return [...c];
    });
    seen = { min: Math.min(...counts.flat()), max: Math.max(...counts.flat()) };
    if (seen.min === target && seen.max === target) return seen;
    await wait(100);
  }
  throw new Error(`replicas per expert ${seen.min}..${seen.max}, not all ${target}, after ${timeoutMs} ms`);
}

/** Whether the market still wants any expert of the model (a segment with scarcity > 0). */
async function demandLeft(url: string, model: string): Promise<boolean> {
  const r = (await (await fetch(`${url}/api/expert-demand?model=${encodeURIComponent(model)}`)).json()) as {
    models: Array<{ layers: Array<{ segments: Array<{ scarcity: number }> }> }>;
  };
  return r.models.some((md) => md.layers.some((l) => l.segments.some((s) => s.scarcity > 0)));
}

// --- the checks

export interface ElasticBounds {
  /** Saturation detected within this long of the slots filling. */
  detectionMs: number;
  /** onset → first recruited volunteer's first served pair. */
  recruitmentLatencyMs: number;
  /** Load calm → saturation end and target back at base. */
  baseAgainMs: number;
  /** Saturation end → the last release. */
  releaseMs: number;
  /** Whether a saturation end while the load held its peak fails the run (see ElasticNumbers.flaps). */
  noFlaps: boolean;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

const ms = (v: number | null): string => (v === null ? 'never' : `${v.toFixed(0)} ms`);

/** The story as named checks (pure): both the full run and the CI test assert every one. */
export function judgeElastic(r: Pick<ElasticResult, 'numbers' | 'scenario'>, b: ElasticBounds): Check[] {
  const n = r.numbers;
  const sc = r.scenario;
  const within = (v: number | null, bound: number): boolean => v !== null && v <= bound;
  const recruitedServed = n.recruited.filter(
    (w) => n.firstServeMs[w] != null && (n.endMs === null || (n.firstServeMs[w] as number) <= n.endMs),
  );
  const pages = n.volunteerIds.pages;
  // When the boosted target wants every volunteer, every page must be recruited and serve; else the market picks.
  const pagesMustServe = n.wanted >= sc.volunteers;
  const pageChecks: Check[] =
    pages.length === 0
      ? []
      : [
          {
            name: 'Chromium pages volunteer like the headless ones',
            ok:
              n.pageReports.every((p) => p.atRest === 'Waiting for demand' && p.errors.length === 0) &&
              (!pagesMustServe || pages.every((w) => recruitedServed.includes(w))),
            detail: `${n.pageReports
              .map(
                (p, i) =>
                  `page${i} ${p.workerId}: at rest "${p.atRest}", ${n.recruited.includes(p.workerId) ? `recruited, ${recruitedServed.includes(p.workerId) ? 'served' : 'never served'}` : 'not recruited'}, at the peak "${p.atPeak}", at the end "${p.atEnd}"${p.errors.length ? `, script errors: ${p.errors.slice(0, 3).join(' | ')}` : ''}`,
              )
              .join(
                '; ',
              )}${pagesMustServe ? '' : ` (the boosted target wants ${n.wanted} of ${sc.volunteers}: pages need not be recruited)`}`,
          },
        ];
  return [
    { name: 'the run reached every stage', ok: n.failures.length === 0, detail: n.failures.join('; ') || 'yes' },
    {
      name: 'saturation detected',
      ok: within(n.detectionMs, b.detectionMs),
      detail: `onset ${ms(n.detectionMs)} after the slots were full (a request queued), ${ms(n.onsetMs !== null && n.streamsAtOnceMs !== null ? n.onsetMs - n.streamsAtOnceMs : null)} after ${sc.saturateAt} streams first generated at once (bound ${b.detectionMs} ms; poll ${sc.pollMs} ms)`,
    },
    {
      name: 'effective target base → base + boost',
      ok:
        n.boostedTick !== null && n.boostedTick.baseTarget === sc.targetBase && n.boostedTick.effectiveTarget === sc.targetBase + sc.boost,
      detail: n.boostedTick ? `${n.boostedTick.baseTarget} → ${n.boostedTick.effectiveTarget}` : 'never boosted',
    },
    {
      name: 'recruitment latency',
      ok: within(n.recruitmentLatencyMs, b.recruitmentLatencyMs),
      detail: `onset → first recruited volunteer's first served pair ${ms(n.recruitmentLatencyMs)} (bound ${b.recruitmentLatencyMs} ms)`,
    },
    {
      name: 'recruited workers serve while saturated',
      ok: n.recruited.length > 0 && recruitedServed.length === n.recruited.length && n.servedPairsWhileSaturated > 0,
      detail: `${recruitedServed.length} of ${n.recruited.length} recruited (${n.recruited.join(', ')}) served before the end; ${n.servedPairsWhileSaturated.toFixed(0)} pair·ticks served`,
    },
    {
      name: 'dispatched past the idle timeout while saturated',
      ok: n.recruited.length > 0 && n.recruited.every((w) => n.servedPastIdle[w]),
      detail: `${Object.entries(n.servedPastIdle)
        .map(([w, ok]) => `${w} ${ok ? 'yes' : 'no'}`)
        .join(', ')} (idle timeout ${sc.dispatchIdleMs} ms)`,
    },
    {
      name: 'saturated without a break while the load held',
      ok: !b.noFlaps || n.flaps.length === 0,
      detail: `${n.flaps.length} saturation ends before the ramp-down${n.flaps.length ? ` (${n.flaps.map((f) => `+${f.atMs - (n.onsetMs ?? 0)} ms, busy ${f.busyAtTick} at the next tick`).join('; ')})` : ''}${b.noFlaps ? '' : ' (printed, not asserted)'}`,
    },
    {
      name: 'target back at base within one poll + the reading TTL',
      ok: within(n.endDetectionMs, b.baseAgainMs) && within(n.baseAgainMs, b.baseAgainMs + 1000),
      detail: `saturation end ${ms(n.endDetectionMs)}, base-target tick ${ms(n.baseAgainMs)} after the load fell below ${sc.saturateAt} requests (bound ${b.baseAgainMs} ms, + a tick)`,
    },
    {
      name: 'surplus workers released',
      ok:
        n.releases.length > 0 &&
        within(n.releaseMs, b.releaseMs) &&
        n.replicasAfter?.min === sc.targetBase &&
        n.replicasAfter.max === sc.targetBase &&
        n.demandLeft === false,
      detail: `${n.releases.map((x) => x.worker).join(', ') || 'none'} released ${ms(n.releaseMs)} after the end (bound ${b.releaseMs} ms); replicas ${n.replicasAfter ? `${n.replicasAfter.min}..${n.replicasAfter.max}` : '?'}; demand left ${n.demandLeft}; ${n.waitingAfter} volunteers waiting again`,
    },
    {
      name: 'tokens identical to the local-only run',
      ok: n.requests >= sc.load.peak && n.requestErrors.length === 0 && n.mismatches.length === 0 && n.baselineDistinct >= 8,
      detail: `${n.requests - n.mismatches.length - n.requestErrors.length} of ${n.requests} requests identical (${n.baselineDistinct} distinct tokens in the local run; ${n.retried503} 503 answers retried)${n.mismatches.length ? `; differ: ${n.mismatches.slice(0, 5).join(', ')}` : ''}${n.requestErrors.length ? `; errors: ${n.requestErrors.slice(0, 3).join('; ')}` : ''}`,
    },
    ...pageChecks,
  ];
}

/** The numbers, one line each, for a log or a test's output. */
export function summaryLines(r: ElasticResult, checks: Check[]): string[] {
  const n = r.numbers;
  const rel = (t: number | null | undefined): string => (t == null || n.onsetMs === null ? '—' : `${t - n.onsetMs} ms`);
  const perWorker = n.recruited.map((w) => {
    const recruit = r.timeline.events.find((e) => e.kind === 'recruit' && e.atMs >= n.loadStartMs && e.detail.endsWith(` to ${w}`));
    const tr = r.timeline.workers[w];
    const kind = n.volunteerIds.pages.includes(w) ? 'Chromium page' : 'headless';
    return `  ${w} (${kind}): recruited ${rel(recruit?.atMs)}, serving (in the map) ${rel(tr?.firstListedMs)}, first served pair ${rel(tr?.firstServeMs)} after the onset`;
  });
  return [
    ...checks.map((c) => `${c.ok ? 'ok  ' : 'FAIL'} ${c.name}: ${c.detail}`),
    ...perWorker,
    `requests ${r.numbers.requests}; timeline ${r.jsonPath}; image ${r.svgPath}`,
  ];
}
