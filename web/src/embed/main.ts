/**
 * The join widget's frame (`/embed`, made by /widget.js as a sandboxed iframe inside the card on a host page): the
 * visitor's consent button, then the real volunteer client, on the hub's origin, driven by the card through
 * web/src/widget/messages.ts.
 *
 * Consent is taken here, in the hub's own document: only a trusted click of the visitor on this page's button (not a
 * script's `click()`, not a message from the host page) creates the client and joins. Before it, this page dials
 * nothing: no API call, no WebSocket, no slice, no wasm. What is lent (model, budget) and the theme come from this
 * page's URL (parseEmbedParams), with the card's origin (`?host=`), which must be an origin and nothing more;
 * messages count only when they come from `window.parent` with exactly that origin, and this page posts to that
 * origin only. After consent the card may pause, resume and leave; it reports the state through widget-state.ts,
 * which carries nothing secret.
 */
import './embed.css';
import type { VolunteerControls } from '../../../volunteer/state.ts';
import { createClient } from '../volunteer/client-factory.ts';
import {
  type CardMessage,
  type EmbedParams,
  type FrameMessage,
  frameMessage,
  parseCardMessage,
  parseEmbedParams,
} from '../widget/messages.ts';
import { toWidgetState } from './widget-state.ts';

const MIB = 1024 * 1024;

const status = document.getElementById('frame-status');
const show = (text: string): void => {
  if (status) status.textContent = text;
};

/** The visitor's own activation: a real click or key press in this document, not one a script made up. */
function byTheVisitor(e: Event): boolean {
  return e.isTrusted && (navigator.userActivation === undefined || navigator.userActivation.isActive);
}

function run(p: EmbedParams): void {
  const post = (m: FrameMessage): void => window.parent.postMessage(frameMessage(m), p.host);
  let wantPaused = false;
  let client: VolunteerControls | null = null;

  const consent = (): void => {
    if (client) return;
    const c = createClient(window.location.origin, { model: p.model });
    client = c;
    const report = (): void => {
      const s = toWidgetState(c.state, c.stats);
      show(`Volunteer: ${s.phase}`);
      post({ type: 'state', state: s });
    };
    // The card learns of the consent before the first state, so it shows the running card from the start.
    post({ type: 'joined' });
    c.on('state', report);
    c.on('stats', report);
    // A frame on someone else's page passes its slice on to other volunteers gently (docs/peers.md): 1 MiB/s at most.
    c.join({ memoryBudgetBytes: p.budgetMiB * MIB, share: { share: true, uploadCapBytesPerSec: MIB } });
    // The client takes a pause only once joined; one the card asked for before the consent applies now.
    if (wantPaused) c.pause();
  };

  const onCard = (m: CardMessage): void => {
    switch (m.type) {
      case 'pause':
        wantPaused = true;
        client?.pause();
        return;
      case 'resume':
        wantPaused = false;
        client?.resume();
        return;
      case 'leave':
        wantPaused = false;
        void client?.leave();
        return;
    }
  };

  const form = document.querySelector<HTMLElement>('.consent');
  const button = document.getElementById('consent');
  const what = document.getElementById('consent-what');
  if (what) what.textContent = `Up to ${p.budgetMiB} MiB${p.model ? ` for “${p.model}”` : ''}, from ${window.location.host}`;
  button?.addEventListener('click', (e) => {
    if (!byTheVisitor(e) || client) return;
    if (form) form.hidden = true;
    consent();
  });

  window.addEventListener('message', (e) => {
    if (e.source !== window.parent || e.origin !== p.host) return;
    const m = parseCardMessage(e.data);
    if (m) onCard(m);
  });
  document.documentElement.classList.add('framed', p.theme);
  if (form) form.hidden = false;
  show('Waiting for the visitor to press Lend my GPU.');
  post({ type: 'ready' });
}

/**
 * The parameters the loader put in the URL, if this page is framed by a page of the origin they name; Chromium's
 * `ancestorOrigins` lets the frame check the loader's word (other browsers rely on the origin check of every message).
 */
function embedParams(): EmbedParams | null {
  if (window.parent === window) return null;
  const p = parseEmbedParams(window.location.search);
  const parent = window.location.ancestorOrigins?.[0];
  if (p && parent && parent !== 'null' && parent !== p.host) return null;
  return p;
}

const params = embedParams();
if (params) run(params);
else show('This page runs inside the Expertswarm join widget (/widget.js) on another site; open / to volunteer here.');
