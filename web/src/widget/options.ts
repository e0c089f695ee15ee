/**
 * The widget's `data-*` options, read from its own `<script>` tag: pure functions over the tag's `src` and dataset,
 * so every default and every spelling is unit-tested without a browser (test/unit/widget-messages.test.ts).
 *
 *   <script src="https://hub.example/widget.js" data-model="qwen3-moe" data-budget="1GB" data-theme="dark"
 *           data-pause-on-hidden="false" async></script>
 *
 * A value the widget cannot read falls back to its default and is listed in `warnings` (the loader logs them once):
 * a typo on a host page never breaks the card.
 */
import { BUDGET_LIMITS_MIB, isModelName, type Theme } from './messages.ts';

export type { Theme };

export interface WidgetOptions {
  /** The hub: the origin `widget.js` was loaded from. The frame, its messages and the volunteer use it and nothing else. */
  hub: string;
  /** The model the visitor helps ('' = whichever the hub needs most). */
  model: string;
  /** The memory the visitor lends, MiB. */
  budgetMiB: number;
  theme: Theme;
  /** Pause while the host page's tab is hidden. */
  pauseOnHidden: boolean;
  /** Pause while the device runs on battery (where the browser says so). */
  pauseOnBattery: boolean;
}

export const DEFAULT_OPTIONS = {
  model: '',
  budgetMiB: BUDGET_LIMITS_MIB.initial,
  theme: 'auto',
  pauseOnHidden: true,
  pauseOnBattery: true,
} as const satisfies Omit<WidgetOptions, 'hub'>;

const UNITS_MIB: Record<string, number> = {
  '': 1,
  k: 1 / 1024,
  kb: 1 / 1024,
  kib: 1 / 1024,
  m: 1,
  mb: 1,
  mib: 1,
  g: 1024,
  gb: 1024,
  gib: 1024,
};

/**
 * "512MB", "512 MiB", "1.5GB", "512" (MiB) → whole MiB within the budget limits; null if unreadable. MB and GB are
 * read as MiB and GiB: this is a memory budget, not a disk size.
 */
export function parseBudgetMiB(text: string): number | null {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = UNITS_MIB[(m?.[2] ?? '').toLowerCase()];
  if (!m || unit === undefined) return null;
  const mib = Math.round(Number(m[1]) * unit);
  return Math.min(BUDGET_LIMITS_MIB.max, Math.max(BUDGET_LIMITS_MIB.min, mib));
}

/** "false", "off", "no", "0" turn a switch off; absent or anything else leaves it on. */
function parseSwitch(value: string | undefined): boolean {
  return !/^\s*(false|off|no|0)\s*$/i.test(value ?? '');
}

/** The hub's origin from the script's own URL, or null for a URL that is not http(s). */
export function hubOrigin(scriptSrc: string): string | null {
  try {
    const u = new URL(scriptSrc);
    return u.protocol === 'https:' || u.protocol === 'http:' ? u.origin : null;
  } catch {
    return null;
  }
}

export function parseWidgetOptions(
  scriptSrc: string,
  data: Readonly<Record<string, string | undefined>>,
): { options: WidgetOptions | null; warnings: string[] } {
  const warnings: string[] = [];
  const hub = hubOrigin(scriptSrc);
  if (!hub) return { options: null, warnings: [`cannot tell the hub from the script's src "${scriptSrc}"`] };
  const options: WidgetOptions = { hub, ...DEFAULT_OPTIONS };
  if (data.model !== undefined) {
    const model = data.model.trim();
    if (isModelName(model)) options.model = model;
    else warnings.push(`data-model "${data.model}" is not a model name; any model`);
  }
  if (data.budget !== undefined) {
    const mib = parseBudgetMiB(data.budget);
    if (mib === null) warnings.push(`data-budget "${data.budget}" is not a size like "512MB"; ${options.budgetMiB} MiB`);
    else options.budgetMiB = mib;
  }
  if (data.theme !== undefined) {
    const theme = data.theme.trim().toLowerCase();
    if (theme === 'light' || theme === 'dark' || theme === 'auto') options.theme = theme;
    else warnings.push(`data-theme "${data.theme}" is not light, dark or auto; auto`);
  }
  options.pauseOnHidden = parseSwitch(data.pauseOnHidden);
  options.pauseOnBattery = parseSwitch(data.pauseOnBattery);
  return { options, warnings };
}
