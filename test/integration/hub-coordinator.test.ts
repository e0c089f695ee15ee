/**
 * The hub against real linkcpp-server coordinators: saturation seen by the poller under real concurrent load,
 * a hanging coordinator that must not delay the others, streaming through the official `openai` client, and the
 * supervisor restarting a killed coordinator while the API answers 503.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { testModel } from '../../harness/models.ts';
import { runHub } from '../../hub/cli.ts';
import { defaultConfig } from '../../hub/hub.ts';
import type { RecruitmentRow } from '../../protocol/http.ts';

const model = await testModel({ arch: 'qwen3moe', layers: 4, nEmbd: 256, ff: 256, nExpert: 16, nExpertUsed: 4, seed: 9 });
const banBias = Object.fromEntries(model.ban.map((id) => [String(id), -100]));
const stateDir = mkdtempSync(join(tmpdir(), 'es-hub-'));
test.after(() => rmSync(stateDir, { recursive: true, force: true }));

/** A "coordinator" that accepts connections and never answers. */
async function hangingServer(): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const s = createServer((c) => {
    sockets.add(c);
    c.on('error', () => {});
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((r) => {
        for (const c of sockets) c.destroy();
        s.close(() => r());
      }),
  };
}

async function recruitment(url: string): Promise<Map<string, RecruitmentRow>> {
  const r = (await (await fetch(`${url}/api/moe/recruitment`)).json()) as { models: RecruitmentRow[] };
  return new Map(r.models.map((m) => [m.model, m]));
}

async function waitFor<T>(what: string, timeoutMs: number, f: () => Promise<T | undefined>): Promise<{ value: T; ms: number }> {
  const t0 = performance.now();
  for (;;) {
    const v = await f();
    if (v !== undefined) return { value: v, ms: performance.now() - t0 };
    if (performance.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('poller: saturated within one poll interval under 4 concurrent requests, back after they end; a hanging coordinator delays nobody', async () => {
  const hang = await hangingServer();
  const config = defaultConfig({
    port: 0,
    stateDir,
    slots: 4,
    ctxPerSlot: 4096,
    models: [{ path: model.path, name: 'tiny' }],
    externals: [{ name: 'hung', url: hang.url }],
  });
  const running = await runHub(config, () => {});
  let closed = false;
  const interval = config.poller.intervalMs;
  try {
    const idle = await recruitment(running.url);
    assert.equal(idle.get('tiny')?.saturated, false);
    const aborts = Array.from({ length: 4 }, () => new AbortController());
    const loads = aborts.map((a, i) =>
      fetch(`${running.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'tiny',
          prompt: `request ${i}: The swarm serves`,
          max_tokens: 3000,
          ignore_eos: true,
          stream: true,
          logit_bias: banBias,
        }),
        signal: a.signal,
      })
        .then(async (r) => {
          const reader = r.body!.getReader();
          while (!(await reader.read()).done) {
            /* drain until aborted */
          }
        })
        .catch(() => {}),
    );
    const sat = await waitFor('saturation', 3 * interval, async () => {
      const m = (await recruitment(running.url)).get('tiny');
      return m?.saturated && m.recruiting ? m : undefined;
    });
    // One poll interval plus the time 4 requests take to occupy their slots; on a loaded 2-core machine the latter
    // alone has taken over a second, so the bound is two intervals.
    assert.ok(sat.ms <= 2 * interval, `saturation seen after ${sat.ms.toFixed(0)} ms (poll interval ${interval} ms)`);
    assert.equal(sat.value.busy, 4);
    assert.equal(sat.value.effective_target, 3, 'boost while recruiting');
    // The hanging coordinator never produced a reading, and the real one's reading stays fresh meanwhile.
    const both = await recruitment(running.url);
    assert.equal(both.get('hung')?.busy, null);
    assert.ok((both.get('tiny')?.age_s ?? 99) <= interval / 1000 + 0.5, `tiny reading age ${both.get('tiny')?.age_s} s`);

    // Clients hang up: the hub aborts the upstream requests, the slots free, recruitment ends.
    for (const a of aborts) a.abort();
    await Promise.all(loads);
    const calm = await waitFor('the end of saturation', 3 * interval, async () => {
      const m = (await recruitment(running.url)).get('tiny');
      return m && !m.saturated ? m : undefined;
    });
    assert.ok(calm.ms <= 2 * interval, `calm seen after ${calm.ms.toFixed(0)} ms`);
    assert.equal(calm.value.effective_target, 2);
    const events = (await (await fetch(`${running.url}/api/events`)).json()) as { events: Array<{ kind: string; model: string }> };
    assert.ok(events.events.some((e) => e.kind === 'saturation-onset' && e.model === 'tiny'));
    assert.ok(events.events.some((e) => e.kind === 'saturation-end' && e.model === 'tiny'));
    // Regression: the hub once took ~70 s to close here, holding the sockets of proxied streams whose clients had left.
    const t0 = performance.now();
    await running.close();
    closed = true;
    assert.ok(performance.now() - t0 < 10_000, `closing the hub took ${(performance.now() - t0).toFixed(0)} ms`);
  } finally {
    if (!closed) await running.close();
    await hang.close();
  }
});

test('the openai client streams a chat completion through the hub; a killed coordinator is restarted, 503 meanwhile', async () => {
  const running = await runHub(
    defaultConfig({ port: 0, stateDir, slots: 2, ctxPerSlot: 1024, models: [{ path: model.path, name: 'tiny' }] }),
    () => {},
  );
  try {
    const client = new OpenAI({ baseURL: `${running.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const models = await client.models.list();
    assert.deepEqual(
      models.data.map((m) => m.id),
      ['tiny'],
    );
    const stream = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'hello world' }],
      max_tokens: 12,
      stream: true,
      logit_bias: banBias,
    });
    let chunks = 0;
    let finish: string | null = null;
    for await (const chunk of stream) {
      chunks++;
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.ok(chunks >= 2, `${chunks} chunks: the answer arrived as a stream`);
    assert.ok(finish === 'length' || finish === 'stop', `finish_reason ${finish}`);

    await assert.rejects(
      client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
      (e: { status?: number }) => e.status === 404,
    );

    const proc = running.hub.coordinatorProcess('tiny');
    assert.ok(proc);
    proc.kill('SIGKILL');
    const down = await waitFor('503 while restarting', 5000, async () => {
      const r = await fetch(`${running.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 1 }),
      });
      return r.status === 503 ? r : undefined;
    });
    assert.ok(Number(down.value.headers.get('retry-after')) >= 1);
    assert.equal(((await down.value.json()) as { code: string }).code, 'COORDINATOR_UNAVAILABLE');
    // Until its exit is noticed the old coordinator still reads 'ready' (requests then fail with connection refused,
    // also a 503): wait for the restart itself.
    await waitFor('the coordinator back', 30_000, async () => {
      const s = running.hub.coordinators()[0];
      return s?.state === 'ready' && s.restarts === 1 ? true : undefined;
    });
    const again = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 4,
      logit_bias: banBias,
    });
    assert.ok(['length', 'stop'].includes(again.choices[0]?.finish_reason ?? ''));
    assert.equal(running.hub.coordinators()[0]?.restarts, 1);
  } finally {
    await running.close();
  }
});

test('an external llama-server-compatible coordinator (--coordinator-url) is polled and proxied', async () => {
  const { startServer } = await import('../../harness/linkcpp.ts');
  const external = await startServer({ model: model.path, slots: 2 });
  const running = await runHub(
    defaultConfig({
      port: 0,
      stateDir,
      models: [{ path: model.path, name: 'ext' }],
      externals: [{ name: 'ext', url: external.url }],
    }),
    () => {},
  );
  try {
    assert.equal(running.hub.coordinators()[0]?.state, 'external', 'the hub did not start a coordinator of its own');
    const seen = await waitFor('a /slots reading', 5000, async () => {
      const m = (await recruitment(running.url)).get('ext');
      return m && m.slots !== null ? m : undefined;
    });
    assert.equal(seen.value.slots, 2);
    const r = await fetch(`${running.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'ext', prompt: 'The swarm', max_tokens: 4, logit_bias: banBias }),
    });
    assert.equal(r.status, 200);
    const body = (await r.json()) as { choices: Array<{ text: string }> };
    assert.equal(body.choices.length, 1);
    const demand = (await (await fetch(`${running.url}/api/expert-demand?model=ext`)).json()) as { models: Array<{ n_expert: number }> };
    assert.equal(demand.models[0]?.n_expert, 16, 'its GGUF puts it on the market');
  } finally {
    await running.close();
    await external.stop();
  }
});
