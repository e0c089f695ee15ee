import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { test } from 'node:test';
import { RateLimiter } from '../../hub/auth/rate-limit.ts';
import { type UpgradeGate, admitUpgrade } from '../../hub/channel/upgrade.ts';
import { HubError } from '../../hub/errors.ts';

const req = (origin?: string): IncomingMessage =>
  ({ headers: { host: 'hub.example:8080', ...(origin ? { origin } : {}) } }) as IncomingMessage;

/** The code a refusal carries, or 'admitted'. */
function verdict(r: IncomingMessage, key: string, gate: UpgradeGate, nowMs = 0): string {
  try {
    admitUpgrade(r, key, gate, nowMs);
    return 'admitted';
  } catch (e) {
    assert.ok(e instanceof HubError, `a HubError, got ${e}`);
    return `${e.code}: ${e.message}`;
  }
}

test('admitUpgrade: the checks both WebSocket endpoints make before the 101, cheapest first (table)', () => {
  const gate = (o: Partial<UpgradeGate> = {}): UpgradeGate => ({
    noun: 'relays',
    allowedOrigins: new Set(['https://ok.example']),
    perAddress: new Map([['1.2.3.4', 2]]),
    maxPerAddress: 2,
    opens: new RateLimiter({ capacity: 10, refillPerSec: 1 }),
    ...o,
  });
  const rows: Array<[string, IncomingMessage, string, UpgradeGate, RegExp]> = [
    ['no Origin (a native client), room left', req(), '5.6.7.8', gate(), /^admitted$/],
    ['same origin', req('http://hub.example:8080'), '5.6.7.8', gate(), /^admitted$/],
    ['a listed origin', req('https://ok.example'), '5.6.7.8', gate(), /^admitted$/],
    ['another origin', req('https://evil.example'), '5.6.7.8', gate(), /^ORIGIN_FORBIDDEN/],
    ['an opaque origin', req('null'), '5.6.7.8', gate(), /^ORIGIN_FORBIDDEN/],
    ['the origin before the caps', req('https://evil.example'), '1.2.3.4', gate({ total: { open: 9, max: 9 } }), /^ORIGIN_FORBIDDEN/],
    [
      'the hub-wide cap',
      req(),
      '5.6.7.8',
      gate({ total: { open: 9, max: 9 } }),
      /^TOO_MANY_CONNECTIONS: the hub holds 9 relays, the most it may$/,
    ],
    ['below the hub-wide cap', req(), '5.6.7.8', gate({ total: { open: 8, max: 9 } }), /^admitted$/],
    ['the address holds its most', req(), '1.2.3.4', gate(), /^TOO_MANY_CONNECTIONS: this address has 2 relays open/],
    ["the noun is the endpoint's", req(), '1.2.3.4', gate({ noun: 'volunteer connections' }), /has 2 volunteer connections open/],
    ['no open left in the bucket', req(), '5.6.7.8', gate({ opens: new RateLimiter({ capacity: 1, refillPerSec: 0.001 }) }), /^admitted$/],
  ];
  for (const [name, r, key, g, want] of rows) assert.match(verdict(r, key, g), want, name);

  // The rate: each admitted upgrade takes an open; the next one waits, with Retry-After in whole seconds.
  const g = gate({ opens: new RateLimiter({ capacity: 1, refillPerSec: 0.5 }) });
  assert.equal(verdict(req(), '9.9.9.9', g), 'admitted');
  let refusal: HubError | null = null;
  try {
    admitUpgrade(req(), '9.9.9.9', g, 100);
  } catch (e) {
    refusal = e as HubError;
  }
  assert.equal(refusal?.code, 'RATE_LIMITED');
  assert.equal(refusal?.headers['Retry-After'], '2');
  assert.match(refusal?.message ?? '', /too many relays opened from this address; retry in 2 s/);
  assert.equal(verdict(req(), '9.9.9.9', g, 2_100), 'admitted', 'refilled after 2 s');
  // A refusal by a cap spends no open.
  const capped = gate({ opens: new RateLimiter({ capacity: 1, refillPerSec: 0.001 }), total: { open: 1, max: 1 } });
  assert.match(verdict(req(), '7.7.7.7', capped), /^TOO_MANY_CONNECTIONS/);
  assert.equal(verdict(req(), '7.7.7.7', { ...capped, total: { open: 0, max: 1 } }), 'admitted');
});
