/** Prometheus text exposition of the hub's gauges and counters. */
export interface MetricSample {
  name: string;
  help: string;
  type: 'gauge' | 'counter';
  values: Array<{ labels?: Record<string, string>; value: number }>;
}

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

export function renderPrometheus(samples: MetricSample[]): string {
  const out: string[] = [];
  for (const s of samples) {
    out.push(`# HELP ${s.name} ${s.help}`, `# TYPE ${s.name} ${s.type}`);
    for (const { labels, value } of s.values) {
      const l = labels && Object.keys(labels).length > 0
        ? `{${Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(',')}}`
        : '';
      out.push(`${s.name}${l} ${Number.isFinite(value) ? value : 'NaN'}`);
    }
  }
  return `${out.join('\n')}\n`;
}
