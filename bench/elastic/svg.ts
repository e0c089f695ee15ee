/**
 * The scenario's timeline as a small hand-written SVG: four stacked panels over one time axis (seconds since the load
 * began), saturated ticks shaded in every panel, and each worker's recruit (▲), first serve (●) and release (▼) marked.
 * A chart library is not worth it for a few polylines; the SVG is readable as text and diffable.
 *
 *   writeFileSync('timeline.svg', timelineSvg(timeline, loadStartMs));
 */
import type { Timeline, TimelineTick } from './timeline.ts';

interface Series {
  label: string;
  color: string;
  value: (t: TimelineTick) => number | null;
}

interface Panel {
  title: string;
  series: Series[];
}

const W = 960;
const LEFT = 56;
const RIGHT = 150;
const PANEL_H = 120;
const GAP = 34;
const TOP = 40;

const PANELS: Panel[] = [
  {
    title: 'load and slots',
    series: [
      { label: 'streams (load)', color: '#888888', value: (t) => t.load.lanes },
      { label: 'busy slots', color: '#d62728', value: (t) => t.busy },
      { label: 'effective target', color: '#1f77b4', value: (t) => t.effectiveTarget },
    ],
  },
  {
    title: 'workers',
    series: [
      { label: 'serving (grace+proven)', color: '#2ca02c', value: (t) => t.workers.grace + t.workers.proven },
      { label: 'loading', color: '#ff7f0e', value: (t) => t.workers.loading },
      { label: 'volunteers waiting', color: '#9467bd', value: (t) => t.volunteers.waiting ?? 0 },
    ],
  },
  {
    title: 'dispatched pairs/s',
    series: [
      { label: 'served', color: '#2ca02c', value: (t) => t.pairsPerS.served },
      { label: 'fallback', color: '#d62728', value: (t) => t.pairsPerS.fallback },
      { label: 'late', color: '#ff7f0e', value: (t) => t.pairsPerS.late },
    ],
  },
  { title: 'tokens/s (coordinator)', series: [{ label: 'tokens/s', color: '#1f77b4', value: (t) => t.tokensPerS }] },
];

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const fmt = (n: number): string => (Number.isInteger(n) ? String(n) : n.toFixed(Math.abs(n) >= 10 ? 1 : 2));

/** A "nice" upper bound for an axis (1, 2, 5 × 10^k), at least 1. */
function niceMax(v: number): number {
  if (!(v > 1)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

export function timelineSvg(tl: Timeline, originMs: number, title = `elastic scenario: ${tl.model}`): string {
  const ticks = tl.ticks.filter((t) => t.t >= originMs - 2000);
  const t1 = Math.max(originMs + 1000, ...ticks.map((t) => t.t));
  const t0 = Math.min(originMs, ...ticks.map((t) => t.t));
  const x = (ms: number): number => LEFT + ((ms - t0) / (t1 - t0)) * (W - LEFT - RIGHT);
  const H = TOP + PANELS.length * (PANEL_H + GAP) + 20;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="#ffffff"/>`,
    `<text x="${LEFT}" y="18" font-size="14" font-weight="bold">${esc(title)}</text>`,
    `<text x="${LEFT}" y="32" fill="#555">shaded: saturated (recruiting); ▲ recruit, ● first serve, ▼ release; time in s since the load began</text>`,
  ];
  // Saturated spans: consecutive recruiting ticks.
  const spans: Array<[number, number]> = [];
  for (let i = 0; i < ticks.length; i++) {
    const t = ticks[i] as TimelineTick;
    if (!t.recruiting) continue;
    const end = (ticks[i + 1] as TimelineTick | undefined)?.t ?? t.t;
    const last = spans.at(-1);
    if (last && last[1] >= t.t) last[1] = end;
    else spans.push([t.t, end]);
  }
  const marks = eventMarks(tl);
  PANELS.forEach((panel, p) => {
    const y0 = TOP + p * (PANEL_H + GAP) + 16;
    const yMax = niceMax(Math.max(0, ...panel.series.flatMap((s) => ticks.map((t) => s.value(t) ?? 0))));
    const y = (v: number): number => y0 + PANEL_H - (v / yMax) * PANEL_H;
    out.push(`<text x="${LEFT}" y="${y0 - 4}" font-weight="bold">${esc(panel.title)}</text>`);
    for (const [a, b] of spans) {
      out.push(
        `<rect x="${x(a).toFixed(1)}" y="${y0}" width="${Math.max(1, x(b) - x(a)).toFixed(1)}" height="${PANEL_H}" fill="#fde9c8"/>`,
      );
    }
    out.push(`<rect x="${LEFT}" y="${y0}" width="${W - LEFT - RIGHT}" height="${PANEL_H}" fill="none" stroke="#999"/>`);
    out.push(`<text x="${LEFT - 4}" y="${y0 + 4}" text-anchor="end">${fmt(yMax)}</text>`);
    out.push(`<text x="${LEFT - 4}" y="${y0 + PANEL_H}" text-anchor="end">0</text>`);
    panel.series.forEach((s, k) => {
      const pts: string[] = [];
      for (const t of ticks) {
        const v = s.value(t);
        if (v !== null) pts.push(`${x(t.t).toFixed(1)},${y(v).toFixed(1)}`);
      }
      if (pts.length > 0) out.push(`<polyline fill="none" stroke="${s.color}" stroke-width="1.6" points="${pts.join(' ')}"/>`);
      const ly = y0 + 12 + k * 14;
      out.push(`<line x1="${W - RIGHT + 8}" y1="${ly - 4}" x2="${W - RIGHT + 22}" y2="${ly - 4}" stroke="${s.color}" stroke-width="2"/>`);
      out.push(`<text x="${W - RIGHT + 26}" y="${ly}">${esc(s.label)}</text>`);
    });
    if (p === 1) {
      for (const m of marks) {
        out.push(`<text x="${x(m.atMs).toFixed(1)}" y="${y0 + 10}" text-anchor="middle" fill="${m.color}">${m.glyph}</text>`);
      }
    }
  });
  // The time axis, under the last panel.
  const yAxis = TOP + PANELS.length * (PANEL_H + GAP) - GAP + 16 + 12;
  const span = (t1 - t0) / 1000;
  const step = span > 120 ? 20 : span > 60 ? 10 : 5;
  for (let s = Math.ceil((t0 - originMs) / 1000 / step) * step; originMs + s * 1000 <= t1; s += step) {
    out.push(`<text x="${x(originMs + s * 1000).toFixed(1)}" y="${yAxis}" text-anchor="middle">${s}</text>`);
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

function eventMarks(tl: Timeline): Array<{ atMs: number; glyph: string; color: string }> {
  const out: Array<{ atMs: number; glyph: string; color: string }> = [];
  for (const e of tl.events) {
    if (e.model !== tl.model) continue;
    if (e.kind === 'recruit') out.push({ atMs: e.atMs, glyph: '▲', color: '#ff7f0e' });
    if (e.kind === 'release') out.push({ atMs: e.atMs, glyph: '▼', color: '#9467bd' });
  }
  for (const w of Object.values(tl.workers)) if (w.firstServeMs !== null) out.push({ atMs: w.firstServeMs, glyph: '●', color: '#2ca02c' });
  return out;
}
