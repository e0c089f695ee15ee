/**
 * The join widget's one postMessage protocol, between the card (loader.ts, on the host page) and the frame
 * (web/src/embed/, on the hub's origin), and the frame's URL. Both ends import this module: the card bundles it into
 * /widget.js, the frame into its page.
 *
 * Every message is a plain object tagged `{ ns: WIDGET_NS, v: WIDGET_PROTOCOL_VERSION, type, ... }`. The parsers drop
 * (return null for) anything that is not exactly one of the messages below: another namespace or version, an unknown
 * type, a missing or mistyped field, a number out of range, a string over its cap. Unknown extra fields are ignored,
 * never copied. Origins and sources are checked by the receivers before they parse (see loader.ts and embed/main.ts).
 *
 *   frame → card   ready                                   the frame listens
 *                  joined                                  the visitor pressed the frame's own "Lend my GPU"
 *                  state {phase, progress, pairsServed, backend, message, code}
 *   card → frame   pause | resume | leave                  honoured; before consent a pause is only remembered
 *
 * There is no `join` from the card (version 1 had one): consent is a trusted click in the frame's own document, so a
 * host page cannot start a visitor's GPU by posting a message. What the visitor lends (model, budget) and how the
 * button looks (theme) travel in the frame's URL (embedUrl / parseEmbedParams), read before the button shows.
 *
 *   window.parent.postMessage(frameMessage({ type: 'ready' }), hostOrigin);
 *   const m = parseCardMessage(event.data); if (m?.type === 'pause') client.pause();
 *
 * Nothing secret crosses: the frame keeps the node token, the key pair and the slice to itself.
 */

export const WIDGET_NS = 'expertswarm.widget';
/** 2: consent moved into the frame (no `join`, no `config`); a card or frame of version 1 is ignored. */
export const WIDGET_PROTOCOL_VERSION = 2;

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
  /** Slices it holds and serves now, and their bytes (a volunteer holds several: issue 27); 0 from a frame before them. */
  slicesHeld: number;
  bytesHeld: number;
  /** What computes while `serving` (null otherwise). */
  backend: WidgetBackend | null;
  /** A sentence for people: why it retries, failed or released ('' when there is nothing to add). */
  message: string;
  /** The client's stable failure code while `failed` ('' otherwise). */
  code: string;
}

export type FrameMessage = { type: 'ready' } | { type: 'joined' } | { type: 'state'; state: WidgetState };

export type CardMessage = { type: 'pause' } | { type: 'resume' } | { type: 'leave' };

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
    slicesHeld: isCount(s.slicesHeld) ? s.slicesHeld : 0,
    bytesHeld: isCount(s.bytesHeld) ? s.bytesHeld : 0,
    backend: s.backend as WidgetBackend | null,
    message: s.message,
    code: s.code,
  };
}

/** What the card accepts from the frame; null for anything else. */
export function parseFrameMessage(data: unknown): FrameMessage | null {
  const f = envelope(data);
  if (!f) return null;
  if (f.type === 'ready' || f.type === 'joined') return { type: f.type };
  if (f.type !== 'state') return null;
  const state = parseState(f.state);
  return state ? { type: 'state', state } : null;
}

/** What the frame accepts from the card; null for anything else. */
export function parseCardMessage(data: unknown): CardMessage | null {
  const f = envelope(data);
  if (!f) return null;
  switch (f.type) {
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

export const THEMES = ['light', 'dark', 'auto'] as const;
export type Theme = (typeof THEMES)[number];

/** What the frame needs before its consent button shows: whose page frames it, what is lent, how it looks. */
export interface EmbedParams {
  /** The host page's origin: the only one the frame listens to and posts to. */
  host: string;
  /** The model ('' = whichever the hub needs most). */
  model: string;
  budgetMiB: number;
  theme: Theme;
}

/** The frame's URL on the hub, `HUB/embed?host=…&model=…&budget=…&theme=…`. */
export function embedUrl(hub: string, p: EmbedParams): string {
  const url = new URL('/embed', hub);
  url.search = new URLSearchParams({ host: p.host, model: p.model, budget: String(p.budgetMiB), theme: p.theme }).toString();
  return url.toString();
}

/**
 * The frame's parameters from its own URL's query; null without a valid `host`. A bad model, budget or theme falls
 * back to its default (any model, BUDGET_LIMITS_MIB.initial, auto): the card sends only valid ones.
 */
export function parseEmbedParams(search: string): EmbedParams | null {
  const q = new URLSearchParams(search);
  const host = exactOrigin(q.get('host'));
  if (!host) return null;
  const model = q.get('model') ?? '';
  const budget = q.get('budget') ?? '';
  const budgetMiB = /^\d{1,5}$/.test(budget) ? Number(budget) : Number.NaN;
  const theme = q.get('theme');
  return {
    host,
    model: isModelName(model) ? model : '',
    budgetMiB: isBudgetMiB(budgetMiB) ? budgetMiB : BUDGET_LIMITS_MIB.initial,
    theme: isOneOf(THEMES, theme) ? theme : 'auto',
  };
}
