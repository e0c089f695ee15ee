import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';

// `ws` masks every client frame and unmasks every frame a client sends with `bufferutil` when it loads, else with a
// byte loop in JavaScript: 36 µs for a 32 KB result frame on this project's 2-vCPU machine against 0.9 µs native, on
// each side of every result (docs/dispatch-bench.md). bufferutil falls back to its own JavaScript when its prebuilt
// addon does not load, silently; this test makes that a failure.
const require = createRequire(import.meta.url);
type Masker = { unmask: (buffer: Buffer, mask: Buffer) => void };

test('bufferutil loads its native addon (not its JavaScript fallback) and masks as the RFC says', () => {
  const native = require('bufferutil') as Masker;
  const fallback = require('bufferutil/fallback') as Masker;
  assert.notEqual(native.unmask, fallback.unmask, 'bufferutil fell back to JavaScript: its prebuilt addon did not load');
  const data = Buffer.alloc(4099);
  for (let i = 0; i < data.length; i++) data[i] = (i * 31 + 7) & 0xff;
  const key = Buffer.from([0x12, 0x34, 0x56, 0x78]);
  const copy = Buffer.from(data);
  native.unmask(copy, key);
  for (let i = 0; i < data.length; i++) assert.equal(copy[i], (data[i] as number) ^ (key[i & 3] as number), `byte ${i}`);
});

test('ws resolves bufferutil from its own directory (where it looks for it)', () => {
  const wsRequire = createRequire(require.resolve('ws'));
  assert.doesNotThrow(() => wsRequire.resolve('bufferutil'), 'ws cannot resolve bufferutil');
});
