/**
 * The Kvasir worker double's fast Q4_K experts (harness/kvasir-fast-experts.ts) against ggml-exact's (the coordinator's
 * arithmetic, bit for bit): every output value of every expert identical over rows of several magnitudes, a zero row
 * among them; the fast form declines what it does not cover (another type, a biased variant).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { testModel } from '../../harness/models.ts';
import { QWEN_Q4K } from '../../harness/swarm.ts';
import { planExpertSlice, readExpertSliceBytes, writeExpertSlice } from '../../gguf/expert-slice.ts';
import { memorySink, readGGUF } from '../../gguf/index.ts';
import { openFileSource } from '../../gguf/node-io.ts';
import { GGMLType } from '../../gguf/quant-types.ts';
import { type ExactExperts, ggmlExpertOut } from '../../harness/ggml-exact.ts';
import { fastExperts } from '../../harness/kvasir-fast-experts.ts';

async function layerExperts(): Promise<ExactExperts> {
  const m = await testModel({ ...QWEN_Q4K, layers: 1 });
  const src = await openFileSource(m.path);
  try {
    const plan = planExpertSlice(await readGGUF(src), 0, 0, QWEN_Q4K.nExpert);
    const sink = memorySink();
    await writeExpertSlice(src, plan, sink);
    const s = await readExpertSliceBytes(sink.bytes());
    return { types: s.info.types, nEmbd: s.info.nEmbd, ff: s.info.ff, gate: s.gate, up: s.up, down: s.down };
  } finally {
    await src.close();
  }
}

/** xorshift32 in [−0.5, 0.5). */
function rows(n: number, width: number, seed: number): Float32Array[] {
  let x = seed;
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32 - 0.5;
  };
  return Array.from({ length: n }, (_, i) => {
    const scale = [1e-3, 1, 8, 300][i % 4] as number;
    return i === 0 ? new Float32Array(width) : Float32Array.from({ length: width }, () => next() * scale);
  });
}

test('fast Q4_K experts: every value bit for bit as ggml-exact (the coordinator’s arithmetic)', async () => {
  const e = await layerExperts();
  const fast = fastExperts(e);
  assert.ok(fast, 'Q4_K SiLU experts have a fast form');
  let compared = 0;
  for (const [i, x] of rows(12, e.nEmbd, 0x2f6b).entries()) {
    const row = fast.rowOf(x);
    for (let expert = 0; expert < QWEN_Q4K.nExpert; expert++) {
      const want = ggmlExpertOut(e, expert, x);
      const got = fast.expertOut(expert, row);
      for (let k = 0; k < want.length; k++)
        if (!Object.is(got[k], want[k])) assert.fail(`row ${i}, expert ${expert}, value ${k}: ${got[k]} ≠ ${want[k]}`);
      compared += want.length;
    }
  }
  assert.equal(compared, 12 * QWEN_Q4K.nExpert * e.nEmbd);
});

test('fast Q4_K experts: another type or a biased variant has none (the double computes with ggml-exact then)', async () => {
  const e = await layerExperts();
  assert.equal(fastExperts({ ...e, types: { ...e.types, down: GGMLType.Q6_K } }), null);
  const zeros = { gate: new Float32Array(0), up: new Float32Array(0), down: new Float32Array(0) };
  assert.equal(fastExperts({ ...e, biases: zeros }), null);
  assert.equal(fastExperts({ ...e, variant: { activation: 'gelu', biases: false, alpha: 0, limit: 0 } as never }), null);
});
