/**
 * `npx expertswarm hub …`: starts the hub with its coordinators. Settings come from flags, then environment
 * variables, then a JSON config file (--config), then the defaults printed by --help.
 */
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';
import { Hub, defaultConfig, type HubConfig } from './hub.ts';
import { buildApp } from './app.ts';
import type { PagesOptions } from './pages.ts';
import { DISPATCH_MODES, type DispatchMode } from './dispatch/policy.ts';
import { DEFAULT_CHANNEL } from './channel/channel.ts';
import { normalOrigin } from './channel/admission.ts';
import { checkedAdminToken } from './dashboard/admin.ts';
import { ADMIN_TOKEN_MIN_CHARS } from './limits.ts';
import { checkHubId, parseRedisUrl } from './cluster/keys.ts';
import { PUBLIC_URL } from './cluster/codec.ts';
import { checkedTurnConfig, DEFAULT_TURN_TTL_S } from './turn-credentials.ts';

const DEFAULTS = defaultConfig();

export const USAGE = `usage: expertswarm hub --model PATH.gguf [--model NAME=PATH.gguf …] [options]

  --model [NAME=]PATH        serve this GGUF model: the hub starts and supervises a linkcpp-server for it
                             (NAME defaults to the file name without .gguf; it is the "model" of the API)
  --coordinator-url NAME=URL register an external llama-server-compatible coordinator (polled and proxied)
  --port N                   HTTP port (default ${DEFAULTS.port}; env EXPERTSWARM_PORT)
  --host ADDR                listen address (default ${DEFAULTS.host}; env EXPERTSWARM_HOST)
  --slots N                  inference slots per coordinator (default ${DEFAULTS.slots}; env EXPERTSWARM_SLOTS)
  --ctx N                    context tokens per slot (default ${DEFAULTS.ctxPerSlot})
  --threads N                CPU threads per coordinator (default: llama.cpp's choice)
  --state DIR                durable state (SQLite) directory (default ${DEFAULTS.stateDir}; env EXPERTSWARM_STATE)
  --coordinator-bin PATH     linkcpp-server binary (default coordinator/bin/linkcpp-server)
  --saturate-at N            busy slots at which a model counts as saturated (default ${DEFAULTS.saturation.saturateAt})
  --target-base N            target replicas per expert at rest (default ${DEFAULTS.saturation.targetBase})
  --boost N                  extra replicas while saturated (default ${DEFAULTS.saturation.boost})
  --poll-ms N                /slots poll interval (default ${DEFAULTS.poller.intervalMs}), --poll-timeout-ms N (default ${DEFAULTS.poller.timeoutMs})
  --max-reading-age-ms N     older readings stop recruitment (default ${DEFAULTS.saturation.maxReadingAgeMs})
  --stale-ms N               coverage without heartbeat for this long is evicted (default ${DEFAULTS.staleMs})
  --grace-ms N               grace window of a new worker (default ${DEFAULTS.dispatch.graceMs})
  --idle-ms N                idle timeout since a worker's last serve (default ${DEFAULTS.dispatch.idleMs})
  --max-workers N            live worker cap (default ${DEFAULTS.maxWorkers})
  --dispatch MODE            auto: Layer 1 decides per worker (default); always: every pair a live worker covers goes
                             to it, and the market recruits the base target even at rest (tests, benchmarks);
                             off: the coordinator computes everything
  --dispatch-socket NAME=PATH  the dispatcher socket an external coordinator of NAME connects to
                             (start it with --expert-dispatch PATH); managed coordinators get one each
  --dispatch-deadline-ms N   per-layer wait of a managed coordinator for its dispatcher, and the cap of the
                             dispatcher's wait for workers (default ${DEFAULTS.dispatchDeadlineMs})
  --experts-on-demand        managed coordinators keep routed experts out of RAM until they compute one (mapped, read
                             on demand, no warmup): the experts the swarm serves are never read in (env
                             EXPERTSWARM_EXPERTS_ON_DEMAND=1)
  --probation N              audited work items a new worker must pass before its answers are used (default
                             ${DEFAULTS.trust.probation}); a failed audit quarantines the worker and its wallet
  --audit-rate R             share of a trusted worker's items held against the coordinator's own sums after that
                             (default ${DEFAULTS.trust.spotRate}); --probation 0 --audit-rate 0 trusts every answer
  --heartbeat-ms N           volunteer heartbeat interval (default ${DEFAULT_CHANNEL.heartbeatMs})
  --allow-origin ORIGIN      pages of this origin (https://host[:port]) may open the volunteer channel besides the
                             hub's own (repeatable). The join widget needs none: its frame is the hub's own page.
                             Clients that send no Origin (the headless volunteer) are not browsers and always may
                             open it
  --no-peers                 volunteers fetch slices from the hub only: no PeerJS signalling, no peer lists
                             (docs/peers.md; by default a newcomer gets chunks from peers that hold its slice)
  --peers-first              volunteers take chunks from peers first even while the hub is idle (spares its egress;
                             by default a peer far slower than an idle hub is passed over: docs/peers.md)
  --turn-url URL             a TURN server for peers behind NATs, turn:HOST[:PORT] (repeatable; stun: URLs too): each
                             volunteer's welcome carries it with a credential minted for that connection (TURN REST
                             API: coturn's use-auth-secret). Needs --turn-secret
  --turn-secret S            the secret shared with the TURN server (coturn's static-auth-secret), ≥ 16 characters.
                             Prefer env EXPERTSWARM_TURN_SECRET (a flag shows in the process list)
  --turn-ttl SECONDS         how long a minted TURN credential lasts (default ${DEFAULT_TURN_TTL_S})
  --admin-token TOKEN        enables the dashboard's admin actions (release, quarantine, targets, dispatch mode) for
                             requests carrying Authorization: Bearer TOKEN; at least ${ADMIN_TOKEN_MIN_CHARS} characters. Prefer
                             env EXPERTSWARM_ADMIN_TOKEN (a flag shows in the process list). Without one they are disabled
  --redis URL                join the cluster of hubs sharing this Redis (redis://host:port[/db], rediss://…,
                             unix:///path/redis.sock; env EXPERTSWARM_REDIS): worker records, quarantine and credit
                             are shared, every hub's dispatch map and demand see every hub's workers (docs/cluster.md).
                             Without it the hub stands alone (SQLite and memory)
  --hub-id ID                this hub's name in the cluster (default: host name, pid and 4 random hex digits)
  --hub-url URL              where the other hubs reach this one (ws://host:port or wss://…; default: the address it
                             listens on): they relay work to the volunteers attached here (docs/cluster.md)
  --public-url URL           where clients and volunteers reach this hub (http://host:port or https://…; default:
                             --hub-url as http(s)): listed to them by every hub of the cluster (/api/health, welcome)
  --config FILE              JSON file with any of: port, host, slots, ctxPerSlot, threads, stateDir, models
                             ([{path, name?}]), externals ([{name, url}]), adminToken, expertsOnDemand, channel
                             ({allowedOrigins, maxPerAddress, maxPerWallet, opensPerAddress}) and http ({socketsPerAddress,
                             socketsMax, headersTimeoutMs, requestTimeoutMs}): behind a reverse proxy every client has its
                             address, so raise the per-address caps there (docs/threat-model.md)
  --help                     this text
`;

function pair(v: string, what: string): [string, string] {
  const i = v.indexOf('=');
  if (i <= 0) throw new Error(`${what} must be NAME=VALUE, got "${v}"`);
  return [v.slice(0, i), v.slice(i + 1)];
}

function int(v: string | undefined, name: string, min = 0): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer ≥ ${min}, got "${v}"`);
  return n;
}

export function parseHubArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): HubConfig | 'help' {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      model: { type: 'string', multiple: true },
      'coordinator-url': { type: 'string', multiple: true },
      port: { type: 'string' },
      host: { type: 'string' },
      slots: { type: 'string' },
      ctx: { type: 'string' },
      threads: { type: 'string' },
      state: { type: 'string' },
      'coordinator-bin': { type: 'string' },
      'saturate-at': { type: 'string' },
      'target-base': { type: 'string' },
      boost: { type: 'string' },
      'poll-ms': { type: 'string' },
      'poll-timeout-ms': { type: 'string' },
      'max-reading-age-ms': { type: 'string' },
      'stale-ms': { type: 'string' },
      'grace-ms': { type: 'string' },
      'idle-ms': { type: 'string' },
      'max-workers': { type: 'string' },
      dispatch: { type: 'string' },
      'dispatch-socket': { type: 'string', multiple: true },
      'heartbeat-ms': { type: 'string' },
      'allow-origin': { type: 'string', multiple: true },
      'no-peers': { type: 'boolean' },
      'peers-first': { type: 'boolean' },
      'turn-url': { type: 'string', multiple: true },
      'turn-secret': { type: 'string' },
      'turn-ttl': { type: 'string' },
      'audit-rate': { type: 'string' },
      probation: { type: 'string' },
      'dispatch-deadline-ms': { type: 'string' },
      'experts-on-demand': { type: 'boolean' },
      'admin-token': { type: 'string' },
      redis: { type: 'string' },
      'hub-id': { type: 'string' },
      'hub-url': { type: 'string' },
      'public-url': { type: 'string' },
      config: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return 'help';
  const file: Partial<HubConfig> = values.config ? (JSON.parse(readFileSync(values.config, 'utf8')) as Partial<HubConfig>) : {};
  const c = defaultConfig(file);
  const set = <K extends keyof HubConfig>(k: K, v: HubConfig[K] | undefined): void => {
    if (v !== undefined) c[k] = v;
  };
  set('port', int(values.port ?? env.EXPERTSWARM_PORT, '--port'));
  set('host', values.host ?? env.EXPERTSWARM_HOST);
  set('slots', int(values.slots ?? env.EXPERTSWARM_SLOTS, '--slots', 1));
  set('ctxPerSlot', int(values.ctx, '--ctx', 64));
  set('threads', int(values.threads, '--threads', 1));
  set('stateDir', values.state ?? env.EXPERTSWARM_STATE);
  set('coordinatorBinary', values['coordinator-bin']);
  set('staleMs', int(values['stale-ms'], '--stale-ms', 1000));
  set('maxWorkers', int(values['max-workers'], '--max-workers', 1));
  const sat = c.saturation;
  sat.saturateAt = int(values['saturate-at'], '--saturate-at', 1) ?? sat.saturateAt;
  sat.targetBase = int(values['target-base'], '--target-base', 1) ?? sat.targetBase;
  sat.boost = int(values.boost, '--boost', 0) ?? sat.boost;
  sat.maxReadingAgeMs = int(values['max-reading-age-ms'], '--max-reading-age-ms', 1) ?? sat.maxReadingAgeMs;
  c.poller.intervalMs = int(values['poll-ms'], '--poll-ms', 100) ?? c.poller.intervalMs;
  c.poller.timeoutMs = int(values['poll-timeout-ms'], '--poll-timeout-ms', 50) ?? c.poller.timeoutMs;
  c.dispatch.graceMs = int(values['grace-ms'], '--grace-ms', 0) ?? c.dispatch.graceMs;
  c.dispatch.idleMs = int(values['idle-ms'], '--idle-ms', 0) ?? c.dispatch.idleMs;
  for (const m of values.model ?? []) {
    const i = m.indexOf('=');
    c.models.push(i > 0 && !m.slice(0, i).includes('/') ? { name: m.slice(0, i), path: m.slice(i + 1) } : { path: m });
  }
  if (values.dispatch !== undefined) {
    if (!(DISPATCH_MODES as readonly string[]).includes(values.dispatch))
      throw new Error(`--dispatch must be one of ${DISPATCH_MODES.join(', ')}, got "${values.dispatch}"`);
    c.dispatchMode = values.dispatch as DispatchMode;
  }
  for (const d of values['dispatch-socket'] ?? []) {
    const [name, path] = pair(d, '--dispatch-socket');
    c.dispatchSockets.push({ name, path });
  }
  if (values['audit-rate'] !== undefined) {
    const r = Number(values['audit-rate']);
    if (!(r >= 0 && r <= 1)) throw new Error(`--audit-rate must be a number in [0, 1], got "${values['audit-rate']}"`);
    c.trust = { ...c.trust, spotRate: r };
  }
  const probation = int(values.probation, '--probation', 0);
  if (probation !== undefined) c.trust = { ...c.trust, probation };
  set('dispatchDeadlineMs', int(values['dispatch-deadline-ms'], '--dispatch-deadline-ms', 1));
  if (values['experts-on-demand'] || ['1', 'true'].includes(env.EXPERTSWARM_EXPERTS_ON_DEMAND ?? '')) c.expertsOnDemand = true;
  const heartbeatMs = int(values['heartbeat-ms'], '--heartbeat-ms', 1000);
  if (heartbeatMs !== undefined) c.channel = { ...c.channel, heartbeatMs, idleTimeoutMs: 3 * heartbeatMs };
  if (values['no-peers']) c.peers = { ...c.peers, enabled: false };
  if (values['peers-first']) c.peers = { ...c.peers, peersFirst: true };
  const turnSecret = values['turn-secret'] ?? (env.EXPERTSWARM_TURN_SECRET || undefined);
  if (values['turn-url'] !== undefined || turnSecret !== undefined || values['turn-ttl'] !== undefined) {
    const file = c.peers?.turn;
    const ttlS = int(values['turn-ttl'], '--turn-ttl', 1) ?? file?.ttlS;
    c.peers = {
      ...c.peers,
      turn: checkedTurnConfig({ urls: values['turn-url'] ?? file?.urls, secret: turnSecret ?? file?.secret, ...(ttlS ? { ttlS } : {}) }),
    };
  }
  const origins = (values['allow-origin'] ?? []).map(normalOrigin);
  if (origins.length > 0) c.channel = { ...c.channel, allowedOrigins: [...(c.channel.allowedOrigins ?? []), ...origins] };
  // An empty variable (`EXPERTSWARM_ADMIN_TOKEN=` in a unit file or compose file) is unset, not "no token": it must not
  // silently turn off a token the --config file sets.
  const envToken = env.EXPERTSWARM_ADMIN_TOKEN === '' ? undefined : env.EXPERTSWARM_ADMIN_TOKEN;
  const adminToken = values['admin-token'] ?? envToken;
  if (adminToken !== undefined) c.adminToken = checkedAdminToken(adminToken);
  else if (c.adminToken !== null) c.adminToken = checkedAdminToken(c.adminToken); // from --config
  // An empty variable is unset, as for the admin token.
  const redis = values.redis ?? (env.EXPERTSWARM_REDIS === '' ? undefined : env.EXPERTSWARM_REDIS);
  if (redis !== undefined) c.redis = redis;
  if (c.redis !== null) parseRedisUrl(c.redis); // a malformed URL (flag, variable or --config) stops the start here
  if (values['hub-id'] !== undefined) c.cluster = { ...c.cluster, hubId: checkHubId(values['hub-id']) };
  if (values['hub-url'] !== undefined) {
    if (!/^wss?:\/\/[^\s/?#]+\/?$/.test(values['hub-url'])) throw new Error('--hub-url takes a ws:// or wss:// base URL (ws://host:port)');
    c.cluster = { ...c.cluster, relayUrl: values['hub-url'] };
  }
  if (values['public-url'] !== undefined) {
    if (!PUBLIC_URL.test(values['public-url'])) throw new Error('--public-url takes an http:// or https:// origin (https://host[:port])');
    if (c.redis === null) throw new Error('--public-url says where clients reach this hub of a cluster: give --redis URL too');
    c.cluster = { ...c.cluster, publicUrl: values['public-url'] };
  }
  if (c.redis === null && values['hub-url'] !== undefined)
    throw new Error('--hub-url says where the other hubs of a cluster reach this one: give --redis URL too');
  if (c.redis === null && values['hub-id'] !== undefined) throw new Error('--hub-id names this hub in a cluster: give --redis URL too');
  for (const u of values['coordinator-url'] ?? []) {
    const [name, url] = pair(u, '--coordinator-url');
    c.externals.push({ name, url });
  }
  if (c.models.length === 0 && c.externals.length === 0) throw new Error('give at least one --model or --coordinator-url');
  return c;
}

export async function runHub(
  config: HubConfig,
  log: (line: string) => void = console.log,
  pages: PagesOptions = {},
): Promise<{ hub: Hub; close: () => Promise<void>; url: string }> {
  const hub = new Hub(config);
  await hub.load();
  const app = await buildApp(hub, pages);
  const address = await app.listen({ port: config.port, host: config.host });
  log(`[hub] API on ${address} — models: ${hub.servedModels().join(', ')}; starting coordinators…`);
  try {
    await hub.start();
  } catch (e) {
    // A hub that cannot start (a coordinator binary missing) lets go of its port, sockets and database, so that its
    // process can exit with the error instead of holding them open.
    await app.close().catch(() => {});
    await hub.stop().catch(() => {});
    throw e;
  }
  for (const c of hub.coordinators()) log(`[hub] coordinator ${c.name}: ${c.state}${c.url ? ` at ${c.url}` : ''}`);
  return {
    hub,
    url: address,
    close: async () => {
      await app.close();
      await hub.stop();
    },
  };
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command !== 'hub') {
    console.error(USAGE);
    return command === '--help' || command === '-h' ? 0 : 2;
  }
  let config: HubConfig | 'help';
  try {
    config = parseHubArgs(rest);
  } catch (e) {
    console.error(`expertswarm: ${(e as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (config === 'help') {
    console.log(USAGE);
    return 0;
  }
  const running = await runHub(config);
  await new Promise<void>((resolve) => {
    const stop = (): void => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await running.close();
  return 0;
}
