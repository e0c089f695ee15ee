/**
 * What the volunteer page says and offers in each state of the client: pure functions over volunteer/state.ts, so
 * every sentence and every button rule is tested without a browser (test/unit/volunteer-page-model.test.ts).
 *
 *   const m = describeState({ kind: 'retrying', inSeconds: 4, reason: 'connection refused', attempt: 2 }, { secondsLeft: 3 });
 *   m.title; // "Hub unreachable — retrying in 3 s"
 */
import { VARIANT_FEATURES, type VariantFeature } from '../../../protocol/variant.ts';
import type { VolunteerErrorCode } from '../../../volunteer/errors.ts';
import type { DeviceReport, PeerStats, ShareChoice, SliceAssignment, VolunteerState } from '../../../volunteer/state.ts';

/** The memory-budget control, in MiB (the client takes bytes). */
export const BUDGET_MIB = { min: 64, max: 8192, step: 64, initial: 512 } as const;

const MIB = 1024 * 1024;

export function budgetBytes(mib: number): number {
  return clampBudgetMiB(mib) * MIB;
}

/** A typed-in budget held to the control's range and step; anything not a number falls back to the initial value. */
export function clampBudgetMiB(mib: number): number {
  if (!Number.isFinite(mib)) return BUDGET_MIB.initial;
  const stepped = Math.round(mib / BUDGET_MIB.step) * BUDGET_MIB.step;
  return Math.min(BUDGET_MIB.max, Math.max(BUDGET_MIB.min, stepped));
}

/** Bytes for people: "512 MiB", "1.50 GiB", "12.3 MiB", "900 KiB". */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n) || n < 0) return '—';
  if (n >= 1024 * MIB) return `${(n / (1024 * MIB)).toFixed(2)} GiB`;
  if (n >= MIB) return `${(n / MIB).toFixed(n >= 100 * MIB || n % MIB === 0 ? 0 : 1)} MiB`;
  if (n >= 1024) return `${Math.round(n / 1024)} KiB`;
  return `${n} B`;
}

/** Whole percent of a download, or null while its size is unknown (the bar is then indeterminate). */
export function downloadPercent(loaded: number, total: number): number | null {
  if (!(total > 0) || !Number.isFinite(loaded)) return null;
  return Math.floor((100 * Math.min(Math.max(loaded, 0), total)) / total);
}

/** "experts 0–63 of layer 3 (64 experts, model demo)": `experts` is [begin, end). */
/** ' (taken from this browser's cache: nothing downloaded)' once the slice came from the cache; '' otherwise. */
function fromCacheNote(s: SliceAssignment): string {
  return s.fromCache ? ' (taken from this browser’s cache: nothing downloaded)' : '';
}

export function describeSlice(s: SliceAssignment): string {
  const [begin, end] = s.experts;
  const n = end - begin;
  const range = n === 1 ? `expert ${begin}` : `experts ${begin}–${end - 1}`;
  return `${range} of layer ${s.layer} (${n} expert${n === 1 ? '' : 's'}, model ${s.model})`;
}

/** Seconds left before a retry announced `inSeconds` at `sinceMs`, rounded up, never below 0. */
export function retrySecondsLeft(inSeconds: number, sinceMs: number, nowMs: number): number {
  const left = inSeconds - Math.max(0, nowMs - sinceMs) / 1000;
  return Math.max(0, Math.ceil(left - 1e-9));
}

export type Tone = 'neutral' | 'busy' | 'good' | 'warn' | 'bad';

export interface StateMessage {
  /** The headline, visible; for `retrying` it carries the countdown. */
  title: string;
  detail: string;
  tone: Tone;
  /**
   * The sentence screen readers hear when the state changes. It has no running numbers (countdown, download
   * percentage), so the live region speaks once per change instead of every second.
   */
  announce: string;
}

export const BACKEND_NAMES = { webgpu: 'WebGPU', wasm: 'WebAssembly (wasm)' } as const;

export interface MessageContext {
  /** The live countdown while retrying (the page ticks it); defaults to the state's own `inSeconds`. */
  secondsLeft?: number;
  device?: DeviceReport | null;
}

export function describeState(s: VolunteerState, ctx: MessageContext = {}): StateMessage {
  const msg = (title: string, detail: string, tone: Tone, announce = title): StateMessage => ({ title, detail, tone, announce });
  switch (s.kind) {
    case 'idle':
      return msg(
        'Not joined yet',
        'Nothing has been downloaded and the hub has not been contacted. Choose a memory budget and press Join to start.',
        'neutral',
      );
    case 'connecting':
      return msg(
        'Connecting to the hub…',
        s.attempt > 1 ? `Attempt ${s.attempt}.` : 'Opening the connection; nothing is downloaded until the hub assigns a slice.',
        'busy',
      );
    case 'retrying': {
      const left = ctx.secondsLeft ?? s.inSeconds;
      return msg(
        `Hub unreachable — retrying in ${left} s`,
        `${s.reason} (attempt ${s.attempt}). The page keeps trying by itself; you can leave at any time.`,
        'warn',
        'Hub unreachable, retrying shortly',
      );
    }
    case 'waiting':
      return msg(
        'Waiting for demand',
        'Connected. The hub serves everything itself while it is not busy; when a model needs more helpers it assigns this tab a slice of experts. Nothing is downloaded until then.',
        'neutral',
      );
    case 'downloading': {
      const pct = downloadPercent(s.loadedBytes, s.totalBytes);
      const size = s.totalBytes > 0 ? `${formatBytes(s.loadedBytes)} of ${formatBytes(s.totalBytes)}` : formatBytes(s.loadedBytes);
      const what = s.fromCache ? 'Loading the slice from this browser’s cache' : 'Downloading the slice';
      return msg(
        `${what}: ${size}${pct === null ? '' : ` (${pct}%)`}`,
        `${describeSlice(s.slice)}.${s.fromCache ? ' It was downloaded before, so no bandwidth is used.' : ''}`,
        'busy',
        s.fromCache ? 'Loading the slice from the cache' : 'Downloading the slice',
      );
    }
    case 'starting':
      return msg(
        'Starting the compute engine',
        `Loading ${describeSlice(s.slice)} into memory${fromCacheNote(s.slice)} and measuring WebGPU against WebAssembly to pick the faster one.`,
        'busy',
      );
    case 'serving': {
      const d = ctx.device;
      const noGpu = s.backend === 'wasm' && d !== undefined && d !== null && !d.webgpu;
      return msg(
        `Serving with ${BACKEND_NAMES[s.backend]}`,
        noGpu
          ? `No WebGPU in this browser, so this tab computes with WebAssembly instead (slower, but it still helps). Holding ${describeSlice(s.slice)}${fromCacheNote(s.slice)}.`
          : `Computing ${describeSlice(s.slice)} whenever the hub sends work${fromCacheNote(s.slice)}.`,
        'good',
      );
    }
    case 'paused':
      return msg(
        'Paused',
        s.slice
          ? `Holding ${describeSlice(s.slice)} but computing nothing until you resume.`
          : 'Connected but accepting no work until you resume.',
        'neutral',
      );
    case 'released':
      return msg(
        'Slice released',
        `The hub no longer needs ${describeSlice(s.slice)} (${s.reason}). Its memory is freed; this tab waits for demand again shortly.`,
        'neutral',
      );
    case 'failed':
      return msg(
        s.retrying ? `Problem: ${s.message} — trying again` : `This device cannot help: ${s.message}`,
        `${s.retrying ? 'The page tries again by itself.' : failureHint(s.code)} (code ${s.code})`,
        s.retrying ? 'warn' : 'bad',
      );
    case 'left':
      return msg('You left', 'The connection is closed and the memory is freed. You can join again at any time.', 'neutral');
  }
}

/** What the visitor can do about a failure that the client does not retry, by the client's stable code. */
const FAILURE_HINTS: Partial<Record<VolunteerErrorCode, string>> = {
  SLICE_DOES_NOT_FIT:
    'The slice the hub needs is larger than the memory budget or than this graphics adapter can hold. If this device has memory to spare, leave, raise the budget and join again.',
  NO_BACKEND: 'Neither WebGPU nor WebAssembly could compute the slice in this browser. An up-to-date browser may do better.',
  HUB_REFUSED: 'The hub does not accept this volunteer; joining again will not help.',
  SHARD_DIGEST_MISMATCH: 'The downloaded slice was damaged, so it was not used. Leave and join again to download it afresh.',
};

export function failureHint(code: string): string {
  return FAILURE_HINTS[code as VolunteerErrorCode] ?? 'Leave and join again to retry.';
}

/** Which controls a state offers. Pause keeps the same button as Resume (its label flips), so focus stays put. */
export interface Actions {
  join: boolean;
  pause: boolean;
  resume: boolean;
  leave: boolean;
  /** The budget is sent with join; while joined it is fixed (leave to change it). */
  budgetEditable: boolean;
}

export function actionsFor(s: VolunteerState): Actions {
  const out = (join: boolean, pause: boolean, resume: boolean, leave: boolean): Actions => ({
    join,
    pause,
    resume,
    leave,
    budgetEditable: join,
  });
  switch (s.kind) {
    case 'idle':
    case 'left':
      return out(true, false, false, false);
    case 'connecting':
    case 'retrying':
      return out(false, false, false, true);
    case 'waiting':
    case 'downloading':
    case 'starting':
    case 'serving':
    case 'released':
      return out(false, true, false, true);
    case 'paused':
      return out(false, false, true, true);
    case 'failed':
      return out(false, false, false, true);
  }
}

/** The device panel's rows, [label, value], for a report (null: the device is examined after joining). */
export function describeDevice(d: DeviceReport): [string, string][] {
  const rows: [string, string][] = [];
  rows.push(['WebGPU', d.webgpu ? 'available' : 'not available in this browser']);
  if (d.adapter) {
    const name = [d.adapter.vendor, d.adapter.architecture].filter((x) => x.length > 0).join(' · ') || 'unnamed adapter';
    rows.push(['Adapter', d.adapter.description ? `${name} (${d.adapter.description})` : name]);
    if (d.adapter.isFallbackAdapter) rows.push(['Adapter kind', 'software fallback (no real GPU)']);
  }
  if (d.limits) {
    rows.push(['Largest storage binding', formatBytes(d.limits.maxStorageBufferBindingSize)]);
    rows.push(['Largest buffer', formatBytes(d.limits.maxBufferSize)]);
  }
  if (d.webgpu) rows.push(['Features', d.features.length > 0 ? d.features.join(', ') : 'none beyond the core']);
  rows.push(['Memory budget', formatBytes(d.memoryBudgetBytes)]);
  rows.push(['Backend', d.backend ? BACKEND_NAMES[d.backend] : 'not chosen yet']);
  if (d.backendReason) rows.push(['Why', d.backendReason]);
  if (d.gflops !== null && Number.isFinite(d.gflops)) rows.push(['Measured speed', `${d.gflops.toPrecision(3)} GFLOP/s`]);
  rows.push(['Expert types', describeVariants(d.variants)]);
  return rows;
}

/** Each expert FFN variant feature (protocol/variant.ts) in words people know it by. */
const VARIANT_NAMES: Readonly<Record<VariantFeature, string>> = {
  silu: 'SiLU-gated (most models)',
  swiglu_oai: 'SwiGLU-OAI (gpt-oss)',
  swiglu_clamp: 'clamped SwiGLU (DeepSeek-V4)',
  silu_limit: 'limited SiLU (Step-3.5)',
  gelu: 'GELU-gated (Grok)',
  bias: 'expert biases',
  scale: 'per-expert scales',
};

/**
 * The expert types a volunteer computes, for people: "SiLU-gated (most models), SwiGLU-OAI (gpt-oss), expert biases".
 * Listed in protocol order whatever the order given; an empty list is SiLU-gated, as the hub reads a hello that lists none.
 */
export function describeVariants(features: readonly VariantFeature[]): string {
  const listed = VARIANT_FEATURES.filter((f) => features.includes(f));
  return (listed.length > 0 ? listed : (['silu'] as const)).map((f) => VARIANT_NAMES[f]).join(', ');
}

/** Live numbers for the stats panel. */
export function formatCount(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '—';
}

export function formatRate(perSec: number): string {
  return Number.isFinite(perSec) ? `${perSec < 10 ? perSec.toFixed(1) : Math.round(perSec).toLocaleString('en-US')} /s` : '—';
}

export function formatLatency(ms: number | null): string {
  if (ms === null || !Number.isFinite(ms)) return '—';
  return ms < 10 ? `${ms.toFixed(1)} ms` : `${Math.round(ms)} ms`;
}

/**
 * The "Share with other volunteers" control (docs/peers.md): the upload cap in MiB/s, all peers together; 0 shares
 * nothing. A tab passes on only the slice it holds, only while joined and not paused.
 */
export const SHARE_MIB_PER_S = Object.freeze([0, 1, 4, 16] as const);
export const SHARE_INITIAL_MIB_PER_S = 4;

export function shareChoice(mibPerS: number): ShareChoice {
  const cap = SHARE_MIB_PER_S.includes(mibPerS as (typeof SHARE_MIB_PER_S)[number]) ? mibPerS : SHARE_INITIAL_MIB_PER_S;
  return { share: cap > 0, uploadCapBytesPerSec: cap * MIB };
}

export function shareLabel(mibPerS: number): string {
  return mibPerS === 0 ? 'Do not share' : `Share, up to ${mibPerS} MiB/s`;
}

/** "93% from other volunteers (4.0 MiB of 4.3 MiB)", or "all from the hub" when none came from peers. */
/** Where one held slice's bytes came from, in a few words (the page's slice list). */
export function describeSliceSource(s: Pick<PeerStats, 'fromPeers' | 'fromHub'>): string {
  const total = s.fromPeers + s.fromHub;
  if (total === 0) return 'this browser’s cache';
  if (s.fromPeers === 0) return 'the hub';
  if (s.fromHub === 0) return 'other volunteers';
  return `${Math.round((100 * s.fromPeers) / total)}% from other volunteers`;
}

export function describeSource(p: PeerStats): string {
  const total = p.fromPeers + p.fromHub;
  if (total === 0) return 'from this browser’s cache';
  if (p.fromPeers === 0) return `all from the hub (${formatBytes(total)})`;
  return `${Math.round((100 * p.fromPeers) / total)}% from other volunteers (${formatBytes(p.fromPeers)} of ${formatBytes(total)})`;
}
