/**
 * The frame's report to the card: the volunteer client's state and numbers (volunteer/state.ts) cut down to what the
 * card shows. Nothing else leaves the frame: no token, no wallet, no slice digest, no device details.
 */
import type { VolunteerState, VolunteerStats } from '../../../volunteer/state.ts';
import { LIMITS, type WidgetState } from '../widget/messages.ts';

const clip = (text: string): string => (text.length > LIMITS.message ? `${text.slice(0, LIMITS.message - 1)}…` : text);

export function toWidgetState(s: VolunteerState, stats: VolunteerStats): WidgetState {
  const held = stats.slices.filter((x) => x.state === 'serving');
  const out: WidgetState = {
    phase: s.kind,
    progress: null,
    pairsServed: stats.pairsServed,
    slicesHeld: held.length,
    bytesHeld: held.reduce((n, x) => n + x.bytes, 0),
    backend: null,
    message: '',
    code: '',
  };
  switch (s.kind) {
    case 'downloading':
      out.progress = s.totalBytes > 0 ? Math.floor((100 * Math.min(Math.max(s.loadedBytes, 0), s.totalBytes)) / s.totalBytes) : null;
      break;
    case 'serving':
      out.backend = s.backend;
      break;
    case 'retrying':
    case 'released':
      out.message = clip(s.reason);
      break;
    case 'failed':
      out.message = clip(s.message);
      out.code = /^[A-Z0-9_]+$/.test(s.code) ? s.code.slice(0, LIMITS.code) : '';
      break;
  }
  return out;
}
