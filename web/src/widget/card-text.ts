/**
 * What the card says and offers for each state the frame reports: pure functions, unit-tested without a browser
 * (test/unit/widget-messages.test.ts), bundled into the loader.
 *
 *   describeCard({ phase: 'downloading', progress: 40, ... }, { joined: true, paused: new Set() }).line;
 *   // "Downloading a slice of the model: 40%"
 */
import type { WidgetState } from './messages.ts';

/** Why the card holds the volunteer paused: the visitor's Pause, or one of the automatic pauses. */
export type PauseReason = 'user' | 'hidden' | 'battery';

export interface CardContext {
  /** The visitor consented (in the frame) and has not left. */
  joined: boolean;
  paused: ReadonlySet<PauseReason>;
}

export interface CardView {
  /** The visible state line (may carry a running percentage). */
  line: string;
  /** What screen readers hear on a change: no running numbers, so the live region speaks once per change. */
  announce: string;
  /** Which buttons show. `consent`: the frame's own "Lend my GPU" (it lives in the hub's frame, not the card). */
  consent: boolean;
  pause: boolean;
  resume: boolean;
  leave: boolean;
  /** The download bar: a percentage, 'indeterminate', or hidden (null). */
  progress: number | 'indeterminate' | null;
}

const BACKEND_NAMES = { webgpu: 'WebGPU', wasm: 'WebAssembly' } as const;

function pausedLine(paused: ReadonlySet<PauseReason>): string {
  if (paused.has('user')) return 'Paused. Nothing is computed until you resume.';
  if (paused.has('battery')) return 'Paused while this device runs on battery; it resumes when you plug in.';
  if (paused.has('hidden')) return 'Paused while this tab is hidden; it resumes when you come back.';
  return 'Paused.';
}

/** How much it holds, for the serving line: " · 4 slices of the model, 12.8 MiB" ('' before a frame says). */
export function heldText(s: Pick<WidgetState, 'slicesHeld' | 'bytesHeld'>): string {
  if (s.slicesHeld <= 0) return '';
  const mib = s.bytesHeld / 2 ** 20;
  const size = mib >= 10 ? `${Math.round(mib)} MiB` : `${mib.toFixed(1)} MiB`;
  return ` · ${s.slicesHeld === 1 ? 'one slice' : `${s.slicesHeld} slices`} of the model, ${size}`;
}

export function describeCard(s: WidgetState, ctx: CardContext): CardView {
  const line = (text: string, announce = text): Pick<CardView, 'line' | 'announce'> => ({ line: text, announce });
  const controls = { consent: false, pause: ctx.paused.size === 0, resume: ctx.paused.size > 0, leave: true, progress: null };
  if (!ctx.joined) {
    const left = s.phase === 'left';
    return {
      ...line(left ? 'You left: nothing is computed or downloaded. Thank you!' : 'Not lending. Nothing is downloaded until you agree.'),
      consent: true,
      pause: false,
      resume: false,
      leave: false,
      progress: null,
    };
  }
  // The card's own pause shows at once, before the frame confirms it.
  if (ctx.paused.size > 0 && s.phase !== 'failed') return { ...controls, ...line(pausedLine(ctx.paused)) };
  switch (s.phase) {
    case 'idle':
    case 'connecting':
      return { ...controls, ...line('Connecting to the hub…') };
    case 'retrying':
      return { ...controls, ...line(`Hub unreachable, retrying…${s.message ? ` (${s.message})` : ''}`, 'Hub unreachable, retrying') };
    case 'waiting':
      return { ...controls, ...line('Waiting: the hub sends a slice of work when it needs help.') };
    case 'downloading':
      return {
        ...controls,
        ...line(`Downloading a slice of the model${s.progress === null ? '…' : `: ${s.progress}%`}`, 'Downloading a slice of the model'),
        progress: s.progress ?? 'indeterminate',
      };
    case 'starting':
      return { ...controls, ...line('Starting the compute engine…') };
    case 'serving': {
      const serving = `Serving with ${s.backend ? BACKEND_NAMES[s.backend] : 'this device'}`;
      return { ...controls, ...line(`${serving}${heldText(s)}`, serving) };
    }
    case 'paused':
      return { ...controls, ...line(pausedLine(ctx.paused)) };
    case 'released':
      return { ...controls, ...line('The hub no longer needs this slice; waiting for demand again.') };
    case 'failed':
      return { ...controls, ...line(`Stopped: ${s.message || 'this device cannot help right now'}.`, 'Stopped') };
    case 'left':
      return { ...controls, ...line('Leaving…') };
  }
}
