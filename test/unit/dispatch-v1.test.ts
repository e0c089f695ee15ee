import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HEADER_BYTES, decodeHeader, decodeResponse } from '../../protocol/dispatch.ts';
import { planRequest, type PlanWorker } from '../../hub/dispatch/plan.ts';
import { auditWithheld, dropUnusable, encodeV1Answer, encodeV1Local, withholdAudited } from '../../hub/dispatch/v1.ts';

const worker = (begin: number, end: number): PlanWorker => ({ begin, end, queueMs: 0, overheadMs: 1, perPairMs: 0.1 });

// 3 tokens × 2 used; A holds [0,4), B [4,8), C [8,12). Token 0 → A, B; token 1 → A, C; token 2 → B, C.
const nTokens = 3;
const nUsed = 2;
const nEmbd = 2;
const req = { nTokens, nUsed, ids: Int32Array.from([1, 5, 2, 9, 6, 10]), probs: Float32Array.from([0.5, 0.5, 0.25, 0.75, 0.125, 0.875]) };
const plan = planRequest(req, [worker(0, 4), worker(4, 8), worker(8, 12)]);
const ids = ['a', 'b', 'c'];
const answer = (i: number): Float32Array => Float32Array.from({ length: (plan.workers[i]?.nRows ?? 0) * nEmbd }, (_, k) => 10 * i + k);
const answers = (): Array<Float32Array | null> => plan.workers.map((_, i) => answer(i));

test('v1 dropUnusable: the answers of workers that may not be used are not summed', () => {
  const cases: Array<{ name: string; mayUse: ((id: string) => boolean) | undefined; kept: boolean[] }> = [
    { name: 'no trust policy keeps all', mayUse: undefined, kept: [true, true, true] },
    { name: 'everyone trusted', mayUse: () => true, kept: [true, true, true] },
    { name: 'b on probation', mayUse: (id) => id !== 'b', kept: [true, false, true] },
    { name: 'nobody trusted', mayUse: () => false, kept: [false, false, false] },
  ];
  for (const c of cases) {
    const partials = answers();
    dropUnusable(partials, ids, c.mayUse);
    assert.deepEqual(
      partials.map((p) => p !== null),
      c.kept,
      c.name,
    );
  }
  const partials: Array<Float32Array | null> = [null, answer(1), null];
  dropUnusable(partials, ids, () => false);
  assert.deepEqual(partials, [null, null, null], 'a missing answer stays missing');
});

test('v1 withholdAudited: which answers are withheld, their flags, and what waits for AUDIT', () => {
  type Case = { name: string; picked: number[] | null; answered: boolean[]; taken: number[] };
  const cases: Case[] = [
    { name: 'no chooser', picked: null, answered: [true, true, true], taken: [] },
    { name: 'chooser picks nothing', picked: [], answered: [true, true, true], taken: [] },
    { name: 'one item', picked: [1], answered: [true, true, true], taken: [1] },
    {
      name: 'a row shared with an item taken earlier is skipped (a and b share token 0)',
      picked: [0, 1],
      answered: [true, true, true],
      taken: [0],
    },
    { name: 'an item that did not answer is not withheld', picked: [2, 0], answered: [true, true, false], taken: [0] },
    { name: 'nothing answered: no audit at all', picked: [0], answered: [false, false, false], taken: [] },
    { name: 'indices out of range and repeats are ignored', picked: [7, 2, 2, -1], answered: [true, true, true], taken: [2] },
  ];
  for (const c of cases) {
    const partials = answers().map((p, i) => (c.answered[i] ? p : null));
    const before = [...partials];
    let asked: readonly boolean[] | null = null;
    const chooser =
      c.picked === null
        ? undefined
        : (ctx: { answered: readonly boolean[]; workerIds: readonly string[] }) => {
            asked = ctx.answered;
            assert.deepEqual(ctx.workerIds, ids);
            return c.picked;
          };
    const w = withholdAudited({ seq: 9, layer: 4, plan, workerIds: ids, partials, nTokens, nUsed }, chooser);
    if (c.taken.length === 0) {
      assert.equal(w, null, c.name);
      assert.deepEqual(partials, before, `${c.name}: nothing taken out`);
      continue;
    }
    assert.ok(w, c.name);
    assert.deepEqual(asked, c.answered, `${c.name}: the chooser sees who answered`);
    assert.deepEqual(
      w.awaiting.items.map((it) => it.workerId),
      c.taken.map((i) => ids[i]),
      c.name,
    );
    assert.equal(w.awaiting.seq, 9);
    assert.equal(w.awaiting.layer, 4);
    let pairs = 0;
    const mask = new Uint8Array(nTokens * nUsed);
    for (const [j, i] of c.taken.entries()) {
      const wp = plan.workers[i];
      assert.ok(wp);
      pairs += wp.nPairs;
      for (const p of wp.pairIndex) mask[p] = 1;
      assert.equal(partials[i], null, `${c.name}: item ${i} is not served`);
      assert.equal(w.awaiting.items[j]?.partial, before[i], `${c.name}: item ${i}'s answer waits for AUDIT`);
    }
    assert.equal(w.pairs, pairs, c.name);
    assert.deepEqual(w.mask, mask, c.name);
  }
});

test('v1 answers: RESPONSE served or local, with the audit flags, as the coordinator decodes it', () => {
  const head = { seq: 5, layer: 3, nTokens, nUsed, quietMs: 0 };
  const decode = (bytes: Uint8Array) => decodeResponse(decodeHeader(bytes.subarray(0, HEADER_BYTES)), bytes.subarray(HEADER_BYTES), nEmbd);
  const served = Uint8Array.from([1, 1, 0, 0, 0, 0]);
  const sums = Float32Array.from({ length: nTokens * nEmbd }, (_, i) => i / 4);
  const audit = Uint8Array.from([0, 0, 1, 1, 0, 0]);

  const s = decode(encodeV1Answer(head, audit, 2, served, sums));
  assert.equal(s.mode, 'served');
  assert.deepEqual(s.mode === 'served' ? [...s.served] : null, [...served]);
  assert.deepEqual(s.mode === 'served' ? [...s.sums] : null, [...sums]);
  assert.deepEqual(s.audit ? [...s.audit] : null, [...audit]);

  const l = decode(encodeV1Answer(head, audit, 0, new Uint8Array(6), sums));
  assert.equal(l.mode, 'local', 'nothing served is a local answer, the audit flags still there');
  assert.deepEqual(l.audit ? [...l.audit] : null, [...audit]);

  const q = decode(encodeV1Local({ ...head, quietMs: 250 }));
  assert.equal(q.mode, 'local');
  assert.equal(q.quietMs, 250);
  assert.equal(q.audit, undefined);
});

test('v1 auditWithheld: each withheld answer against the coordinator sums, in order', () => {
  const w = withholdAudited({ seq: 2, layer: 1, plan, workerIds: ids, partials: answers(), nTokens, nUsed }, () => [2]);
  assert.ok(w);
  const it = w.awaiting.items[0];
  assert.ok(it);
  // The coordinator's sums equal the worker's on its rows: NMSE 0; then one value off.
  const trusted = new Float32Array(nTokens * nEmbd);
  for (let r = 0; r < it.nRows; r++)
    for (let k = 0; k < nEmbd; k++) trusted[(it.rowToken[r] as number) * nEmbd + k] = it.partial[r * nEmbd + k] as number;
  const results = auditWithheld(w.awaiting, trusted, nEmbd);
  assert.equal(results.length, 1);
  assert.equal(results[0]?.[0], 'c');
  assert.deepEqual({ ...results[0]?.[1] }, { layer: 1, seq: 2, rows: it.nRows, pairs: it.nPairs, nmse: 0 });
  const at = (it.rowToken[0] as number) * nEmbd;
  trusted[at] = (trusted[at] as number) + 1;
  const off = auditWithheld(w.awaiting, trusted, nEmbd)[0]?.[1];
  assert.ok(off && off.nmse > 0, `a different answer has NMSE > 0: ${off?.nmse}`);
});
