/**
 * `/widget.js`: the join widget's loader, one classic script that any site embeds with
 *
 *   <script src="https://HUB/widget.js" data-model="NAME" async></script>
 *
 * It renders the "Lend your GPU" card as an `<expertswarm-widget>` element right after its own tag, in a closed
 * shadow root styled through adoptedStyleSheets (constructed stylesheets, which a strict CSP without
 * 'unsafe-inline' still applies). Only after the visitor consents does it load the hub's `/embed` page in a sandboxed
 * iframe; the volunteer runs there, on the hub's origin, out of the host page's reach, and the card and the frame
 * talk through messages.ts only. Options: options.ts; wording: card-text.ts; docs/widget.md for site owners.
 *
 * Plain DOM, no framework: the build fails if this file grows past 15 KB gzipped (web/widget.vite.config.ts).
 */
import { type CardView, describeCard, type PauseReason } from './card-text.ts';
import { type CardMessage, cardMessage, parseFrameMessage, type WidgetState } from './messages.ts';
import { parseWidgetOptions, type WidgetOptions } from './options.ts';

const TAG = 'expertswarm-widget';

const IDLE: WidgetState = { phase: 'idle', progress: null, pairsServed: 0, backend: null, message: '', code: '' };

/** After Leave, the frame is removed when it says `left`, or after this long if it never does. */
const LEAVE_GRACE_MS = 5_000;
/** A frame that has not said `ready` by then did not load (hub down, pages not built, blocked by a policy). */
const READY_TIMEOUT_MS = 30_000;

const CSS = `
:host{all:initial;display:block;max-width:26rem;margin:1rem 0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
.card{--bg:#fff;--fg:#1b1b1f;--muted:#44464f;--line:#74777f;--accent:#0b57d0;--on-accent:#fff;--focus:#0b57d0;position:relative;
background:var(--bg);color:var(--fg);border:1px solid var(--line);border-radius:12px;padding:1rem 1.1rem}
.card.dark{--bg:#1b1b1f;--fg:#e4e2e6;--muted:#c5c6d0;--line:#8e9099;--accent:#a8c7fa;--on-accent:#062e6f;--focus:#a8c7fa}
@media (prefers-color-scheme:dark){.card.auto{--bg:#1b1b1f;--fg:#e4e2e6;--muted:#c5c6d0;--line:#8e9099;--accent:#a8c7fa;--on-accent:#062e6f;--focus:#a8c7fa}}
h2{margin:0 0 .4rem;font-size:1.15rem;line-height:1.3}
p{margin:.4rem 0}
.about,.by{color:var(--muted);font-size:.9rem}
.state{font-weight:600}
.pairs{font-variant-numeric:tabular-nums}
progress{width:100%;height:.6rem;accent-color:var(--accent)}
.actions{display:flex;flex-wrap:wrap;gap:.5rem;margin-top:.7rem}
button{font:inherit;font-weight:600;min-height:2.5rem;padding:.35rem 1rem;border-radius:999px;cursor:pointer;
border:2px solid var(--accent);background:transparent;color:var(--fg)}
button.primary{background:var(--accent);color:var(--on-accent)}
button:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
[hidden]{display:none!important}
.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip-path:inset(50%);white-space:nowrap}
iframe{position:absolute;left:0;bottom:0;width:1px;height:1px;border:0;opacity:0;pointer-events:none}
`;

let sheet: CSSStyleSheet | undefined;

function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, text = ''): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

class ExpertswarmWidget extends HTMLElement {
  #options: WidgetOptions | null = null;
  #root: ShadowRoot;
  #state: WidgetState = IDLE;
  #joined = false;
  readonly #paused = new Set<PauseReason>();
  #frame: HTMLIFrameElement | null = null;
  #frameReady = false;
  #leaveTimer: ReturnType<typeof setTimeout> | undefined;
  #ui: {
    card: HTMLElement;
    line: HTMLElement;
    live: HTMLElement;
    bar: HTMLProgressElement;
    pairs: HTMLElement;
    count: HTMLElement;
    buttons: Record<'join' | 'pause' | 'resume' | 'leave', HTMLButtonElement>;
  } | null = null;

  constructor() {
    super();
    // Closed: the host page's scripts get no handle on the card's DOM. (The iframe is the security boundary, not this.)
    this.#root = this.attachShadow({ mode: 'closed' });
  }

  /** Called once by the loader with the options of its script tag. */
  start(options: WidgetOptions): void {
    if (this.#options) return;
    this.#options = options;
    this.#render();
    window.addEventListener('message', (e) => this.#onMessage(e));
    if (options.pauseOnHidden) {
      const check = (): void => this.#auto('hidden', document.visibilityState === 'hidden');
      document.addEventListener('visibilitychange', check);
      check();
    }
    if (options.pauseOnBattery) void this.#watchBattery();
  }

  // --- the card

  #render(): void {
    const o = this.#options as WidgetOptions;
    sheet ??= new CSSStyleSheet();
    if (!sheet.cssRules.length) sheet.replaceSync(CSS);
    this.#root.adoptedStyleSheets = [sheet];
    const card = el('section', { class: `card ${o.theme}`, role: 'region', 'aria-labelledby': 'es-title' });
    const what = o.model ? `the AI model “${o.model}”` : 'an AI model';
    const line = el('p', { class: 'state', id: 'es-state' });
    const live = el('p', { class: 'sr', role: 'status', 'aria-live': 'polite' });
    const bar = el('progress', { max: '100', 'aria-labelledby': 'es-state', hidden: '' });
    const pairs = el('p', { class: 'pairs', hidden: '' }, 'Pairs served: ');
    const count = el('strong', {}, '0');
    pairs.append(count);
    const button = (name: string, primary = false): HTMLButtonElement =>
      el('button', { type: 'button', class: primary ? 'primary' : '' }, name);
    const buttons = { join: button('Lend my GPU', true), pause: button('Pause'), resume: button('Resume', true), leave: button('Leave') };
    buttons.join.addEventListener('click', () => this.#consent());
    buttons.pause.addEventListener('click', () => this.#setPause('user', true));
    buttons.resume.addEventListener('click', () => this.#resumeAll());
    buttons.leave.addEventListener('click', () => this.#leave());
    const actions = el('div', { class: 'actions' });
    actions.append(buttons.join, buttons.pause, buttons.resume, buttons.leave);
    card.append(
      el('h2', { id: 'es-title' }, 'Lend your GPU'),
      el(
        'p',
        { class: 'about' },
        `Help serve ${what} with Expertswarm. While this page is open, your browser downloads a slice of the model (up to ${o.budgetMiB} MiB) and computes parts of answers with your graphics card. It uses GPU time, memory, bandwidth and battery. Nothing is installed; it stops when you press Leave or close the page.`,
      ),
      line,
      bar,
      pairs,
      live,
      actions,
      el('p', { class: 'by' }, `Runs in a sandboxed frame from ${new URL(o.hub).host}.`),
    );
    this.#root.replaceChildren(card);
    this.#ui = { card, line, live, bar, pairs, count, buttons };
    this.#update();
  }

  #update(): void {
    const ui = this.#ui;
    if (!ui) return;
    const v: CardView = describeCard(this.#state, { joined: this.#joined, paused: this.#paused });
    const focused = this.#root.activeElement;
    ui.card.dataset.phase = this.#joined && this.#paused.size > 0 ? 'paused' : this.#state.phase;
    ui.line.textContent = v.line;
    if (ui.live.textContent !== v.announce) ui.live.textContent = v.announce;
    ui.bar.hidden = v.progress === null;
    if (typeof v.progress === 'number') ui.bar.value = v.progress;
    else ui.bar.removeAttribute('value');
    ui.pairs.hidden = !this.#joined && this.#state.pairsServed === 0;
    ui.count.textContent = this.#state.pairsServed.toLocaleString('en-US');
    for (const k of ['join', 'pause', 'resume', 'leave'] as const) ui.buttons[k].hidden = !v[k];
    // A button that vanished under the keyboard hands focus to the first one left, so focus is never lost.
    if (focused instanceof HTMLButtonElement && focused.hidden)
      Object.values(ui.buttons)
        .find((b) => !b.hidden)
        ?.focus();
  }

  // --- the visitor's actions and the automatic pauses

  #consent(): void {
    const o = this.#options as WidgetOptions;
    this.#joined = true;
    this.#paused.delete('user');
    this.#state = { ...IDLE, pairsServed: this.#state.pairsServed };
    clearTimeout(this.#leaveTimer);
    this.#removeFrame();
    const url = new URL('/embed', o.hub);
    url.searchParams.set('host', window.location.origin);
    const frame = el('iframe', {
      src: url.toString(),
      title: 'Expertswarm volunteer (controlled by the card above)',
      // The card is the interface; the frame shows nothing anyone needs to reach.
      'aria-hidden': 'true',
      tabindex: '-1',
      // allow-scripts: the volunteer is a script. allow-same-origin: it keeps the hub's origin, so it can call the
      // hub's API and WebSocket as a same-origin page and keep its key and cached slices in the hub's storage.
      // Together they are safe only because the frame is cross-origin to this page: it cannot reach this
      // document, nor this document it. Nothing else: no top navigation, popups, forms, modals or downloads.
      sandbox: 'allow-scripts allow-same-origin',
      referrerpolicy: 'no-referrer',
      loading: 'eager',
    });
    this.#frame = frame;
    this.#frameReady = false;
    this.#root.querySelector('section')?.append(frame);
    setTimeout(() => {
      if (this.#frame !== frame || this.#frameReady) return;
      this.#state = { ...this.#state, phase: 'failed', message: `${new URL(o.hub).host} did not answer; try again later` };
      this.#update();
    }, READY_TIMEOUT_MS);
    this.#update();
  }

  #leave(): void {
    this.#joined = false;
    this.#post({ type: 'leave' });
    this.#update();
    // The frame stays until it confirms (the client closes its channel politely), then goes with everything in it.
    this.#leaveTimer = setTimeout(() => this.#removeFrame(), LEAVE_GRACE_MS);
  }

  #setPause(reason: PauseReason, on: boolean): void {
    const before = this.#paused.size > 0;
    if (on) this.#paused.add(reason);
    else this.#paused.delete(reason);
    const after = this.#paused.size > 0;
    if (before !== after) this.#post({ type: after ? 'pause' : 'resume' });
    this.#update();
  }

  /** Resume clears every reason: the visitor may choose to go on while on battery. */
  #resumeAll(): void {
    const was = this.#paused.size > 0;
    this.#paused.clear();
    if (was) this.#post({ type: 'resume' });
    this.#update();
  }

  #auto(reason: 'hidden' | 'battery', on: boolean): void {
    if (on !== this.#paused.has(reason)) this.#setPause(reason, on);
  }

  async #watchBattery(): Promise<void> {
    const nav = navigator as Navigator & { getBattery?: () => Promise<EventTarget & { charging: boolean }> };
    if (typeof nav.getBattery !== 'function') return;
    try {
      const battery = await nav.getBattery();
      const check = (): void => this.#auto('battery', battery.charging === false);
      battery.addEventListener('chargingchange', check);
      check();
    } catch {
      // No battery reading (a permissions policy, an old browser): nothing to pause for.
    }
  }

  // --- the frame

  #post(m: CardMessage): void {
    const w = this.#frame?.contentWindow;
    if (w && this.#frameReady) w.postMessage(cardMessage(m), (this.#options as WidgetOptions).hub);
  }

  #onMessage(e: MessageEvent): void {
    const frame = this.#frame;
    // Only our own frame, on the hub's origin: another frame, the host page or an extension is ignored.
    if (!frame || e.source !== frame.contentWindow || e.origin !== this.#options?.hub) return;
    const m = parseFrameMessage(e.data);
    if (!m) return;
    if (m.type === 'ready') {
      this.#frameReady = true;
      const o = this.#options as WidgetOptions;
      if (!this.#joined) return;
      this.#post({ type: 'config', budgetMiB: o.budgetMiB, model: o.model });
      this.#post({ type: 'join' });
      if (this.#paused.size > 0) this.#post({ type: 'pause' });
      return;
    }
    this.#state = m.state;
    if (m.state.phase === 'left' && !this.#joined) {
      clearTimeout(this.#leaveTimer);
      this.#removeFrame();
    }
    this.#update();
  }

  #removeFrame(): void {
    this.#frame?.remove();
    this.#frame = null;
    this.#frameReady = false;
  }
}

/** The loader proper: runs once per `<script>` tag that includes it. */
function main(): void {
  const script = document.currentScript as HTMLScriptElement | null;
  if (!script?.src) {
    console.error('[expertswarm widget] cannot find its own <script> tag (load it with a plain <script src>, not as a module)');
    return;
  }
  const { options, warnings } = parseWidgetOptions(script.src, script.dataset);
  for (const w of warnings) console.warn(`[expertswarm widget] ${w}`);
  if (!options) return;
  if (!customElements.get(TAG)) customElements.define(TAG, ExpertswarmWidget);
  const widget = document.createElement(TAG) as ExpertswarmWidget;
  // After its own tag, where the site owner put it; a tag in <head> puts the card at the end of <body>.
  const place = (): void => {
    if (script.parentElement && script.parentElement !== document.head) script.after(widget);
    else document.body.append(widget);
    widget.start(options);
  };
  if (script.parentElement === document.head && !document.body) document.addEventListener('DOMContentLoaded', place, { once: true });
  else place();
}

main();
