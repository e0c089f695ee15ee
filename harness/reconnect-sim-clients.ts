/**
 * The volunteers of the reconnection simulation (harness/reconnect-sim.ts), run in a child process of their
 * own so that their timers fire on time while the hub's event loop is busy, as they would on 10,000 machines. Each
 * is the real client (volunteer/client.ts) with a stub compute environment (no WebGPU, no fallback: the hub has no
 * model, so nobody is ever assigned a slice), an identity of its own in memory and the `ws` WebSocket from a loopback
 * address of its own (`volunteerAddress`), wrapped to note when it dials and how a dial fails. They log in (HTTP)
 * from 127.0.0.1. Driven over IPC by `runReconnectSim`:
 *
 *   const child = fork('harness/reconnect-sim-clients.ts', [], { execArgv: ['--import', 'tsx'] });
 *   child.send({ type: 'join', hubUrl, count: 200, seed: 1, concurrency: 100 });   // → { type: 'joined', … }
 *   child.send({ type: 'arm', policy: 'jittered' });                               // → { type: 'armed' }
 *   // … the hub is killed and restarted …                                         // → { type: 'back', atMs }
 *   child.send({ type: 'report' });                                                // → { type: 'report', … }
 *
 * Times are milliseconds on a clock the processes of one machine share (`wallMs`).
 */
import { WebSocket } from 'ws';
import { DEFAULT_BACKOFF } from '../volunteer/backoff.ts';
import { createVolunteerClient, type SocketFactory } from '../volunteer/client.ts';
import { MemoryIdentityStore } from '../volunteer/identity.ts';
import { NoShardCache } from '../volunteer/shard-cache.ts';
import type { VolunteerControls } from '../volunteer/state.ts';
import { mulberry32 } from '../shaders/random.ts';

/**
 * How the volunteers pick their waits: `jittered` is the client as shipped (its own seeded draws through
 * volunteer/backoff.ts); `fixed` is the control, every draw 0, so every volunteer waits exactly half the step (the
 * first retry 500 ms after the drop) as a client without jitter would.
 */
export type RedialPolicy = 'jittered' | 'fixed';

export type ToClients =
  | { type: 'join'; hubUrl: string; count: number; seed: number; concurrency: number }
  | { type: 'arm'; policy: RedialPolicy }
  | { type: 'report' }
  | { type: 'exit' };

export interface ClientsReport {
  /** When each volunteer noticed the drop (its first state other than `waiting` since `arm`). */
  drops: number[];
  /** Every dial (a WebSocket constructed) since `arm`. */
  dials: number[];
  /** The most dials made in one turn of this process's event loop since `arm`. */
  largestBurst: number;
  /**
   * Volunteers that redialled in step: their first dial came in the same event-loop turn as a 500 ms timer set at
   * their drop, i.e. when a fixed 500 ms delay would have dialled. Timers set together for the same delay come due
   * in the same turn, so the control is in step to a volunteer however slowly this process works through the dials
   * (on a machine shared with other jobs, where arrival times smear); a jittered volunteer is in step only when its
   * draw fell within the lag of that turn.
   */
  inStep: number;
  /** Every handshake that opened since `arm`. */
  opens: number[];
  /** Each volunteer's return to `waiting` (welcome received) since `arm`. */
  welcomes: number[];
  /** Volunteers back in `waiting` now. */
  waiting: number;
  /** The reasons of every retry after each volunteer's first (the drop itself), by close name or kind. */
  retries: Record<string, number>;
  /** Socket errors of dials since `arm`, by code (ECONNREFUSED: nobody listened yet). */
  errors: Record<string, number>;
  /** Volunteers by the dials they needed to get back (1: the first dial after the drop). */
  attempts: Record<string, number>;
}

export type FromClients =
  | { type: 'joined'; count: number; failed: number; ms: number; why: Record<string, number> }
  | { type: 'armed' }
  | { type: 'back'; atMs: number }
  | ({ type: 'report' } & ClientsReport);

/** Milliseconds on a clock shared by this machine's processes. */
export const wallMs = (): number => performance.timeOrigin + performance.now();

/**
 * The loopback address volunteer `i` dials from (127.10.1.1, 127.10.1.2, …): the hub counts and limits connections
 * per client address, and 10,000 volunteers are 10,000 machines, not one NAT.
 */
export function volunteerAddress(i: number): string {
  return `127.${10 + Math.floor(i / 62_500)}.${1 + (Math.floor(i / 250) % 250)}.${1 + (i % 250)}`;
}

/** One volunteer and what the simulation notes of it since `arm`. */
interface Sim {
  client: VolunteerControls;
  /** It left `waiting` (the drop), then came back to it. */
  dropped: boolean;
  back: boolean;
  /** Retry states seen: the first is the drop's, any other a dial that did not get back. */
  retries: number;
  /** The event-loop turns of the first dial after the drop and of a 500 ms timer set at the drop (-1: not yet). */
  dialTurn: number;
  probeTurn: number;
}

const sims: Sim[] = [];
let policy: RedialPolicy = 'jittered';
let armed = false;
const fresh = (): ClientsReport => ({
  drops: [],
  dials: [],
  largestBurst: 0,
  inStep: 0,
  opens: [],
  welcomes: [],
  waiting: 0,
  retries: {},
  errors: {},
  attempts: {},
});
let rec = fresh();
let backCount = 0;

const send = (m: FromClients): void => {
  process.send?.(m);
};
const bump = (o: Record<string, number>, k: string): void => {
  o[k] = (o[k] ?? 0) + 1;
};

/** Event-loop turns: calls in one turn get the same number (the check phase's setImmediate moves it on). */
let turnNo = 0;
let turnOpen = false;
let dialsThisTurn = 0;
function turn(): number {
  if (!turnOpen) {
    turnOpen = true;
    dialsThisTurn = 0;
    setImmediate(() => {
      turnOpen = false;
      turnNo++;
    });
  }
  return turnNo;
}

function noteDial(sim: Sim): void {
  rec.dials.push(wallMs());
  const t = turn();
  rec.largestBurst = Math.max(rec.largestBurst, ++dialsThisTurn);
  if (sim.dropped && sim.dialTurn < 0) sim.dialTurn = t;
}

function addVolunteer(hubUrl: string, i: number, seed: number): Sim {
  const own = mulberry32((seed + Math.imul(i + 1, 0x9e3779b1)) >>> 0);
  const localAddress = volunteerAddress(i);
  const sim: Sim = { client: null as unknown as VolunteerControls, dropped: false, back: false, retries: 0, dialTurn: -1, probeTurn: -1 };
  /** `ws`'s WebSocket from this volunteer's address, noting each dial, open and error. */
  class NotedSocket extends WebSocket {
    constructor(url: string) {
      super(url, { perMessageDeflate: false, localAddress });
      if (!armed) return;
      noteDial(sim);
      this.on('open', () => rec.opens.push(wallMs()));
      this.on('error', (e: NodeJS.ErrnoException) => bump(rec.errors, e.code ?? e.message.slice(0, 40)));
    }
  }
  sim.client = createVolunteerClient({
    hubUrl,
    environment: async () => ({ gpu: null, ort: null, backend: 'wasm' }),
    identity: new MemoryIdentityStore(),
    cache: new NoShardCache(),
    WebSocket: NotedSocket as unknown as SocketFactory,
    workerId: `sim-${i}`,
    agent: 'reconnect-sim',
    random: () => (policy === 'fixed' ? 0 : own()),
  });
  sim.client.on('state', (s) => {
    if (!armed) return;
    if (s.kind === 'waiting') {
      if (sim.dropped && !sim.back) {
        sim.back = true;
        rec.welcomes.push(wallMs());
        bump(rec.attempts, String(sim.retries));
        if (++backCount === sims.length) send({ type: 'back', atMs: wallMs() });
      }
      return;
    }
    if (!sim.dropped) {
      rec.drops.push(wallMs());
      sim.dropped = true;
    }
    if (s.kind === 'retrying') {
      // Set in the same synchronous run as the client's own retry timer (it sets it right after this state).
      if (sim.retries === 0)
        setTimeout(() => {
          sim.probeTurn = turn();
        }, DEFAULT_BACKOFF.baseMs / 2);
      else bump(rec.retries, s.reason.split(':')[0] ?? s.reason);
      sim.retries++;
    }
  });
  return sim;
}

async function join(m: Extract<ToClients, { type: 'join' }>): Promise<void> {
  const t0 = wallMs();
  let failed = 0;
  let next = 0;
  const why: Record<string, number> = {};
  const one = (sim: Sim): Promise<void> =>
    new Promise((resolve) => {
      const off = sim.client.on('state', (s) => {
        if (s.kind === 'waiting' || s.kind === 'failed' || (s.kind === 'retrying' && s.attempt >= 3)) {
          if (s.kind !== 'waiting') {
            failed++;
            bump(why, s.kind === 'failed' ? s.message.slice(0, 80) : s.reason.slice(0, 80));
          }
          queueMicrotask(() => off());
          resolve();
        }
      });
      sim.client.join({ backend: 'wasm' });
    });
  await Promise.all(
    Array.from({ length: Math.max(1, m.concurrency) }, async () => {
      while (next < m.count) {
        const sim = addVolunteer(m.hubUrl, next++, m.seed);
        sims.push(sim);
        await one(sim);
      }
    }),
  );
  send({ type: 'joined', count: sims.length - failed, failed, ms: wallMs() - t0, why });
}

function arm(p: RedialPolicy): void {
  policy = p;
  armed = true;
  backCount = 0;
  rec = fresh();
  for (const s of sims) {
    s.dropped = false;
    s.back = false;
    s.retries = 0;
    s.dialTurn = -1;
    s.probeTurn = -1;
  }
  send({ type: 'armed' });
}

process.on('message', (m: ToClients) => {
  switch (m.type) {
    case 'join':
      void join(m);
      return;
    case 'arm':
      arm(m.policy);
      return;
    case 'report':
      send({
        type: 'report',
        ...rec,
        inStep: sims.filter((s) => s.dialTurn >= 0 && s.dialTurn === s.probeTurn).length,
        waiting: sims.filter((s) => s.client.state.kind === 'waiting').length,
      });
      return;
    case 'exit':
      process.exit(0);
  }
});
process.on('disconnect', () => process.exit(0));
