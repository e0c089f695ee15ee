/**
 * The join widget's frame (`/embed`, loaded by /widget.js in a sandboxed iframe on a host page): the real volunteer
 * client, on the hub's origin, driven by the card through web/src/widget/messages.ts.
 *
 * Trust: the card's origin comes from this page's URL (`?host=`, set by the loader) and must be an origin and nothing
 * more; messages count only when they come from `window.parent` with exactly that origin, and this page posts to
 * that origin only. It dials nothing before the card's `join` (the visitor's consent), and reports the state through
 * widget-state.ts, which carries nothing secret.
 */
import type { VolunteerControls } from '../../../volunteer/state.ts';
import { createClient } from '../volunteer/client-factory.ts';
import { BUDGET_LIMITS_MIB, type CardMessage, exactOrigin, type FrameMessage, frameMessage, parseCardMessage } from '../widget/messages.ts';
import { toWidgetState } from './widget-state.ts';

const MIB = 1024 * 1024;

const status = document.getElementById('frame-status');
const show = (text: string): void => {
  if (status) status.textContent = text;
};

function run(host: string): void {
  const post = (m: FrameMessage): void => window.parent.postMessage(frameMessage(m), host);
  let budgetMiB: number = BUDGET_LIMITS_MIB.initial;
  let model = '';
  let wantPaused = false;
  let client: VolunteerControls | null = null;

  const onCard = (m: CardMessage): void => {
    switch (m.type) {
      case 'config':
        if (!client || client.state.kind === 'idle' || client.state.kind === 'left') ({ budgetMiB, model } = m);
        return;
      case 'join':
        if (!client) {
          const c = createClient(window.location.origin, { model });
          const report = (): void => {
            const s = toWidgetState(c.state, c.stats);
            show(`Volunteer: ${s.phase}`);
            post({ type: 'state', state: s });
          };
          c.on('state', report);
          c.on('stats', report);
          client = c;
        }
        client.join({ memoryBudgetBytes: budgetMiB * MIB });
        // The client takes a pause only once joined; one asked for before the consent applies now.
        if (wantPaused) client.pause();
        return;
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

  window.addEventListener('message', (e) => {
    if (e.source !== window.parent || e.origin !== host) return;
    const m = parseCardMessage(e.data);
    if (m) onCard(m);
  });
  show('Waiting for the card on the host page.');
  post({ type: 'ready' });
}

/**
 * The origin the loader named, if this page is framed by a page of that origin; Chromium's `ancestorOrigins` lets the
 * frame check the loader's word (other browsers rely on the origin check of every message).
 */
function hostOrigin(): string | null {
  if (window.parent === window) return null;
  const host = exactOrigin(new URLSearchParams(window.location.search).get('host'));
  const parent = window.location.ancestorOrigins?.[0];
  if (host && parent && parent !== 'null' && parent !== host) return null;
  return host;
}

const host = hostOrigin();
if (host) run(host);
else show('This page runs inside the Expertswarm join widget (/widget.js) on another site; open / to volunteer here.');
