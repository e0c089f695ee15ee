/**
 * Kvasir's own clients against the hub's HTTP contract (issue 28), in-process: a client written here from Kvasir's
 * documented behaviour (its desktop participation client and expert host: log in, census heartbeat while holding
 * nothing with n_layer/n_expert 0, volunteer, download the shard on `/api/proxy/models/M/expert-shard?layer=&expert_begin=
 * &expert_end=`, check the shard's `kvasir.expert_shard.*` metadata before trusting it, heartbeat the held segment with a
 * `relay:<session>` url; its coordinator's `GET /api/expert-dispatch-map` with no model and layer -1).
 * In-process there is no relay to dial (kvasir-relay.test.ts dials one): the relay url holds its session (`session`
 * handed out; `listen_port` null, no listening server here), the answers say not wired, and such a worker is held but
 * is no replica (hub/market/replicas.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { testModel } from '../../harness/models.ts';
import { newVolunteer, testHub, type TestHub } from '../../harness/hub-fixtures.ts';

const model = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 8, nExpertUsed: 2, seed: 28 });

/** What a Kvasir client reads of a GGUF header: its key/values (arrays skipped), as its expert host does. */
function ggufMetadata(bytes: Uint8Array): Record<string, number | bigint | string | boolean | null> {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (new TextDecoder().decode(bytes.subarray(0, 4)) !== 'GGUF') throw new Error('not a GGUF file');
  let o = 16; // magic, version, tensor count
  const u64 = (): number => {
    const x = Number(v.getBigUint64(o, true));
    o += 8;
    return x;
  };
  const str = (): string => {
    const n = u64();
    const s = new TextDecoder().decode(bytes.subarray(o, o + n));
    o += n;
    return s;
  };
  const size: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const value = (t: number): number | bigint | string | boolean | null => {
    const at = o;
    if (t === 8) return str();
    if (t === 9) {
      const et = v.getUint32(o, true);
      o += 4;
      const n = u64();
      for (let i = 0; i < n; i++) {
        if (et === 8) str();
        else o += size[et] ?? 0;
      }
      return null;
    }
    o += size[t] ?? Number.NaN;
    if (t === 4) return v.getUint32(at, true);
    if (t === 5) return v.getInt32(at, true);
    if (t === 6) return v.getFloat32(at, true);
    if (t === 7) return v.getUint8(at) !== 0;
    if (t === 10) return v.getBigUint64(at, true);
    return v.getUint8(at);
  };
  const nKv = u64();
  const meta: Record<string, number | bigint | string | boolean | null> = {};
  for (let i = 0; i < nKv; i++) {
    const key = str();
    const t = v.getUint32(o, true);
    o += 4;
    meta[key] = value(t);
  }
  return meta;
}

interface Assignment {
  assigned: boolean;
  model: string;
  layer: number;
  experts: [number, number];
  n_embd: number;
  n_layer: number;
  n_expert: number;
}

/** A Kvasir participation client (desktop/server) over the hub's HTTP contract, as its code documents it. */
class KvasirClient {
  assignment: Assignment | null = null;
  constructor(
    private readonly t: TestHub,
    private readonly token: string,
    readonly workerId: string,
    readonly owner: string,
  ) {}

  volunteer(maxExperts: number): Promise<{ status: number; json: Assignment }> {
    return this.t.call('POST', '/api/expert-volunteer', { model: '', max_experts: maxExperts }, this.token).then((r) => {
      if (r.json.assigned) this.assignment = r.json;
      return r;
    });
  }

  /** Its expert host's download: the bridge's path and query, then the metadata must name the shard it asked for. */
  async download(a: Assignment): Promise<{ status: number; bytes: Uint8Array; meta: Record<string, unknown> }> {
    const [begin, end] = a.experts;
    const path = `/api/proxy/models/${encodeURIComponent(a.model)}/expert-shard?layer=${a.layer}&expert_begin=${begin}&expert_end=${end}`;
    const r = await this.t.app.inject({ method: 'GET', url: path, headers: { authorization: `Bearer ${this.token}` } });
    const bytes = new Uint8Array(r.rawPayload);
    if (r.statusCode !== 200) return { status: r.statusCode, bytes, meta: {} };
    const m = ggufMetadata(bytes);
    const layer = m['kvasir.expert_shard.layer'];
    const b = m['kvasir.expert_shard.expert_begin'] ?? m['linkcpp.expert_shard.expert_begin'];
    const e = m['kvasir.expert_shard.expert_end'] ?? m['linkcpp.expert_shard.expert_end'];
    if ((layer != null && layer !== a.layer) || b !== begin || e !== end)
      throw new Error(`shard holds layer ${layer} experts ${b}-${e}, not layer ${a.layer} ${begin}-${end}`);
    return { status: r.statusCode, bytes, meta: m };
  }

  /** Its coverage heartbeat: n_layer/n_expert of the assignment, 0 while it has none; url only while serving. */
  report(model: string, segments: number[][], url?: string): ReturnType<TestHub['call']> {
    const a = this.assignment;
    const body = {
      worker_id: this.workerId,
      model,
      n_layer: a?.n_layer ?? 0,
      n_expert: a?.n_expert ?? 0,
      segments,
      owner: this.owner,
      ...(url ? { url } : {}),
    };
    return this.t.call('POST', '/api/expert-coverage', body, this.token);
  }
}

const replicasOf = async (t: TestHub, layer: number): Promise<number[]> => {
  const d = await t.call('GET', '/api/expert-demand?model=m');
  const l = d.json.models[0].layers.find((x: { layer: number }) => x.layer === layer);
  return (l?.segments ?? []).flatMap((s: { experts: [number, number]; replicas: number }) =>
    Array.from({ length: s.experts[1] - s.experts[0] }, () => s.replicas),
  );
};

test("a Kvasir client logs in, takes a slice, downloads and checks it, and reports it: the hub's answers in Kvasir's fields", async () => {
  const t = await testHub({
    models: [
      { path: model.path, name: 'm' },
      { path: model.path, name: 'm2' },
    ],
    dispatchMode: 'always', // the market wants its base replicas at rest
  });
  try {
    const v = newVolunteer();
    const token = await t.login(v);
    const k = new KvasirClient(t, token, 'desktop-kv1', v.wallet);

    // Holding nothing, it joins the census with n_layer 0 and n_expert 0 (unknown), no segments and no url.
    const census = await k.report('m', []);
    assert.equal(census.status, 200, JSON.stringify(census.json));
    assert.deepEqual(
      { ...census.json, stale_after_s: undefined },
      { ok: true, stale_after_s: undefined, workers: 1, replica: false, wired: false, listen_port: null, session: null },
    );

    const a = await k.volunteer(4);
    assert.equal(a.json.assigned, true, JSON.stringify(a.json));
    assert.ok(a.json.n_embd > 0 && a.json.n_layer === 2 && a.json.n_expert === 8, 'the dims its worker needs');
    const before = await replicasOf(t, a.json.layer);

    const shard = await k.download(a.json);
    assert.equal(shard.status, 200, 'the bridge form on the proxy path');
    assert.equal(shard.meta['kvasir.expert_shard.n_expert_total'], 8);
    const ours = await t.app.inject({
      method: 'GET',
      url: `/api/expert-shard?model=${a.json.model}&layers=${a.json.layer}:${a.json.layer + 1}&experts=${a.json.experts[0]}:${a.json.experts[1]}`,
      headers: { authorization: `Bearer ${token}` },
    });
    assert.deepEqual(new Uint8Array(ours.rawPayload), shard.bytes, "Kvasir's older form on our path: the same bytes");

    // Serving, it reports the segment with its relay url: accepted, held, its session handed out, not wired (no relay
    // dialed here), not a replica.
    const seg = [a.json.layer, ...a.json.experts];
    const held = await k.report(a.json.model, [seg], `relay:expert-${k.workerId}`);
    assert.equal(held.status, 200, JSON.stringify(held.json));
    assert.deepEqual(
      [held.json.workers, held.json.replica, held.json.wired, held.json.listen_port, held.json.session],
      [1, false, false, null, `expert-${k.workerId}`],
    );
    assert.deepEqual(await replicasOf(t, a.json.layer), before, 'nothing can send it work: demand is as before');
    // A volunteer on the channel holding the same range counts (the hub's own heartbeat path).
    t.hub.heartbeat('tab', null, a.json.model, [seg as [number, number, number]]);
    const after = await replicasOf(t, a.json.layer);
    assert.deepEqual(
      after.slice(a.json.experts[0], a.json.experts[1]),
      before.slice(a.json.experts[0], a.json.experts[1]).map((n) => n + 1),
    );

    // The dispatch map as Kvasir's coordinator polls it: no model (two served: all, model ''), layer -1 by default.
    const all = await t.call('GET', '/api/expert-dispatch-map');
    assert.equal(all.status, 200, JSON.stringify(all.json));
    assert.equal(all.json.model, '');
    const row = all.json.rows.find((r: { worker_id: string }) => r.worker_id === k.workerId);
    assert.deepEqual(
      [row?.model, row?.layer, row?.experts, row?.node_id, row?.listen_port, row?.session],
      [a.json.model, a.json.layer, a.json.experts, k.workerId, null, `expert-${k.workerId}`],
    );
    for (const [url, rows] of [
      ['/api/expert-dispatch-map?model=&layer=-1', 2],
      [`/api/expert-dispatch-map?model=m&layer=${a.json.layer}`, 2],
      [`/api/expert-dispatch-map?layer=${1 - a.json.layer}`, 0],
      ['/api/expert-dispatch-map?model=m2', 0],
    ] as const) {
      const r = await t.call('GET', url);
      assert.deepEqual([r.status, r.json.rows.length], [200, rows], url);
    }
    for (const [url, status, code] of [
      ['/api/expert-dispatch-map?layer=-2', 400, 'QUERY_INVALID'],
      ['/api/expert-dispatch-map?layer=x', 400, 'QUERY_INVALID'],
      ['/api/expert-dispatch-map?layer=1&layer=0', 400, 'QUERY_INVALID'],
      ['/api/expert-dispatch-map?model=nope', 404, 'MODEL_UNKNOWN'],
    ] as const) {
      const r = await t.call('GET', url);
      assert.deepEqual([r.status, r.json.code], [status, code], url);
    }

    // 0 = unknown; any other n_layer/n_expert must be the model's.
    const beat = (body: Record<string, unknown>) =>
      t.call('POST', '/api/expert-coverage', { worker_id: k.workerId, model: 'm', segments: [seg], ...body }, token);
    for (const [body, status, code] of [
      [{}, 200, undefined],
      [{ n_layer: 0, n_expert: 8 }, 200, undefined],
      [{ n_layer: 3, n_expert: 0 }, 400, 'BODY_INVALID'],
      [{ n_layer: 2, n_expert: 9 }, 400, 'BODY_INVALID'],
      [{ n_layer: -1, n_expert: 0 }, 400, 'BODY_INVALID'],
      [{ n_layer: '2', n_expert: 8 }, 400, 'BODY_INVALID'],
    ] as const) {
      const r = await beat(body);
      assert.deepEqual([r.status, r.json.code], [status, code], JSON.stringify(body));
    }
  } finally {
    await t.close();
  }
});

test('with one market model the dispatch map names it when no model is given', async () => {
  const t = await testHub({ models: [{ path: model.path, name: 'm' }] });
  try {
    t.hub.heartbeat('tab', null, 'm', [[1, 0, 4]]);
    const r = await t.call('GET', '/api/expert-dispatch-map');
    assert.deepEqual([r.status, r.json.model, r.json.rows.length, r.json.rows[0]?.node_id], [200, 'm', 1, 'tab']);
  } finally {
    await t.close();
  }
});

test("Kvasir's owner, a tcp: worker url and the relay sessions ledger", async () => {
  const t = await testHub({ models: [{ path: model.path, name: 'm' }], dispatchMode: 'always' });
  try {
    const v = newVolunteer();
    const token = await t.login(v);
    const k = new KvasirClient(t, token, 'desktop-kv2', v.wallet);
    const a = await k.volunteer(4);
    assert.equal(a.json.assigned, true, JSON.stringify(a.json));
    assert.equal((await k.download(a.json)).status, 200);
    const seg = [a.json.layer, ...a.json.experts];
    const before = await replicasOf(t, a.json.layer);

    // owner: absent, '' or the token's own wallet; another wallet is refused (the hub credits who signs in), as is
    // anything that is not a wallet.
    const beat = (body: Record<string, unknown>) =>
      t.call('POST', '/api/expert-coverage', { worker_id: k.workerId, model: 'm', segments: [seg], ...body }, token);
    for (const [body, status, code] of [
      [{}, 200, undefined],
      [{ owner: '' }, 200, undefined],
      [{ owner: v.wallet }, 200, undefined],
      [{ owner: newVolunteer().wallet }, 403, 'AUTH_FORBIDDEN'],
      [{ owner: 'not a wallet' }, 400, 'AUTH_BAD_WALLET'],
      [{ owner: 7 }, 400, 'BODY_INVALID'],
    ] as const) {
      const r = await beat(body);
      assert.deepEqual([r.status, r.json.code], [status, code], JSON.stringify(body));
    }

    // Kvasir's `tcp:<port>` (a worker listening for its coordinator to dial): held, never dialed by the hub, no replica.
    const tcp = await k.report('m', [seg], 'tcp:7000');
    assert.equal(tcp.status, 200, JSON.stringify(tcp.json));
    assert.deepEqual(
      [tcp.json.replica, tcp.json.wired, tcp.json.listen_port, tcp.json.session],
      [false, false, null, null],
      'no relay session, not wired',
    );
    assert.deepEqual(await replicasOf(t, a.json.layer), before, 'no replica: nothing sends it work');
    assert.deepEqual((await t.call('GET', '/api/expert-relay/sessions')).json, { sessions: [] }, 'no session for a tcp: url');

    // A relay url holds a session: the ledger lists it in Kvasir's fields, not dialed yet (kvasir-relay.test.ts counts
    // the bytes of a dialed one).
    const held = await k.report('m', [seg], 'relay:');
    assert.equal(held.json.session, `expert-${k.workerId}`);
    const ledger = await t.call('GET', '/api/expert-relay/sessions');
    assert.equal(ledger.status, 200);
    const row = ledger.json.sessions[0];
    assert.equal(ledger.json.sessions.length, 1);
    assert.deepEqual(
      [row.session, row.worker_id, row.node_id, row.owner, row.model, row.layer, row.experts, row.wired],
      [`expert-${k.workerId}`, k.workerId, k.workerId, v.wallet, 'm', a.json.layer, a.json.experts, false],
    );
    assert.deepEqual([row.opened, row.closed, row.ws2tcp, row.tcp2ws], [null, null, 0, 0]);
    assert.equal(row.ts, t.clock.now / 1000, 'the last heartbeat, in seconds');

    // Kvasir's register endpoint names a host:port for the hub to dial: not served (the relay ends in the hub).
    const reg = await t.call('POST', '/api/expert-relay/register', { session: 's', host: '127.0.0.1', port: 22 }, token);
    assert.deepEqual([reg.status, reg.json.code], [404, 'NOT_FOUND']);
  } finally {
    await t.close();
  }
});
