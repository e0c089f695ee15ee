/**
 * The coordinator's account of its dispatched layers (linkcpp-server with LINKCPP_EXPERT_DISPATCH_STATS_MS set: a line
 * `expert-dispatch: stats t_us=… exchanges=… …` at most that often, every figure summed since it started;
 * coordinator/README.md). bench:elastic takes the line nearest each round's start and end and prints the difference as
 * shares of the round: how long B's coordinator spent writing REQUESTs and reading CLAIMs, computing its own part of
 * the claimed layers, and waiting for their RESULTs — the idle time that overlap (issue 24, item 4) could fill.
 */

export interface CoordinatorStats {
  /** The coordinator's monotonic clock when it wrote the line, µs. */
  tUs: number;
  exchanges: number;
  /** Exchanges whose CLAIM took pairs, their pairs, the pairs claimed and those served in time. */
  claimed: number;
  pairs: number;
  pairsClaimed: number;
  pairsServed: number;
  /** REQUEST built and written, its CLAIM read. */
  exchangeUs: number;
  /** The first pass (its own pairs) of the claimed layers. */
  localUs: number;
  /** First pass done → the RESULT read (or given up). */
  waitUs: number;
  /** v3: REQUESTs that pre-claimed under a standing offer (no CLAIM read), and layers an offer left local (no REQUEST). */
  preclaimed: number;
  offerLocal: number;
  /** Waits past the coordinator's target (150 µs): how many, and their sum. */
  waitsLong: number;
  waitLongUs: number;
  /**
   * Σ max(0, wait − the claimed pairs' own local time): the most the coordinator would have saved by computing the
   * claimed pairs itself instead of waiting for them.
   */
  waitPastLocalUs: number;
}

const FIELDS: Array<[string, keyof CoordinatorStats]> = [
  ['t_us', 'tUs'],
  ['exchanges', 'exchanges'],
  ['claimed', 'claimed'],
  ['pairs', 'pairs'],
  ['pairs_claimed', 'pairsClaimed'],
  ['pairs_served', 'pairsServed'],
  ['exchange_us', 'exchangeUs'],
  ['local_us', 'localUs'],
  ['wait_us', 'waitUs'],
  ['preclaimed', 'preclaimed'],
  ['offer_local', 'offerLocal'],
  ['waits_long', 'waitsLong'],
  ['wait_long_us', 'waitLongUs'],
  ['wait_past_local_us', 'waitPastLocalUs'],
];

/** One stats line's figures; undefined when the line is not one or a field is missing. Pure. */
export function parseCoordinatorStats(line: string): CoordinatorStats | undefined {
  const at = line.indexOf('expert-dispatch: stats ');
  if (at < 0) return undefined;
  const kv = new Map<string, number>();
  for (const m of line.slice(at).matchAll(/([a-z_]+)=(\d+)/g)) kv.set(m[1] as string, Number(m[2]));
  const out = {} as CoordinatorStats;
  for (const [wire, key] of FIELDS) {
    const v = kv.get(wire);
    if (v === undefined) return undefined;
    out[key] = v;
  }
  return out;
}

/** b − a, field by field (a round's figures from the lines around it). Pure. */
export function statsDelta(a: CoordinatorStats, b: CoordinatorStats): CoordinatorStats {
  const out = {} as CoordinatorStats;
  for (const [, key] of FIELDS) out[key] = b[key] - a[key];
  return out;
}

/** a + b, field by field (rounds' figures summed). Pure. */
export function sumStats(a: CoordinatorStats, b: CoordinatorStats): CoordinatorStats {
  const out = {} as CoordinatorStats;
  for (const [, key] of FIELDS) out[key] = a[key] + b[key];
  return out;
}

/**
 * A round's coordinator split as one line: the three times as shares of `spanUs` (the round's wall time: the lines'
 * own clock spans from the line before the round, which may be long before it when the coordinator sat idle). Pure.
 */
export function describeStats(d: CoordinatorStats, spanUs: number): string {
  if (spanUs <= 0 || d.exchanges === 0) return 'no exchange';
  const pct = (us: number) => `${((100 * us) / spanUs).toFixed(1)} %`;
  const per = (us: number, n: number) => (n > 0 ? `${(us / n / 1000).toFixed(2)} ms` : '—');
  return [
    `${d.exchanges} exchanges, ${d.claimed} claimed (${d.preclaimed} pre-claimed; ${d.pairsClaimed} of their ${d.pairs} pairs, ${d.pairsServed} served; ${d.offerLocal} left local by an offer)`,
    `exchange ${pct(d.exchangeUs)} (${per(d.exchangeUs, d.exchanges)} each)`,
    `own part of claimed layers ${pct(d.localUs)} (${per(d.localUs, d.claimed)})`,
    `waiting for RESULTs ${pct(d.waitUs)} (${per(d.waitUs, d.claimed)}; past 150 µs in ${d.waitsLong} of ${d.claimed}, ${per(d.waitLongUs, d.waitsLong)} each; past the claimed pairs' own local time ${pct(d.waitPastLocalUs)})`,
    `of ${(spanUs / 1e6).toFixed(1)} s`,
  ].join('; ');
}
