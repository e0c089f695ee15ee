/**
 * The join widget's pure parts, no browser: the card⇄frame protocol (web/src/widget/messages.ts) with a table of
 * malformed messages that both parsers must drop (a `join` among them: consent is a click in the frame), the frame's
 * URL parameters, the `data-*` options (options.ts), the card's wording and buttons
 * per state (card-text.ts), and the frame's report (embed/widget-state.ts), which must carry nothing secret. The
 * widget itself runs in headless Chromium in test/integration/widget.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type PauseReason, describeCard } from '../../web/src/widget/card-text.ts';
import {
  cardMessage,
  type EmbedParams,
  embedUrl,
  exactOrigin,
  frameMessage,
  LIMITS,
  PHASES,
  parseCardMessage,
  parseEmbedParams,
  parseFrameMessage,
  WIDGET_NS,
  WIDGET_PROTOCOL_VERSION,
  type WidgetState,
} from '../../web/src/widget/messages.ts';
import { DEFAULT_OPTIONS, parseBudgetMiB, parseWidgetOptions } from '../../web/src/widget/options.ts';
import { toWidgetState } from '../../web/src/embed/widget-state.ts';
import { emptyStats, type SliceAssignment } from '../../volunteer/state.ts';

const STATE: WidgetState = {
  phase: 'serving',
  progress: null,
  pairsServed: 12,
  slicesHeld: 0,
  bytesHeld: 0,
  backend: 'wasm',
  message: '',
  code: '',
};
const tag = { ns: WIDGET_NS, v: WIDGET_PROTOCOL_VERSION };

test('every message survives its own round trip through structured data', () => {
  for (const m of [{ type: 'ready' }, { type: 'state', state: STATE }] as const) {
    assert.deepEqual(parseFrameMessage(structuredClone(frameMessage(m))), m);
  }
  assert.deepEqual(parseFrameMessage(structuredClone(frameMessage({ type: 'joined' }))), { type: 'joined' });
  for (const m of [{ type: 'pause' }, { type: 'resume' }, { type: 'leave' }] as const) {
    assert.deepEqual(parseCardMessage(structuredClone(cardMessage(m))), m);
  }
  for (const phase of PHASES) assert.ok(parseFrameMessage(frameMessage({ type: 'state', state: { ...STATE, phase } })));
});

test('unknown extra fields are dropped, never copied', () => {
  const m = parseFrameMessage({ ...tag, type: 'state', state: { ...STATE, token: 'secret' }, extra: 1 });
  assert.deepEqual(m, { type: 'state', state: STATE });
  assert.deepEqual(parseCardMessage({ ...tag, type: 'pause', token: 'x' }), { type: 'pause' });
});

test('the frame parser drops anything malformed', () => {
  const bad: [string, unknown][] = [
    ['null', null],
    ['a string', 'state'],
    ['an array', [tag]],
    ['no namespace', { v: 1, type: 'ready' }],
    ['another namespace', { ns: 'other', v: 1, type: 'ready' }],
    ['another version', { ...tag, v: 3, type: 'ready' }],
    ['version as text', { ...tag, v: '1', type: 'ready' }],
    ['unknown type', { ...tag, type: 'hello' }],
    ['a card message', { ...tag, type: 'pause' }],
    ['version 1', { ns: WIDGET_NS, v: 1, type: 'ready' }],
    ['state missing', { ...tag, type: 'state' }],
    ['unknown phase', { ...tag, type: 'state', state: { ...STATE, phase: 'mining' } }],
    ['progress over 100', { ...tag, type: 'state', state: { ...STATE, progress: 101 } }],
    ['progress fractional', { ...tag, type: 'state', state: { ...STATE, progress: 1.5 } }],
    ['progress as text', { ...tag, type: 'state', state: { ...STATE, progress: '40' } }],
    ['negative pairs', { ...tag, type: 'state', state: { ...STATE, pairsServed: -1 } }],
    ['pairs NaN', { ...tag, type: 'state', state: { ...STATE, pairsServed: Number.NaN } }],
    ['pairs Infinity', { ...tag, type: 'state', state: { ...STATE, pairsServed: Number.POSITIVE_INFINITY } }],
    ['unknown backend', { ...tag, type: 'state', state: { ...STATE, backend: 'cuda' } }],
    ['message too long', { ...tag, type: 'state', state: { ...STATE, message: 'x'.repeat(LIMITS.message + 1) } }],
    ['message not text', { ...tag, type: 'state', state: { ...STATE, message: { html: '<b>' } } }],
    ['code in lower case', { ...tag, type: 'state', state: { ...STATE, code: 'no_backend' } }],
    ['code too long', { ...tag, type: 'state', state: { ...STATE, code: 'A'.repeat(LIMITS.code + 1) } }],
  ];
  for (const [why, data] of bad) assert.equal(parseFrameMessage(data), null, why);
});

test('the card parser drops anything malformed', () => {
  const bad: [string, unknown][] = [
    ['undefined', undefined],
    ['a number', 7],
    ['another version', { ...tag, v: 0, type: 'pause' }],
    ['version 1', { ns: WIDGET_NS, v: 1, type: 'pause' }],
    ['a frame message', { ...tag, type: 'ready' }],
    ['type not text', { ...tag, type: ['pause'] }],
    // Consent is the visitor's click in the frame: no message from the host page can give it (version 1 had these).
    ['join', { ...tag, type: 'join' }],
    ['join, version 1', { ns: WIDGET_NS, v: 1, type: 'join' }],
    ['config', { ...tag, type: 'config', budgetMiB: 512, model: '' }],
  ];
  for (const [why, data] of bad) assert.equal(parseCardMessage(data), null, why);
});

test("the frame's URL: what is lent and the theme travel with the host's origin, and bad values fall back", () => {
  const p: EmbedParams = { host: 'https://site.example', model: 'qwen3-moe:30b', budgetMiB: 256, theme: 'dark' };
  const url = new URL(embedUrl('https://hub.example:8443', p));
  assert.equal(url.origin + url.pathname, 'https://hub.example:8443/embed');
  assert.deepEqual(parseEmbedParams(url.search), p);
  const host = 'host=https%3A%2F%2Fsite.example';
  assert.deepEqual(parseEmbedParams(`?${host}`), { host: 'https://site.example', model: '', budgetMiB: 512, theme: 'auto' });
  const fallbacks: [string, Partial<EmbedParams>][] = [
    ['model=a%20b', { model: '' }],
    [`model=${'m'.repeat(LIMITS.model + 1)}`, { model: '' }],
    ['budget=63', { budgetMiB: 512 }],
    ['budget=8193', { budgetMiB: 512 }],
    ['budget=512.5', { budgetMiB: 512 }],
    ['budget=1e3', { budgetMiB: 512 }],
    ['budget=', { budgetMiB: 512 }],
    ['budget=64', { budgetMiB: 64 }],
    ['theme=pink', { theme: 'auto' }],
    ['theme=light', { theme: 'light' }],
  ];
  for (const [q, want] of fallbacks) {
    assert.deepEqual(
      parseEmbedParams(`?${host}&${q}`),
      { host: 'https://site.example', model: '', budgetMiB: 512, theme: 'auto', ...want },
      q,
    );
  }
  for (const bad of ['', '?host=', '?host=null', '?host=https%3A%2F%2Fsite.example%2Fpath', '?host=javascript%3Aalert(1)', '?model=m']) {
    assert.equal(parseEmbedParams(bad), null, bad);
  }
});

test('exactOrigin takes an http(s) origin and nothing more', () => {
  for (const ok of ['https://example.com', 'http://127.0.0.1:8080', 'https://xn--bcher-kva.example']) assert.equal(exactOrigin(ok), ok);
  for (const bad of [
    null,
    '',
    'null',
    'example.com',
    'https://example.com/',
    'https://example.com/path',
    'https://example.com?x',
    'https://user@example.com',
    'HTTPS://EXAMPLE.COM',
    'javascript:alert(1)',
    'file:///etc',
    'data:text/html,x',
    'ftp://example.com',
  ]) {
    assert.equal(exactOrigin(bad), null, String(bad));
  }
});

test('options: defaults, every spelling, and warnings for what cannot be read', () => {
  const src = 'https://hub.example:8443/widget.js?v=1';
  const plain = parseWidgetOptions(src, {});
  assert.deepEqual(plain, { options: { hub: 'https://hub.example:8443', ...DEFAULT_OPTIONS }, warnings: [] });
  assert.deepEqual(DEFAULT_OPTIONS, { model: '', budgetMiB: 512, theme: 'auto', pauseOnHidden: true, pauseOnBattery: true });

  const set = parseWidgetOptions(src, { model: ' qwen3 ', budget: '1GB', theme: 'Dark', pauseOnHidden: 'false', pauseOnBattery: 'off' });
  assert.deepEqual(set.options, {
    hub: 'https://hub.example:8443',
    model: 'qwen3',
    budgetMiB: 1024,
    theme: 'dark',
    pauseOnHidden: false,
    pauseOnBattery: false,
  });
  assert.deepEqual(set.warnings, []);
  for (const on of ['', 'true', 'yes', 'TRUE'])
    assert.equal(parseWidgetOptions(src, { pauseOnHidden: on }).options?.pauseOnHidden, true, on);
  for (const off of ['false', 'FALSE', '0', 'no', ' off '])
    assert.equal(parseWidgetOptions(src, { pauseOnBattery: off }).options?.pauseOnBattery, false, off);

  const typos = parseWidgetOptions(src, { model: 'a b', budget: 'lots', theme: 'pink' });
  assert.deepEqual(typos.options, { hub: 'https://hub.example:8443', ...DEFAULT_OPTIONS });
  assert.equal(typos.warnings.length, 3);

  for (const bad of ['file:///widget.js', 'data:text/javascript,1', 'not a url']) assert.equal(parseWidgetOptions(bad, {}).options, null);
});

test('budgets: units, MiB by default, held to the limits', () => {
  const table: [string, number | null][] = [
    ['512', 512],
    ['512MB', 512],
    ['512 MiB', 512],
    ['1.5GB', 1536],
    ['2 GiB', 2048],
    ['1g', 1024],
    ['32', 64],
    ['65536KB', 64],
    ['100GB', 8192],
    ['', null],
    ['-5MB', null],
    ['5 TB', null],
    ['MB', null],
    ['1e3', null],
  ];
  for (const [text, mib] of table) assert.equal(parseBudgetMiB(text), mib, JSON.stringify(text));
});

test('the card: consent first, the state line per phase, pause reasons, and the buttons', () => {
  const none = new Set<PauseReason>();
  const idle = describeCard({ ...STATE, phase: 'idle', backend: null }, { joined: false, paused: none });
  assert.match(idle.line, /Nothing is downloaded until you agree/);
  assert.deepEqual([idle.consent, idle.pause, idle.resume, idle.leave], [true, false, false, false], "the frame's consent button only");

  const j = { joined: true, paused: none };
  assert.equal(
    describeCard({ ...STATE, phase: 'waiting', backend: null }, j).line,
    'Waiting: the hub sends a slice of work when it needs help.',
  );
  const dl = describeCard({ ...STATE, phase: 'downloading', backend: null, progress: 40 }, j);
  assert.equal(dl.line, 'Downloading a slice of the model: 40%');
  assert.equal(dl.announce, 'Downloading a slice of the model', 'no running number in the live region');
  assert.equal(dl.progress, 40);
  assert.equal(describeCard({ ...STATE, phase: 'downloading', backend: null, progress: null }, j).progress, 'indeterminate');
  const serving = describeCard(STATE, j);
  assert.equal(serving.line, 'Serving with WebAssembly');
  const holding = describeCard({ ...STATE, slicesHeld: 4, bytesHeld: 4 * 3_342_336 }, j);
  assert.equal(holding.line, 'Serving with WebAssembly · 4 slices of the model, 13 MiB', 'the card says how much it holds');
  assert.equal(holding.announce, 'Serving with WebAssembly', 'what screen readers hear has no numbers');
  assert.equal(
    describeCard({ ...STATE, slicesHeld: 1, bytesHeld: 3_342_336 }, j).line,
    'Serving with WebAssembly · one slice of the model, 3.2 MiB',
  );
  assert.deepEqual([serving.consent, serving.pause, serving.resume, serving.leave], [false, true, false, true]);
  assert.equal(describeCard({ ...STATE, backend: 'webgpu' }, j).line, 'Serving with WebGPU');
  assert.match(
    describeCard({ ...STATE, phase: 'failed', message: 'the slice does not fit this device', code: 'SLICE_DOES_NOT_FIT' }, j).line,
    /^Stopped: the slice does not fit/,
  );

  const reasons: [PauseReason[], RegExp][] = [
    [['user'], /^Paused\. Nothing is computed until you resume\.$/],
    [['hidden'], /tab is hidden/],
    [['battery'], /on battery/],
    [['hidden', 'battery'], /on battery/],
    [['user', 'battery'], /until you resume/],
  ];
  for (const [r, line] of reasons) {
    const v = describeCard(STATE, { joined: true, paused: new Set(r) });
    assert.match(v.line, line, r.join('+'));
    assert.deepEqual([v.pause, v.resume, v.leave], [false, true, true], r.join('+'));
  }
  const left = describeCard({ ...STATE, phase: 'left' }, { joined: false, paused: none });
  assert.match(left.line, /You left/);
  assert.equal(left.consent, true);
});

test("the frame's report: phase, percent, pairs and backend, nothing secret", () => {
  const slice: SliceAssignment = { model: 'm', layer: 1, experts: [0, 8], bytes: 1000, digest: 'sha256:secret-ish' };
  const stats = { ...emptyStats(), pairsServed: 7, credit: 99 };
  const dl = toWidgetState({ kind: 'downloading', slice, loadedBytes: 333, totalBytes: 1000, fromCache: false }, stats);
  assert.deepEqual(dl, {
    phase: 'downloading',
    progress: 33,
    pairsServed: 7,
    slicesHeld: 0,
    bytesHeld: 0,
    backend: null,
    message: '',
    code: '',
  });
  assert.equal(toWidgetState({ kind: 'downloading', slice, loadedBytes: 5, totalBytes: 0, fromCache: false }, stats).progress, null);
  assert.deepEqual(toWidgetState({ kind: 'serving', slice, backend: 'webgpu' }, stats), {
    ...dl,
    phase: 'serving',
    progress: null,
    backend: 'webgpu',
  });
  // what it holds: the slices serving, not one still loading
  const held = (state: 'serving' | 'loading', layer: number) => ({
    ...slice,
    layer,
    state,
    backend: null,
    pairsServed: 0,
    credit: 0,
    memoryBytes: 0,
    fromPeers: 0,
    fromHub: 0,
  });
  const many = toWidgetState(
    { kind: 'serving', slice, backend: 'wasm' },
    { ...stats, slices: [held('serving', 0), held('serving', 1), held('loading', 2)] },
  );
  assert.deepEqual([many.slicesHeld, many.bytesHeld], [2, 2000]);
  const failed = toWidgetState({ kind: 'failed', code: 'NO_BACKEND', message: 'x'.repeat(1000), retrying: false }, stats);
  assert.equal(failed.code, 'NO_BACKEND');
  assert.equal(failed.message.length, LIMITS.message);
  for (const s of [dl, failed, many]) {
    assert.ok(parseFrameMessage(frameMessage({ type: 'state', state: s })), 'the report passes the card’s parser');
    assert.doesNotMatch(JSON.stringify(s), /secret|digest|credit|wallet|token/);
  }
});
