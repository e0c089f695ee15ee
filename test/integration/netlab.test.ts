/**
 * The network lab itself (harness/netlab.ts, issue 29), measured with bounds: real namespaces, veths, NAT, iptables and
 * tbf, and the userspace link emulator in the router. Homes on every profile (and a lossy one) behind one router; a hub
 * namespace serving echo, whoami and UDP counters through the lab's agent. Asserts the round trip each profile adds
 * (TCP and UDP), the rate, loss as retransmission delay and as dropped datagrams, an outage that blocks then
 * recovers on the same connection, NAT (a home arrives from the router's address; nothing reaches a home from
 * outside or from another home), and teardown (no namespace, process, interface or rule left, host untouched; also
 * after a crash and after SIGKILL). Without root this file fails: createLab throws, saying why.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { cleanStaleLabs, createLab, HUB_ADDRESS, type Lab, ROUTER_ADDRESS } from '../../harness/netlab.ts';
import { type NetProfile, PROFILES } from '../../harness/netlab-profiles.ts';

const ECHO = 7007; // through the link emulator
const WHOAMI = 7008; // through the link emulator
const UDP_ECHO = 7009; // through the link emulator
const WHOAMI_NAT = 7010; // kernel NAT only
const ECHO_DIRECT = 7011; // kernel NAT only: the path's own round trip, for "added"
const UDP_COUNT = 7012; // kernel NAT only (kernel loss)

const LOSSY: NetProfile = { name: 'lossy', rttMs: 10, jitterMs: 0, lossPct: 10 };
const HOMES = ['lan', 'broadband', 'far', 'mobile'] as const;

let lab: Lab;

function hostSnapshot(): string {
  const links = execFileSync('ip', ['-o', 'link'], { encoding: 'utf8' }).replace(/\s+link\/.*$/gm, '');
  let rules = '';
  try {
    rules = execFileSync('iptables-save', { encoding: 'utf8' })
      .replace(/^#.*$/gm, '')
      .replace(/\[\d+:\d+\]/g, '');
  } catch (e) {
    rules = `iptables-save failed: ${(e as Error).message}`;
  }
  return `${links}\n${rules}`;
}

let hostBefore = '';

/** Not running: no such process, or a zombie its parent has not reaped yet. */
function gone(pid: number): boolean {
  try {
    return /^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

before(async () => {
  hostBefore = hostSnapshot();
  lab = await createLab({
    homes: [...HOMES.map((p) => ({ name: p, profile: p })), { name: 'lossy', profile: LOSSY }],
    tcpPorts: [ECHO, WHOAMI],
    udpPorts: [UDP_ECHO],
    seed: 29,
  });
  for (const [kind, port] of [
    ['echo', ECHO],
    ['whoami', WHOAMI],
    ['udp-echo', UDP_ECHO],
    ['whoami', WHOAMI_NAT],
    ['echo', ECHO_DIRECT],
    ['udp-count', UDP_COUNT],
  ] as const)
    await lab.agent('hub', { op: 'serve', kind, port });
});

after(async () => {
  await lab?.close();
});

/** `n` sequential one-byte echoes on one connection; round trips in ms. */
async function echoes(s: Socket, n: number, gapMs = 0): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const got = new Promise<void>((r) => s.once('data', () => r()));
    s.write('x');
    await got;
    out.push(performance.now() - t0);
    if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
  }
  return out;
}

const q = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] as number;
};
const f1 = (x: number): string => x.toFixed(1);

test('TCP and UDP round trips: each profile adds its rtt ± jitter (measured against the same path without the emulator)', async (t) => {
  const rows = await Promise.all(
    HOMES.map(async (home) => {
      const p = PROFILES[home];
      const direct = await lab.dial(home, HUB_ADDRESS, ECHO_DIRECT);
      const d = await echoes(direct, 10);
      direct.destroy();
      const s = await lab.dial(home, HUB_ADDRESS, ECHO);
      const r = await echoes(s, 30);
      s.destroy();
      const u = (
        await lab.agent<{ rtts: Array<number | null> }>(home, {
          op: 'udp-rtt',
          host: HUB_ADDRESS,
          port: UDP_ECHO,
          count: 20,
          timeoutMs: 1000,
        })
      ).rtts.filter((x): x is number => x !== null);
      return { home, p, direct: q(d, 0.5), min: Math.min(...r), med: q(r, 0.5), p90: q(r, 0.9), udpMin: Math.min(...u), udpMed: q(u, 0.5) };
    }),
  );
  for (const r of rows)
    t.diagnostic(
      `${r.home}: TCP echo min ${f1(r.min)} median ${f1(r.med)} p90 ${f1(r.p90)} ms (profile ${r.p.rttMs} ± ${r.p.jitterMs}; ` +
        `path without the emulator ${f1(r.direct)} ms); UDP min ${f1(r.udpMin)} median ${f1(r.udpMed)} ms`,
    );
  for (const r of rows) {
    const { rttMs, jitterMs } = r.p;
    // Timers may fire up to ~1 ms early; nothing can come back before the emulator's shortest round trip.
    assert.ok(r.min >= rttMs - jitterMs - 1, `${r.home}: an echo came back in ${f1(r.min)} ms, under ${rttMs} − ${jitterMs}`);
    assert.ok(r.udpMin >= rttMs - jitterMs - 1, `${r.home}: a UDP echo came back in ${f1(r.udpMin)} ms`);
    // The median sits in the band; above it, the path's own cost on busy cores (bounded generously).
    assert.ok(r.med >= rttMs - jitterMs / 2 - 1, `${r.home}: median ${f1(r.med)} ms below ${rttMs} − ${jitterMs / 2}`);
    assert.ok(r.med <= rttMs + jitterMs + 25, `${r.home}: median ${f1(r.med)} ms above ${rttMs} + ${jitterMs} + 25`);
    assert.ok(r.udpMed <= rttMs + jitterMs + 25, `${r.home}: UDP median ${f1(r.udpMed)} ms`);
    assert.ok(r.direct < 20, `${r.home}: the path without the emulator is fast: ${f1(r.direct)} ms`);
  }
  const med = Object.fromEntries(rows.map((r) => [r.home, r.med]));
  assert.ok((med.lan as number) < (med.broadband as number) && (med.broadband as number) < (med.mobile as number));
  assert.ok((med.mobile as number) < (med.far as number), 'far is the farthest');
});

test('rate: 2 MiB echoed over the far profile (10 Mbit/s tbf) takes ≥ 1.4 s; broadband (50 Mbit/s) is faster', async (t) => {
  const timeIt = async (home: string): Promise<number> => {
    const s = await lab.dial(home, HUB_ADDRESS, ECHO_DIRECT);
    const size = 2 << 20;
    const t0 = performance.now();
    let got = 0;
    const done = new Promise<void>((r) =>
      s.on('data', (c: Buffer) => {
        got += c.length;
        if (got >= size) r();
      }),
    );
    s.write(Buffer.alloc(size, 1));
    await done;
    s.destroy();
    return (performance.now() - t0) / 1000;
  };
  const far = await timeIt('far');
  const bb = await timeIt('broadband');
  const mbit = (s: number): string => f1((2 * 8 * 1.048576) / s);
  t.diagnostic(`2 MiB each way: far ${far.toFixed(2)} s (${mbit(far)} Mbit/s), broadband ${bb.toFixed(2)} s (${mbit(bb)} Mbit/s)`);
  assert.ok(far >= 1.4, `far's 10 Mbit/s shapes the stream: ${far.toFixed(2)} s`);
  assert.ok(far <= 15, `and it still flows: ${far.toFixed(2)} s`);
  assert.ok(bb < far, `broadband (${bb.toFixed(2)} s) is faster than far (${far.toFixed(2)} s)`);
});

test('loss: 10% drops show as retransmission delay on TCP (data intact) and as missing UDP datagrams', async (t) => {
  const s = await lab.dial('lossy', HUB_ADDRESS, ECHO);
  const r = await echoes(s, 80);
  s.destroy();
  const slow = r.filter((x) => x > LOSSY.rttMs + 100).length;
  const clean = await lab.dial('lan', HUB_ADDRESS, ECHO);
  const c = await echoes(clean, 80);
  clean.destroy();
  const cleanSlow = c.filter((x) => x > PROFILES.lan.rttMs + 100).length;
  const n = 400;
  const before = (await lab.agent<{ count: number }>('hub', { op: 'udp-count', port: UDP_COUNT })).count;
  await lab.agent('lossy', { op: 'udp-send', host: HUB_ADDRESS, port: UDP_COUNT, count: n, size: 64, gapMs: 1 });
  await new Promise((res) => setTimeout(res, 300));
  const got = (await lab.agent<{ count: number }>('hub', { op: 'udp-count', port: UDP_COUNT })).count - before;
  await lab.agent('lan', { op: 'udp-send', host: HUB_ADDRESS, port: UDP_COUNT, count: n, size: 64, gapMs: 1 });
  await new Promise((res) => setTimeout(res, 300));
  const gotLan = (await lab.agent<{ count: number }>('hub', { op: 'udp-count', port: UDP_COUNT })).count - before - got;
  t.diagnostic(
    `lossy (10%): ${slow} of 80 echoes took > ${LOSSY.rttMs + 100} ms (max ${f1(Math.max(...r))} ms), lan: ${cleanSlow}; ` +
      `UDP: ${got} of ${n} datagrams arrived (lan: ${gotLan})`,
  );
  // p = 0.1 each way: an echo loses its data or its answer with probability 0.19 (expected ~15 of 80).
  assert.ok(slow >= 4, `lost segments are retransmitted late: ${slow} slow echoes of 80`);
  assert.ok(cleanSlow <= 3, `without loss echoes are not late: ${cleanSlow}`);
  assert.equal(r.length, 80, 'every echo came back (TCP retransmits)');
  assert.ok(got >= 0.8 * n && got <= 0.97 * n, `~90% of datagrams arrive: ${got} of ${n}`);
  assert.ok(gotLan >= 0.99 * n, `without loss all arrive: ${gotLan} of ${n}`);
});

test('outage: the mobile profile’s 3 s cut blocks an open connection, which then recovers (same socket)', async (t) => {
  const s = await lab.dial('mobile', HUB_ADDRESS, ECHO);
  await echoes(s, 3);
  const t0 = performance.now();
  const cut = lab.outage('mobile');
  await new Promise((r) => setTimeout(r, 500));
  const sent = performance.now();
  const during = await echoes(s, 1);
  const back = performance.now() - t0;
  await cut;
  const after = await echoes(s, 5);
  const udp = lab.outage('mobile', 1500);
  await new Promise((r) => setTimeout(r, 200));
  const lost = (
    await lab.agent<{ rtts: Array<number | null> }>('mobile', {
      op: 'udp-rtt',
      host: HUB_ADDRESS,
      port: UDP_ECHO,
      count: 3,
      timeoutMs: 300,
    })
  ).rtts;
  await udp;
  s.destroy();
  t.diagnostic(
    `an echo sent ${f1(sent - t0)} ms into the 3000 ms outage came back ${f1(back)} ms after it began (${f1(during[0] as number)} ms); ` +
      `after: ${after.map(f1).join(' ')} ms; UDP during a cut: ${JSON.stringify(lost)}`,
  );
  assert.ok(back >= 3000, `nothing passes during the outage: the echo came back ${f1(back)} ms after the cut`);
  assert.ok(back <= 3000 + 8000, `TCP recovers after it (kernel retransmission backoff): ${f1(back)} ms`);
  assert.ok(q(after, 0.5) <= PROFILES.mobile.rttMs + PROFILES.mobile.jitterMs + 250, `round trips are back to normal: ${after.map(f1)}`);
  assert.deepEqual(lost, [null, null, null], 'UDP is dropped during a cut');
});

test('NAT: homes arrive from the router’s address, through the emulator or not; nothing reaches a home from outside or another home', async () => {
  const whoami = async (home: string, port: number): Promise<string> => {
    const s = await lab.dial(home, HUB_ADDRESS, port);
    let txt = '';
    s.on('data', (d) => {
      txt += d;
    });
    await new Promise((r) => s.on('close', r));
    return txt.trim().split(':')[0] as string;
  };
  for (const home of ['broadband', 'far'])
    for (const port of [WHOAMI, WHOAMI_NAT]) assert.equal(await whoami(home, port), ROUTER_ADDRESS, `${home} → :${port}`);
  const bb = lab.homes.get('broadband');
  const far = lab.homes.get('far');
  assert.ok(bb && far);
  await lab.agent('broadband', { op: 'serve', kind: 'echo', port: 7100 });
  // The home itself reaches its own server (the server is up), but the hub cannot (no route to a private LAN) …
  (await lab.dial('broadband', bb.address, 7100)).destroy();
  await assert.rejects(lab.dial('hub', bb.address, 7100, 1500), /ENETUNREACH|timeout/);
  // … nor the router's public side forwarded to it (no port mapping), nor another home behind the same router.
  await assert.rejects(lab.dial('hub', ROUTER_ADDRESS, 7100, 1500), /timeout|refused/i);
  await assert.rejects(lab.dial('far', bb.address, 7100, 1500), /timeout/i);
});

test('teardown: no namespace, interface, rule or process is left; the host never changed; close twice is fine', async () => {
  const lab2 = await createLab({ homes: [{ name: 'a', profile: 'broadband' }], tcpPorts: [ECHO] });
  const names = lab2.namespaces();
  assert.equal(hostSnapshot(), hostBefore, 'a lab adds nothing to the host’s namespace (interfaces, iptables)');
  await lab2.agent('a', { op: 'serve', kind: 'echo', port: 1 });
  const pids = names.flatMap((ns) =>
    execFileSync('ip', ['netns', 'pids', ns], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number),
  );
  assert.ok(pids.length >= 2, `the router's and the home's agents run: ${pids}`);
  await lab2.close();
  await lab2.close();
  const left = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  for (const n of names) assert.ok(!left.includes(n), `${n} is gone: ${left}`);
  for (const pid of pids) assert.ok(gone(pid), `process ${pid} is gone`);
  assert.equal(hostSnapshot(), hostBefore);
});

const HARNESS = fileURLToPath(new URL('../../harness/netlab.ts', import.meta.url));

/** A child process that builds a lab, prints its namespaces, then ends as `how` says. */
function childLab(how: 'throw' | 'hang'): Promise<{ names: string[]; code: number | null; signal: string | null }> {
  const script = `
    const { createLab } = await import(${JSON.stringify(HARNESS)});
    const lab = await createLab({ homes: [{ name: 'a', profile: 'lan' }], tcpPorts: [7007] });
    console.log('NAMES ' + lab.namespaces().join(','));
    ${how === 'throw' ? "setTimeout(() => { throw new Error('crash on purpose'); }, 10);" : 'setInterval(() => {}, 1000);'}
  `;
  const p = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.on('data', (d) => {
    out += d;
    if (how === 'hang' && out.includes('NAMES ')) p.kill('SIGKILL');
  });
  p.stderr.on('data', (d) => {
    out += d;
  });
  return new Promise((resolve) =>
    p.on('exit', (code, signal) => resolve({ names: /NAMES (\S+)/.exec(out)?.[1]?.split(',') ?? [], code, signal })),
  );
}

test('a crash tears its lab down on exit; a SIGKILLed run’s lab is removed at the next start', async () => {
  const crashed = await childLab('throw');
  assert.ok(crashed.names.length === 3, `the child built a lab: ${JSON.stringify(crashed)}`);
  assert.notEqual(crashed.code, 0, 'the child crashed');
  let list = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  for (const n of crashed.names) assert.ok(!list.includes(n), `the exit hook removed ${n}`);
  const killed = await childLab('hang');
  assert.equal(killed.signal, 'SIGKILL');
  assert.ok(killed.names.length === 3, `the child built a lab: ${JSON.stringify(killed)}`);
  list = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  for (const n of killed.names) assert.ok(list.includes(n), `SIGKILL leaves ${n} behind`);
  const removed = cleanStaleLabs();
  assert.deepEqual(new Set(removed), new Set(killed.names), 'the next start removes exactly the dead run’s lab');
  list = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  for (const n of killed.names) assert.ok(!list.includes(n), `${n} is gone`);
  for (const n of lab.namespaces()) assert.ok(list.includes(n), `a live lab (${n}) is left alone`);
  assert.ok(!existsSync(`/run/netns/${killed.names[0]}`));
  const pid = /^xslab-(\d+)-/.exec(killed.names[0] as string)?.[1];
  assert.deepEqual(
    readdirSync(tmpdir()).filter((d) => d.startsWith(`xslab-${pid}-`)),
    [],
    'and its control-socket folder',
  );
});

test('without root the lab refuses loudly (it never skips)', async () => {
  const script = `
    const { createLab } = await import(${JSON.stringify(HARNESS)});
    try { await createLab({ homes: [{ name: 'a', profile: 'lan' }] }); console.log('BUILT'); }
    catch (e) { console.log('REFUSED ' + e.message); }
  `;
  const out = execFileSync(
    'setpriv',
    ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '--import', 'tsx', '--input-type=module', '-e', script],
    { encoding: 'utf8', env: { ...process.env, HOME: '/tmp' } },
  );
  assert.match(out, /REFUSED netlab: cannot build the network lab here: the network lab needs root/);
});
