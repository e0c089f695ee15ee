/**
 * Saturation and recruitment (Layer 2): when a coordinator's inference slots are busy, the hub raises the model's
 * target replicas. Pure: the poller (I/O) stores the latest `SlotsReading` per model; these functions judge it.
 *
 *   const state = saturationState(readings.get(model), Date.now(), DEFAULT_SATURATION);
 *   const target = effectiveTarget(DEFAULT_SATURATION, state.recruiting);
 *
 * A reading that is too old stops recruitment (the coordinator may be gone; the hub must not keep recruiting on a
 * memory), and a reading of unknown source never recruits.
 */
import { HubError } from '../errors.ts';
import { COORDINATOR_SLOTS_MAX } from '../limits.ts';

export interface SlotsReading {
  atMs: number;
  busy: number | null;
  slots: number | null;
  /** 'slots': GET /slots; 'metrics': GET /metrics (busy only); 'unknown': neither answered usefully. */
  source: 'slots' | 'metrics' | 'unknown';
}

export interface SaturationConfig {
  /** Saturated at busy ≥ this many slots. */
  saturateAt: number;
  /** Readings older than this stop recruitment. */
  maxReadingAgeMs: number;
  targetBase: number;
  /** Added to the target while recruiting. */
  boost: number;
}

export const DEFAULT_SATURATION: Readonly<SaturationConfig> = Object.freeze({
  saturateAt: 2,
  maxReadingAgeMs: 30_000,
  targetBase: 2,
  boost: 1,
});

/** Why a model is or is not recruiting. Callers and tests match the code; `reason` says it to a person. */
export type SaturationCode =
  /** The poller has no reading of this coordinator yet. */
  | 'no-reading'
  /** Neither /slots nor /metrics answered usefully: slot usage unknown, never recruits. */
  | 'source-unknown'
  /** The reading has no busy count. */
  | 'no-busy-count'
  /** Busy slots below the threshold. */
  | 'not-saturated'
  /** Saturated, but the reading is older than maxReadingAgeMs: the coordinator may be gone. */
  | 'reading-stale'
  /** Saturated on a fresh reading: recruiting. */
  | 'recruiting';

export interface SaturationState {
  busy: number | null;
  slots: number | null;
  saturated: boolean;
  recruiting: boolean;
  /** Age of the reading in seconds (0.1 s resolution); null without a reading. */
  ageS: number | null;
  code: SaturationCode;
  reason: string;
}

export function saturationState(reading: SlotsReading | undefined, nowMs: number, cfg: SaturationConfig): SaturationState {
  if (!reading)
    return { busy: null, slots: null, saturated: false, recruiting: false, ageS: null, code: 'no-reading', reason: 'no reading yet' };
  const { busy, slots } = reading;
  // A reading from the future (clock step) is treated as brand new rather than rejected.
  const ageMs = Math.max(0, nowMs - reading.atMs);
  const ageS = Math.round(ageMs / 100) / 10;
  const saturated = busy !== null && busy >= cfg.saturateAt;
  const base = { busy, slots, saturated, ageS };
  if (reading.source === 'unknown')
    return { ...base, recruiting: false, code: 'source-unknown', reason: 'slot usage unknown: never recruits' };
  if (busy === null) return { ...base, recruiting: false, code: 'no-busy-count', reason: 'no busy count in the reading' };
  if (!saturated) return { ...base, recruiting: false, code: 'not-saturated', reason: `busy ${busy} < ${cfg.saturateAt}: not saturated` };
  if (ageMs > cfg.maxReadingAgeMs) {
    return {
      ...base,
      recruiting: false,
      code: 'reading-stale',
      reason: `saturated, but the reading is ${ageS} s old (> ${cfg.maxReadingAgeMs / 1000} s): stale`,
    };
  }
  return { ...base, recruiting: true, code: 'recruiting', reason: `busy ${busy} ≥ ${cfg.saturateAt}: recruiting` };
}

/** Target replicas: the base, plus the boost while recruiting. */
export function effectiveTarget(cfg: SaturationConfig, recruiting: boolean): number {
  return cfg.targetBase + (recruiting ? cfg.boost : 0);
}

/**
 * llama-server `GET /slots`: an array of slot objects, each with a boolean `is_processing`.
 * Throws COORDINATOR_ERROR on anything else.
 */
export function parseSlots(json: unknown): { busy: number; slots: number } {
  if (!Array.isArray(json)) throw new HubError('COORDINATOR_ERROR', 'GET /slots did not return an array of slots');
  if (json.length > COORDINATOR_SLOTS_MAX) {
    throw new HubError('COORDINATOR_ERROR', `GET /slots returned ${json.length} slots (more than ${COORDINATOR_SLOTS_MAX})`);
  }
  let busy = 0;
  for (const [i, slot] of json.entries()) {
    if (typeof slot !== 'object' || slot === null || Array.isArray(slot)) {
      throw new HubError('COORDINATOR_ERROR', `GET /slots: slot ${i} is not an object`);
    }
    const processing = (slot as { is_processing?: unknown }).is_processing;
    if (typeof processing !== 'boolean') throw new HubError('COORDINATOR_ERROR', `GET /slots: slot ${i} has no boolean is_processing`);
    if (processing) busy++;
  }
  return { busy, slots: json.length };
}

const PROCESSING_METRIC = 'llamacpp:requests_processing';

/**
 * llama-server `GET /metrics` (Prometheus text): the value of `llamacpp:requests_processing`, summed over its
 * samples; null when the metric is absent. Throws COORDINATOR_ERROR on a sample that is not a count ≥ 0.
 */
export function parseMetricsProcessing(text: string): number | null {
  let total: number | null = null;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || !line.startsWith(PROCESSING_METRIC)) continue;
    // name, optional {labels}, value, optional timestamp
    const m = /^llamacpp:requests_processing(\{[^}]*\})?\s+(\S+)(\s+-?\d+)?$/.exec(line);
    if (!m) {
      if (/^llamacpp:requests_processing(?:[\s{]|$)/.test(line))
        throw new HubError('COORDINATOR_ERROR', `GET /metrics: malformed sample ${JSON.stringify(line.slice(0, 120))}`);
      continue; // another metric sharing the prefix
    }
    const value = Number(m[2]);
    if (!Number.isFinite(value) || value < 0) {
      throw new HubError('COORDINATOR_ERROR', `GET /metrics: ${PROCESSING_METRIC} is ${JSON.stringify(m[2])}, not a count`);
    }
    total = (total ?? 0) + value;
  }
  return total;
}
