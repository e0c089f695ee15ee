/**
 * The join widget's one postMessage protocol, between the card (loader.ts, on the host page) and the frame
 * (web/src/embed/, on the hub's origin). Both ends import this module: the card bundles it into /widget.js, the frame
 * into its page.
 *
 * Every message is a plain object tagged `{ ns: WIDGET_NS, v: WIDGET_PROTOCOL_VERSION, type, ... }`. The parsers drop
 * (return null for) anything that is not exactly one of the messages below: another namespace or version, an unknown
 * type, a missing or mistyped field, a number out of range, a string over its cap. Unknown extra fields are ignored,
 * never copied. Origins and sources are checked by the receivers before they parse (see loader.ts and embed/frame.ts).
 *
 *   frame → card   ready                                   the frame listens; the card answers with config
 *                  state {phase, progress, pairsServed, backend, message, code}
 *   card → frame   config {budgetMiB, model}               before join; ignored after
 *                  join                                    the visitor's consent: only now does the frame dial the hub
 *                  pause | resume | leave
 *
 *   window.parent.postMessage(frameMessage({ type: 'ready' }), hostOrigin);
 *   const m = parseCardMessage(event.data); if (m?.type === 'join') client.join();
 *
 * Nothing secret crosses: the frame keeps the node token, the key pair and the slice to itself.
 */

export const WIDGET_NS = 'expertswarm.widget';
export const WIDGET_PROTOCOL_VERSION = 1;

/** The volunteer client's states (volunteer/state.ts VolunteerStateKind), as the card shows them. */
export const PHASES = [
  'idle',
  'connecting',
  'retrying',
  'waiting',
  'downloading',
  'starting',
  'serving',
  'paused',
  'released',
  'failed',
  'left',
] as const;
export type Phase = (typeof PHASES)[number];

export const BACKENDS = ['webgpu', 'wasm'] as const;
export type WidgetBackend = (typeof BACKENDS)[number];

/** The memory budget the card may ask for, in MiB (the volunteer page's range: web/src/volunteer/page-model.ts). */
export const BUDGET_LIMITS_MIB = { min: 64, max: 8192, initial: 512 } as const;

/** Caps on strings: a message is one sentence for people, a code a stable identifier, a model a `/v1/models` name. */
export const LIMITS = { message: 300, code: 40, model: 128 } as const;

export interface WidgetState {
  phase: Phase;
  /** Whole percent of the slice download while `downloading` (null while its size is unknown, and in other phases). */
  progress: number | null;
  /** Pairs this frame served since it loaded. */
  pairsServed: number;
  /** What computes while `serving` (null otherwise). */
  backend: WidgetBackend | null;
  /** A sentence for people: why it retries, failed or released ('' when there is nothing to add). */
  message: string;
  /** The client's stable failure code while `failed` ('' otherwise). */
  code: string;
}

export type FrameMessage = { type: 'ready' } | { type: 'state'; state: WidgetState };

export type CardMessage =
  | { type: 'config'; budgetMiB: number; model: string }
  | { type: 'join' }
  | { type: 'pause' }
  | { type: 'resume' }
  | { type: 'leave' };

type Envelope<M> = M & { ns: typeof WIDGET_NS; v: typeof WIDGET_PROTOCOL_VERSION };

export function frameMessage(m: FrameMessage): Envelope<FrameMessage> {
  return { ns: WIDGET_NS, v: WIDGET_PROTOCOL_VERSION, ...m };
}

export function cardMessage(m: CardMessage): Envelope<CardMessage> {
  return { ns: WIDGET_NS, v: WIDGET_PROTOCOL_VERSION, ...m };
}

type Fields = Record<string, unknown>;

/** The fields of a message of this protocol and version, or null. */
function envelope(data: unknown): Fields | null {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return null;
  const f = data as Fields;
  return f.ns === WIDGET_NS && f.v === WIDGET_PROTOCOL_VERSION && typeof f.type === 'string' ? f : null;
}

const isOneOf = <T extends string>(list: readonly T[], x: unknown): x is T =>
  typeof x === 'string' && (list as readonly string[]).includes(x);
const isCount = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0;
const isText = (x: unknown, max: number): x is string => typeof x === 'string' && x.length <= max;

/** A model name as `/v1/models` lists it, or '' for any: printable, no spaces or quotes. */
export function isModelName(x: unknown): x is string {
  return isText(x, LIMITS.model) && /^[\w.:/@+-]*$/.test(x);
}

export function isBudgetMiB(x: unknown): x is number {
  return Number.isSafeInteger(x) && (x as number) >= BUDGET_LIMITS_MIB.min && (x as number) <= BUDGET_LIMITS_MIB.max;
}

function parseState(x: unknown): WidgetState | null {
  if (typeof x !== 'object' || x === null) return null;
  const s = x as Fields;
  const progress = s.progress === null || (isCount(s.progress) && s.progress <= 100);
  const backend = s.backend === null || isOneOf(BACKENDS, s.backend);
  if (!isOneOf(PHASES, s.phase) || !progress || !isCount(s.pairsServed) || !backend) return null;
  if (!isText(s.message, LIMITS.message) || !isText(s.code, LIMITS.code) || !/^[A-Z0-9_]*$/.test(s.code)) return null;
  return {
    phase: s.phase,
    progress: s.progress as number | null,
    pairsServed: s.pairsServed,
    backend: s.backend as WidgetBackend | null,
    message: s.message,
    code: s.code,
  };
}

/** What the card accepts from the frame; null for anything else. */
export function parseFrameMessage(data: unknown): FrameMessage | null {
  const f = envelope(data);
  if (!f) return null;
  if (f.type === 'ready') return { type: 'ready' };
  if (f.type !== 'state') return null;
  const state = parseState(f.state);
  return state ? { type: 'state', state } : null;
}

/** What the frame accepts from the card; null for anything else. */
export function parseCardMessage(data: unknown): CardMessage | null {
  const f = envelope(data);
  if (!f) return null;
  switch (f.type) {
    case 'config':
      return isBudgetMiB(f.budgetMiB) && isModelName(f.model) ? { type: 'config', budgetMiB: f.budgetMiB, model: f.model } : null;
    case 'join':
    case 'pause':
    case 'resume':
    case 'leave':
      return { type: f.type };
    default:
      return null;
  }
}

/**
 * `value` if it is an origin and nothing more (`https://host[:port]`, http or https), else null: the frame takes the
 * card's origin from its own URL and posts to nothing else.
 */
export function exactOrigin(value: unknown): string | null {
  if (typeof value !== 'string' || value.length > 2048) return null;
  try {
    const u = new URL(value);
    if (u.protocol !== 'https:' && u.protocol !== 'http:') return null;
    return u.origin === value ? value : null;
  } catch {
    return null;
  }
}
