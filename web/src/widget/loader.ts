/**
 * `/widget.js`: the join widget's loader, one classic script that any site embeds with
 *
 *   <script src="https://HUB/widget.js" data-model="NAME" async></script>
 *
 * It renders the "Lend your GPU" card as an `<expertswarm-widget>` element right after its own tag, in a closed
 * shadow root styled through adoptedStyleSheets (constructed stylesheets, which a strict CSP without
 * 'unsafe-inline' still applies). The card explains, shows the state and offers Pause / Resume / Leave; the consent
 * button itself is the hub's `/embed` page in a sandboxed iframe inside the card, so only the visitor's own click in
 * the hub's document starts the volunteer (a host page cannot forge it). The frame dials nothing before that click;
 * the volunteer then runs there, on the hub's origin, out of the host page's reach, and the card and the frame talk
 * through messages.ts only. Options: options.ts; wording: card-text.ts; docs/widget.md for site owners.
 *
 * Plain DOM, no framework: the build fails if this file grows past 15 KB gzipped (web/widget.vite.config.ts).
 */
import { type CardView, describeCard, type PauseReason } from './card-text.ts';
import { type CardMessage, cardMessage, embedUrl, parseFrameMessage, type WidgetState } from './messages.ts';
import { parseWidgetOptions, type WidgetOptions } from './options.ts';

const TAG = 'expertswarm-widget';

const IDLE: WidgetState = {
  phase: 'idle',
  progress: null,
  pairsServed: 0,
  slicesHeld: 0,
  bytesHeld: 0,
  backend: null,
  message: '',
  code: '',
};

/** After Leave, the frame is replaced (by a fresh one that dials nothing) when it says `left`, or after this long. */
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
iframe{display:block;width:100%;height:54px;border:0;margin:0;color-scheme:light}
iframe.loading{visibility:hidden}
iframe.running{position:absolute;left:0;bottom:0;width:1px;height:1px;opacity:0;pointer-events:none}
iframe:focus-visible{outline:3px solid var(--focus);outline-offset:2px;border-radius:999px}
section:focus{outline:none}
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
  /** The visitor consented in the frame and has not left. */
  #joined = false;
  readonly #paused = new Set<PauseReason>();
  #frame: HTMLIFrameElement | null = null;
  #frameReady = false;
  /** The current frame took the visitor's consent (it stays, collapsed, until it is replaced after Leave). */
  #frameJoined = false;
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  /** Undoes what connectedCallback added to the window, the document and the battery. */
  readonly #unlisten: (() => void)[] = [];
  /** Counts connections, so a battery answer that arrives after a disconnection adds nothing. */
  #connections = 0;
  #ui: {
    card: HTMLElement;
    line: HTMLElement;
    live: HTMLElement;
    bar: HTMLProgressElement;
    pairs: HTMLElement;
    count: HTMLElement;
    actions: HTMLElement;
    buttons: Record<'pause' | 'resume' | 'leave', HTMLButtonElement>;
  } | null = null;

  constructor() {
    super();
    // Closed: the host page's scripts get no handle on the card's DOM. (The iframe is the security boundary, not this.)
    this.#root = this.attachShadow({ mode: 'closed' });
  }

  /** Called once by the loader with the options of its script tag, after the element is in the document. */
  start(options: WidgetOptions): void {
    if (this.#options) return;
    this.#options = options;
    this.#render();
    this.connectedCallback();
  }

  // Listeners live while the element is in the document: a single-page-app host that removes the card gets them all
  // back, and the frame (with the volunteer in it) goes with the element.
  connectedCallback(): void {
    const o = this.#options;
    if (!o || this.#unlisten.length) return;
    this.#connections++;
    const onMessage = (e: MessageEvent): void => this.#onMessage(e);
    window.addEventListener('message', onMessage);
    this.#unlisten.push(() => window.removeEventListener('message', onMessage));
    if (o.pauseOnHidden) {
      const check = (): void => this.#auto('hidden', document.visibilityState === 'hidden');
      document.addEventListener('visibilitychange', check);
      this.#unlisten.push(() => document.removeEventListener('visibilitychange', check));
      check();
    }
    if (o.pauseOnBattery) void this.#watchBattery();
    this.#newFrame();
  }

  disconnectedCallback(): void {
    this.#connections++;
    for (const undo of this.#unlisten.splice(0)) undo();
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    this.#removeFrame();
    this.#joined = false;
    this.#paused.clear();
    this.#state = IDLE;
    this.#update();
  }

  #later(ms: number, run: () => void): void {
    const t = setTimeout(() => {
      this.#timers.delete(t);
      run();
    }, ms);
    this.#timers.add(t);
  }

  // --- the card

  #render(): void {
    const o = this.#options as WidgetOptions;
    sheet ??= new CSSStyleSheet();
    if (!sheet.cssRules.length) sheet.replaceSync(CSS);
    this.#root.adoptedStyleSheets = [sheet];
    // tabindex -1: where focus goes when the button under it vanishes and nothing else in the card can take it.
    const card = el('section', { class: `card ${o.theme}`, role: 'region', 'aria-labelledby': 'es-title', tabindex: '-1' });
    const what = o.model ? `the AI model “${o.model}”` : 'an AI model';
    const line = el('p', { class: 'state', id: 'es-state' });
    const live = el('p', { class: 'sr', role: 'status', 'aria-live': 'polite' });
    const bar = el('progress', { max: '100', 'aria-labelledby': 'es-state', hidden: '' });
    const pairs = el('p', { class: 'pairs', hidden: '' }, 'Pairs served: ');
    const count = el('strong', {}, '0');
    pairs.append(count);
    const button = (name: string, primary = false): HTMLButtonElement =>
      el('button', { type: 'button', class: primary ? 'primary' : '' }, name);
    const buttons = { pause: button('Pause'), resume: button('Resume', true), leave: button('Leave') };
    buttons.pause.addEventListener('click', () => this.#setPause('user', true));
    buttons.resume.addEventListener('click', () => this.#resumeAll());
    buttons.leave.addEventListener('click', () => this.#leave());
    const actions = el('div', { class: 'actions' });
    actions.append(buttons.pause, buttons.resume, buttons.leave);
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
      el('p', { class: 'by' }, `The button “Lend my GPU” and the volunteer run in a sandboxed frame from ${new URL(o.hub).host}.`),
    );
    this.#root.replaceChildren(card);
    this.#ui = { card, line, live, bar, pairs, count, actions, buttons };
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
    for (const k of ['pause', 'resume', 'leave'] as const) ui.buttons[k].hidden = !v[k];
    const frame = this.#frame;
    if (frame) {
      // The frame shows its consent button only while the card offers consent; once the visitor has consented, it
      // folds away (it must stay: the volunteer runs in it) and leaves the keyboard to the card's buttons.
      const running = this.#frameJoined || !v.consent;
      frame.classList.toggle('running', running);
      frame.classList.toggle('loading', !running && !this.#frameReady);
      if (running) frame.setAttribute('tabindex', '-1');
      else frame.removeAttribute('tabindex');
      frame.toggleAttribute('aria-hidden', running);
    }
    // What had the keyboard and vanished (a card button, or the frame folding away) hands focus on, never losing it.
    if (focused && this.#gone(focused)) {
      const next = Object.values(ui.buttons).find((b) => !b.hidden);
      (next ?? ui.card).focus();
    }
  }

  #gone(e: Element): boolean {
    return (e instanceof HTMLButtonElement && e.hidden) || (e instanceof HTMLIFrameElement && e.classList.contains('running'));
  }

  // --- the visitor's actions and the automatic pauses

  #leave(): void {
    this.#joined = false;
    // The visitor's own pause ends with leaving; an automatic one still holds a later consent.
    this.#paused.delete('user');
    this.#post({ type: 'leave' });
    this.#update();
    // The frame stays until it confirms (the client closes its channel politely), then goes with everything in it.
    const frame = this.#frame;
    this.#later(LEAVE_GRACE_MS, () => {
      if (this.#frame === frame && !this.#joined) this.#newFrame();
    });
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
    const connection = this.#connections;
    try {
      const battery = await nav.getBattery();
      // Removed from the document (and maybe back) while the browser answered: this watch is over.
      if (connection !== this.#connections) return;
      const check = (): void => this.#auto('battery', battery.charging === false);
      battery.addEventListener('chargingchange', check);
      this.#unlisten.push(() => battery.removeEventListener('chargingchange', check));
      check();
    } catch {
      // No battery reading (a permissions policy, an old browser): nothing to pause for.
    }
  }

  // --- the frame

  /** A fresh frame: the hub's consent button. It loads the small /embed page and dials nothing until it is pressed. */
  #newFrame(): void {
    const o = this.#options as WidgetOptions;
    this.#removeFrame();
    const frame = el('iframe', {
      src: embedUrl(o.hub, { host: window.location.origin, model: o.model, budgetMiB: o.budgetMiB, theme: o.theme }),
      title: `Lend my GPU: the consent button, from ${new URL(o.hub).host}`,
      // allow-scripts: the volunteer is a script. allow-same-origin: it keeps the hub's origin, so it can call the
      // hub's API and WebSocket as a same-origin page and keep its key and cached slices in the hub's storage.
      // Together they are safe only because the frame is cross-origin to this page: it cannot reach this
      // document, nor this document it. Nothing else: no top navigation, popups, forms, modals or downloads.
      sandbox: 'allow-scripts allow-same-origin',
      referrerpolicy: 'no-referrer',
      loading: 'eager',
      class: 'loading',
    });
    this.#frame = frame;
    this.#ui?.actions.prepend(frame);
    this.#later(READY_TIMEOUT_MS, () => {
      if (this.#frame !== frame || this.#frameReady) return;
      this.#state = { ...IDLE, phase: 'failed', message: `${new URL(o.hub).host} did not answer; try again later` };
      this.#update();
    });
    this.#update();
  }

  #post(m: CardMessage): void {
    const w = this.#frame?.contentWindow;
    if (w && this.#frameReady) w.postMessage(cardMessage(m), (this.#options as WidgetOptions).hub);
  }

  #onMessage(e: MessageEvent): void {
    const frame = this.#frame;
    // Only our own frame, on the hub's origin: another frame (even one of the hub), the host page or an extension is
    // ignored.
    if (!frame || e.source !== frame.contentWindow || e.origin !== this.#options?.hub) return;
    const m = parseFrameMessage(e.data);
    if (!m) return;
    switch (m.type) {
      case 'ready':
        this.#frameReady = true;
        if (this.#state.phase === 'failed' && !this.#joined) this.#state = IDLE;
        // An automatic pause that already holds applies from the visitor's consent on.
        if (this.#paused.size > 0) this.#post({ type: 'pause' });
        break;
      case 'joined':
        // The visitor pressed the frame's own button: the one consent there is.
        this.#joined = true;
        this.#frameJoined = true;
        this.#state = { ...IDLE, pairsServed: this.#state.pairsServed };
        break;
      case 'state':
        this.#state = m.state;
        if (m.state.phase === 'left') {
          // Left (by the card's Leave): the frame goes with everything in it, and a fresh one offers consent again.
          this.#joined = false;
          this.#paused.delete('user');
          this.#newFrame();
          return;
        }
    }
    this.#update();
  }

  #removeFrame(): void {
    this.#frame?.remove();
    this.#frame = null;
    this.#frameReady = false;
    this.#frameJoined = false;
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
