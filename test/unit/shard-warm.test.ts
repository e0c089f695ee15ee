/**
 * The shard server's remembered digests (hub/shards.ts): a warm-up computes them before any assignment asks, a lookup
 * after it reads nothing, and a model file changed on disk is never served with the digest of its old bytes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdtempSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModelInfo, type ModelInfo } from '../../hub/registry.ts';
import { ShardServer } from '../../hub/shards.ts';
import { ShardWarmer } from '../../hub/shard-warmer.ts';
import type { HeldRange, ModelShape } from '../../hub/market/types.ts';
import { testModel } from '../../harness/models.ts';

const SHAPE = { arch: 'qwen3moe' as const, layers: 2, nEmbd: 64, ff: 64, nExpert: 8, nExpertUsed: 2 };
const a = await testModel({ ...SHAPE, seed: 2 });
const b = await testModel({ ...SHAPE, seed: 3 });

/** A server over the model file at `path`, named 'm', counting the slices it reads. */
async function serverOver(path: string): Promise<{ server: ShardServer; reads: () => number }> {
  const info: ModelInfo = { ...(await loadModelInfo(path, 'm')), path };
  const server = new ShardServer({
    modelInfo: () => info,
    authenticate: () => 'w',
    sliceDownloaded: () => {},
  });
  let reads = 0;
  const s = server as unknown as { compute: (...args: unknown[]) => Promise<unknown> };
  const compute = s.compute.bind(server);
  s.compute = (...args) => {
    reads++;
    return compute(...args);
  };
  return { server, reads: () => reads };
}

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');
async function bodyOf(server: ShardServer, layer: number, begin: number, end: number): Promise<Uint8Array> {
  const shard = await server.open({ model: 'm', layer, expertBegin: begin, expertEnd: end });
  const chunks: Buffer[] = [];
  for await (const c of server.body(shard, 0, shard.length)) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

test('a warm-up reads each slice once; lookups after it read nothing and give the digest of the bytes served', async () => {
  const { server, reads } = await serverOver(a.path);
  const slices: Array<[number, number, number]> = [
    [0, 0, 1],
    [1, 0, 1],
    [0, 1, 3],
    [1, 7, 8],
  ];
  assert.equal(await server.warm('m', [...slices, [0, 0, 99]]), 4, 'a slice the model cannot give is skipped');
  assert.equal(reads(), 4);
  const looked = await Promise.all(
    slices.map(([layer, begin, end]) => server.lookup({ model: 'm', layer, expertBegin: begin, expertEnd: end })),
  );
  assert.equal(reads(), 4, 'every lookup was remembered');
  for (const [i, [layer, begin, end]] of slices.entries()) {
    const body = await bodyOf(server, layer, begin, end);
    assert.equal(looked[i]!.digest, sha256(body), `layer ${layer} [${begin}, ${end})`);
    assert.equal(looked[i]!.length, body.length);
  }
  assert.equal(await server.warm('m', slices), 4);
  assert.equal(reads(), 8, 'the downloads read each small slice once more, to keep its bytes; a second warm-up read none');
});

test('a model file changed on disk is looked up and served with the digest of its new bytes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'shard-warm-'));
  try {
    const path = join(dir, 'm.gguf');
    copyFileSync(a.path, path);
    const { server } = await serverOver(path);
    await server.warm('m', [[1, 2, 4]]);
    const before = await server.lookup({ model: 'm', layer: 1, expertBegin: 2, expertEnd: 4 });
    // The same shape and size, other weights: only the file's mtime (and content) tell them apart.
    copyFileSync(b.path, path);
    utimesSync(path, new Date(), new Date(Date.now() + 10_000));
    const after = await server.lookup({ model: 'm', layer: 1, expertBegin: 2, expertEnd: 4 });
    assert.notEqual(after.digest, before.digest);
    assert.equal(after.digest, sha256(await bodyOf(server, 1, 2, 4)), 'the bytes served are the new file’s, with their digest');
    const { server: fresh } = await serverOver(b.path);
    assert.equal(after.digest, (await fresh.lookup({ model: 'm', layer: 1, expertBegin: 2, expertEnd: 4 })).digest);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('ShardWarmer: each kind of volunteer once, the market’s likely slices, within its bounds of kinds, slices and bytes', async () => {
  const shape: ModelShape = {
    model: 'm',
    nLayer: 2,
    nExpert: 8,
    nEmbd: 16,
    moeLayers: [0, 1],
    bytesPerExpert: 100,
    maxMatrixBytesPerExpert: 40,
  };
  const asked: Array<[string, HeldRange[]]> = [];
  const warmer = new ShardWarmer(
    {
      models: () => ['m', 'other'],
      shape: (model) => {
        if (model !== 'm') throw new Error('not a market model');
        return shape;
      },
      warm: async (model, slices) => {
        asked.push([model, slices]);
      },
    },
    { kinds: 2, slices: 20, bytes: 2000 },
  );
  warmer.asked({ maxExperts: 1 });
  warmer.asked({ model: 'm', maxExperts: 1 }); // the same kind
  warmer.asked({ device: { memoryBudgetBytes: 199 } }); // the same widths (1 per layer): the same kind
  warmer.asked({ maxExperts: 4 }); // 4 slices left but 400 bytes: one
  warmer.asked({ maxExperts: 2 }); // a third kind: past the bound
  await warmer.idle();
  const oneEach = Array.from({ length: 16 }, (_, i) => [i % 2, i >> 1, (i >> 1) + 1]);
  assert.deepEqual(asked, [
    ['m', oneEach],
    ['m', [[0, 0, 4]]],
  ]);
});
