/**
 * The coverage heatmap's arithmetic, pure: cell colour from replicas against the target, the grid's layout for a
 * width (cells never under MIN_CELL px: the canvas scrolls sideways instead), the cell under a pointer, the readout
 * and the summary sentence. Drawing is Heatmap.svelte's.
 */

/** A cell is never smaller than this (48 layers × 256 experts stays legible; a narrow screen scrolls). */
export const MIN_CELL = 2;
/** Nor larger: an 8-expert model should not turn into a wall of bricks. */
export const MAX_CELL_W = 28;
export const MAX_CELL_H = 18;
/** Room for the axis labels: layer numbers on the left, expert numbers along the top. */
export const AXIS_LEFT = 34;
export const AXIS_TOP = 18;

/**
 * Colour stops by replicas/target: none (red), below target (amber, lighter as it nears the target), at target
 * (green), above it (a darker green). Lightness differs at each stop, so the scale also reads without hue.
 */
export const HEAT = {
  none: '#c62828',
  low: '#e8a317',
  high: '#f5d77a',
  met: '#2e9b57',
  surplus: '#155e32',
} as const;

function mix(a: string, b: string, t: number): string {
  const pa = Number.parseInt(a.slice(1), 16);
  const pb = Number.parseInt(b.slice(1), 16);
  const ch = (p: number, sh: number): number => (p >> sh) & 255;
  const c = (sh: number): number => Math.round(ch(pa, sh) + (ch(pb, sh) - ch(pa, sh)) * t);
  return `#${((c(16) << 16) | (c(8) << 8) | c(0)).toString(16).padStart(6, '0')}`;
}

/** A cell's colour. A target of 0 (nothing wanted) counts every cell as met. */
export function cellColor(replicas: number, target: number): string {
  if (target <= 0) return replicas > 0 ? HEAT.surplus : HEAT.met;
  if (replicas <= 0) return HEAT.none;
  if (replicas < target) return mix(HEAT.low, HEAT.high, (replicas - 1) / Math.max(1, target - 2));
  return replicas === target ? HEAT.met : HEAT.surplus;
}

export interface HeatLayout {
  cellW: number;
  cellH: number;
  width: number;
  height: number;
}

/** The grid for `rows × cols` cells in `availWidth` px (cells ≥ MIN_CELL; the result may be wider than asked). */
export function heatLayout(rows: number, cols: number, availWidth: number): HeatLayout {
  const cellW = Math.max(MIN_CELL, Math.min(MAX_CELL_W, Math.floor((availWidth - AXIS_LEFT) / Math.max(1, cols))));
  // Tall enough to point at a layer; a 48-layer model stays within about 300 px.
  const cellH = Math.max(MIN_CELL + 2, Math.min(MAX_CELL_H, Math.floor(300 / Math.max(1, rows))));
  return { cellW, cellH, width: AXIS_LEFT + cols * cellW, height: AXIS_TOP + rows * cellH };
}

/** The cell (row = index into moeLayers, col = expert) under a point in canvas px, or null outside the grid. */
export function cellAt(layout: HeatLayout, rows: number, cols: number, x: number, y: number): { row: number; col: number } | null {
  const col = Math.floor((x - AXIS_LEFT) / layout.cellW);
  const row = Math.floor((y - AXIS_TOP) / layout.cellH);
  if (x < AXIS_LEFT || y < AXIS_TOP || row < 0 || col < 0 || row >= rows || col >= cols) return null;
  return { row, col };
}

/** Every `step`th expert is labelled along the top: about one label per 40 px. */
export function labelStep(cols: number, cellW: number): number {
  const want = Math.max(1, Math.ceil(40 / cellW));
  for (const s of [1, 2, 4, 8, 16, 32, 64, 128, 256]) if (s >= want) return Math.min(s, Math.max(1, cols));
  return cols;
}

/** Arrow keys move the keyboard cursor within the grid; Home/End go to a row's ends; null for any other key. */
export function moveCursor(
  cur: { row: number; col: number },
  key: string,
  rows: number,
  cols: number,
  page = 16,
): { row: number; col: number } | null {
  const clamp = (v: number, n: number): number => Math.max(0, Math.min(n - 1, v));
  switch (key) {
    case 'ArrowLeft':
      return { row: cur.row, col: clamp(cur.col - 1, cols) };
    case 'ArrowRight':
      return { row: cur.row, col: clamp(cur.col + 1, cols) };
    case 'ArrowUp':
      return { row: clamp(cur.row - 1, rows), col: cur.col };
    case 'ArrowDown':
      return { row: clamp(cur.row + 1, rows), col: cur.col };
    case 'PageUp':
      return { row: cur.row, col: clamp(cur.col - page, cols) };
    case 'PageDown':
      return { row: cur.row, col: clamp(cur.col + page, cols) };
    case 'Home':
      return { row: cur.row, col: 0 };
    case 'End':
      return { row: cur.row, col: cols - 1 };
    default:
      return null;
  }
}

export interface CoverageSummary {
  cells: number;
  under: number;
  uncovered: number;
}

export function summarise(replicas: Uint8Array, target: number): CoverageSummary {
  let under = 0;
  let uncovered = 0;
  for (const r of replicas) {
    if (r < target) under++;
    if (r === 0) uncovered++;
  }
  return { cells: replicas.length, under, uncovered };
}

/** "37 of 12288 experts under target (5 with no replica); target 2" */
export function summarySentence(s: CoverageSummary, target: number): string {
  const none = s.uncovered > 0 ? ` (${s.uncovered} with no replica)` : '';
  return `${s.under} of ${s.cells} experts under target${none}; target ${target}`;
}

/** The readout of one cell: "layer 12, expert 200: 1 of 2 replicas". */
export function cellReadout(layer: number, expert: number, replicas: number, target: number): string {
  const capped = replicas >= 255 ? '255+' : String(replicas);
  return `layer ${layer}, expert ${expert}: ${capped} of ${target} replica${target === 1 ? '' : 's'}`;
}
