/**
 * The JSON control messages of the volunteer channel (hello, loaded, heartbeat, assign, release, …): their types,
 * the strict parsers each end runs on what it receives, and encoders that check their own output with the same parser.
 */
import type { Backend, Numerics } from '../numerics.ts';
import type { HeldRange } from '../slice.ts';
import { VolunteerWireError, badFrame, tooLarge } from './close-codes.ts';
import { WIRE_ENCODINGS, type WireEncoding } from './encodings.ts';
import { VARIANT_FEATURES, type VariantFeature } from '../variant.ts';
import { TENSOR_TYPE_NAMES } from '../tensor-types.ts';
import { Fields, type Obj, parseObject, show } from './json-fields.ts';
import { type IceServer, parseIceServers, wireIceServers } from './ice-servers.ts';
import { VOLUNTEER_LIMITS, VOLUNTEER_WIRE_VERSION } from './limits.ts';
import { sentence } from './text.ts';

const WORKER_ID = /^[A-Za-z0-9._:-]+$/;
const TOKEN = /^[\x21-\x7e]+$/;
const FEATURE = /^[a-z0-9_-]+$/;
/** A path on the hub's own origin: one leading '/', no backslash (browsers read '\' as '/'), printable ASCII. */
const SHARD_URL = /^\/(?![/\\])[\x21-\x5b\x5d-\x7e]*$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;
/** PeerJS ids and tokens as the hub issues them, and a path of the hub's own origin. */
const PEER_ID = /^[A-Za-z0-9]+$/;
const PEER_PATH = /^\/[A-Za-z0-9/_-]*$/;

/** The device as hello states it (mirrors volunteer/state.ts DeviceReport). */
export interface HelloDevice {
  webgpu: boolean;
  adapter: { vendor: string; architecture: string; description: string; isFallbackAdapter: boolean } | null;
  limits: { maxStorageBufferBindingSize: number; maxBufferSize: number } | null;
  /** WebGPU feature names of the adapter (e.g. "shader-f16"). */
  features: string[];
  /** The backend the client chose, if it measured before joining. */
  backend: Backend | null;
  /** That backend's measured speed, GFLOP/s. */
  gflops: number | null;
  /** The memory the volunteer lends, bytes. */
  memoryBudgetBytes: number;
}

/** A volunteer's first message on the channel: version, token, worker id, device (the dispatch socket's is DispatchHello). */
export interface ChannelHello {
  type: 'hello';
  version: number;
  /** The node token from `POST /api/auth/node-token`. */
  token: string;
  /** Stable id the client chose (kept across reloads), `[A-Za-z0-9._:-]{1,128}`. */
  workerId: string;
  device: HelloDevice;
  /** How this client can round ('llama' needs the llama-numerics kernels); unknown entries are dropped. */
  numerics: Numerics[];
  /** Encodings it can read rows in and write sums in; must include 'f32'; unknown entries are dropped. */
  encodings: WireEncoding[];
  /**
   * Expert FFN variant features it computes (protocol/variant.ts: 'silu', 'swiglu_oai', 'bias'); unknown entries are
   * dropped. Optional on the wire: a client that sends none computes ['silu'] (every client before it existed), and
   * it is offered only slices of layers whose variant it computes.
   */
  variants?: VariantFeature[];
  /**
   * The ggml weight types its engine reads ("Q4_K", "IQ2_XXS"; protocol/tensor-types.ts); unknown names are dropped.
   * Optional on the wire: a client that sends none is offered every type (every client before issue 26); one that
   * sends them is offered only layers whose gate, up and down it reads.
   */
  types?: string[];
  /** Preferred model ('' = any). */
  model: string;
  /** Widest slice it wants (0 = no limit), as `max_experts` of `POST /api/expert-volunteer`. */
  maxExperts: number;
  /**
   * Slices it holds at once (`max_slices`, 1…maxSlices). Optional on the wire: a client that sends none holds one
   * (every client before multi-slice volunteers), and an `assign` replaces what it holds; with more, an `assign` adds
   * a slice (of the same model) and `release` frees only the slice it names.
   */
  maxSlices?: number;
  /** Free-form description of the client, for the hub's logs and dashboard ('' = none). */
  agent: string;
}

export interface Loaded {
  type: 'loaded';
  assignmentId: number;
  /** Accepting work now (false when paused while it loaded). */
  ready: boolean;
  backend: Backend;
  gflops: number;
  /**
   * Optional (docs/peers.md): the slice's bytes this load took from other volunteers and from the hub (both 0 when it
   * came from the cache). Each ≤ 2^50.
   */
  peerBytes?: number;
  hubBytes?: number;
}

export const LOAD_FAILED_CODES = Object.freeze([
  'DOWNLOAD_FAILED',
  'DIGEST_MISMATCH',
  'SHARD_INVALID',
  'DOES_NOT_FIT',
  'NO_BACKEND',
  'UNSUPPORTED_NUMERICS',
  'ENGINE_FAILED',
  'CANCELLED',
] as const);
export type LoadFailedCode = (typeof LOAD_FAILED_CODES)[number];

export interface LoadFailed {
  type: 'load_failed';
  assignmentId: number;
  code: LoadFailedCode;
  message: string;
}

export interface Heartbeat {
  type: 'heartbeat';
  /** The model of the coverage ('' when it holds nothing). */
  model: string;
  /** Only what is loaded and serving now; empty while waiting or loading. */
  coverage: HeldRange[];
  paused: boolean;
  /** Pairs served since the connection opened, and work frames queued right now. */
  stats: { pairsServed: number; queueDepth: number };
}

export interface Pause {
  type: 'pause';
}
export interface Resume {
  type: 'resume';
}
export interface Leave {
  type: 'leave';
}
/** Either side may send ping; the other answers pong with the same id at once. */
export interface Ping {
  type: 'ping';
  id: number;
}
export interface Pong {
  type: 'pong';
  id: number;
}

/** Why a volunteer reports a peer (docs/peers.md): a chunk that did not match its hash, or a message it could not read. */
export const PEER_REPORT_CODES = Object.freeze(['BAD_CHUNK', 'BAD_MESSAGE'] as const);
export type PeerReportCode = (typeof PEER_REPORT_CODES)[number];

/** A peer listed for the volunteer's assignment misbehaved; the hub stops listing it (docs/peers.md). */
export interface PeerReport {
  type: 'peer_report';
  assignmentId: number;
  /** The peer's PeerJS id, as the assign listed it. */
  peerId: string;
  code: PeerReportCode;
  /** The chunk that did not match, or null. */
  chunk: number | null;
  /** A sentence for the hub's event log (≤ 512, cleaned by the encoder). */
  detail: string;
}

export type ClientMessage = ChannelHello | Loaded | LoadFailed | Heartbeat | Pause | Resume | Leave | Ping | Pong | PeerReport;

/** Where and as whom a volunteer joins the hub's PeerJS signalling server (welcome's optional `peer`, docs/peers.md). */
export interface WelcomePeer {
  /** The server's path on the hub's origin (its WebSocket is `${path}/peerjs`). */
  path: string;
  /** The PeerJS key the server accepts. */
  key: string;
  /** This connection's peer id (`p` and hex) and token: the server admits only ids the hub issued. */
  id: string;
  token: string;
  /**
   * Optional (issue 29): STUN/TURN servers for the peer connections, TURN ones with short-lived credentials the hub
   * minted for this connection (protocol/channel/ice-servers.ts). Absent: none (peers meet only where host candidates
   * reach).
   */
  iceServers?: IceServer[];
}

export interface Welcome {
  type: 'welcome';
  version: number;
  /** The hello's worker id, echoed. */
  workerId: string;
  /** How often the client sends heartbeat, ms. */
  heartbeatMs: number;
  /** The hub closes with IDLE_TIMEOUT when nothing has arrived for this long, ms (≥ heartbeatMs). */
  idleTimeoutMs: number;
  /** The result encoding the hub will ask for (each work frame states its own). */
  encoding: WireEncoding;
  /** Pairs credited to this wallet so far. */
  credit: number;
  /** Optional: volunteers of this hub pass slices to each other (docs/peers.md); absent when the hub does not. */
  peer?: WelcomePeer;
  /**
   * Optional (issue 30, docs/cluster.md): the other live hubs of this hub's cluster, `http(s)://` origins, that the
   * volunteer may dial when this one fails; absent for a hub alone.
   */
  hubs?: string[];
}

export interface Assign {
  type: 'assign';
  /** The hub's id for this assignment, u32 ≥ 1; work frames and loaded/load_failed/release name it. */
  assignmentId: number;
  model: string;
  layer: number;
  /** `[begin, end)`; local expert ids in work frames are expert − begin, below end − begin. */
  experts: [number, number];
  nEmbd: number;
  nExpert: number;
  numerics: Numerics;
  /** Path and query on the hub's origin (never a full URL): `/api/expert-shard?…`. */
  shardUrl: string;
  shardBytes: number;
  /** `sha256:<64 hex>` of the shard's bytes. */
  shardDigest: string;
  /**
   * Optional (docs/peers.md): PeerJS ids of live volunteers holding (or fetching) the same digest, holders first, ≤ 16,
   * and the path of the slice's per-chunk hash list. Absent: download from the hub alone.
   */
  peers?: string[];
  chunksUrl?: string;
}

export const RELEASE_CODES = Object.freeze(['NOT_NEEDED', 'MODEL_GONE', 'LOAD_TIMEOUT', 'REBALANCE', 'VERIFICATION_FAILED'] as const);
export type ReleaseCode = (typeof RELEASE_CODES)[number];

export interface Release {
  type: 'release';
  assignmentId: number;
  code: ReleaseCode;
  /** A sentence for the volunteer's page. */
  reason: string;
}

export interface Credit {
  type: 'credit';
  /** Pairs credited to this wallet in total (durable). */
  credit: number;
  /**
   * Optional (hubs of multi-slice volunteers): pairs credited to each slice this connection holds, by assignment id,
   * since it was assigned (≤ maxSlices entries; older clients ignore the field).
   */
  slices?: SliceCredit[];
}

/** One held slice's credit in a `credit` message. */
export interface SliceCredit {
  assignmentId: number;
  credit: number;
}

export type HubMessage = Welcome | Assign | Release | Credit | Ping | Pong;

function helloVersion(f: Fields): number {
  const version = f.int('version', 0, Number.MAX_SAFE_INTEGER);
  if (version !== VOLUNTEER_WIRE_VERSION) {
    throw new VolunteerWireError('UNSUPPORTED_VERSION', `version ${version}; this side speaks ${VOLUNTEER_WIRE_VERSION}`);
  }
  return version;
}

const L = VOLUNTEER_LIMITS;
const assignmentId = (f: Fields): number => f.int('assignment_id', 1, 0xffffffff);

function parseDevice(d: Fields): HelloDevice {
  let adapter: HelloDevice['adapter'] = null;
  if (d.has('adapter')) {
    const a = d.obj('adapter');
    adapter = {
      vendor: a.str('vendor', L.maxAdapterChars),
      architecture: a.str('architecture', L.maxAdapterChars),
      description: a.str('description', L.maxAdapterChars),
      isFallbackAdapter: a.bool('is_fallback_adapter'),
    };
  }
  let limits: HelloDevice['limits'] = null;
  if (d.has('limits')) {
    const l = d.obj('limits');
    limits = {
      maxStorageBufferBindingSize: l.int('max_storage_buffer_binding_size', 0, L.maxDeviceBytes, L.maxDeviceBytes),
      maxBufferSize: l.int('max_buffer_size', 0, L.maxDeviceBytes, L.maxDeviceBytes),
    };
  }
  const features = d.list('features', L.maxFeatures).map((x, i) => {
    if (typeof x !== 'string') throw badFrame(`${d.name('features')}[${i}] must be a string`);
    if (x.length > L.maxFeatureChars)
      throw tooLarge(`${d.name('features')}[${i}] has ${x.length} characters, the cap is ${L.maxFeatureChars}`);
    if (!FEATURE.test(x)) throw badFrame(`${d.name('features')}[${i}] ${show(x)} is not a feature name`);
    return x;
  });
  return {
    webgpu: d.bool('webgpu'),
    adapter,
    limits,
    features,
    backend: d.has('backend') ? d.oneOf<Backend>('backend', ['webgpu', 'wasm']) : null,
    gflops: d.has('gflops') ? d.num('gflops', 0, L.maxGflops) : null,
    memoryBudgetBytes: d.int('memory_budget_bytes', 0, L.maxDeviceBytes, L.maxDeviceBytes),
  };
}

function parseHello(f: Fields): ChannelHello {
  const version = helloVersion(f);
  const token = f.get('token');
  if (typeof token !== 'string' || token.length === 0 || token.length > L.maxTokenChars || !TOKEN.test(token)) {
    throw new VolunteerWireError('BAD_TOKEN', 'hello.token must be the node token from POST /api/auth/node-token');
  }
  const numerics = f.known<Numerics>('numerics', ['exact', 'llama']);
  if (numerics.length === 0) throw badFrame('hello.numerics names no numerics this hub knows (exact, llama)');
  const encodings = f.known<WireEncoding>('encodings', WIRE_ENCODINGS);
  if (!encodings.includes('f32')) throw badFrame("hello.encodings must include 'f32'");
  return {
    type: 'hello',
    version,
    token,
    workerId: f.str('worker_id', L.maxWorkerIdChars, { min: 1, pattern: WORKER_ID }),
    device: parseDevice(f.obj('device')),
    numerics,
    encodings,
    ...(f.has('variants') && { variants: f.known<VariantFeature>('variants', VARIANT_FEATURES) }),
    ...(f.has('types') && { types: f.known<string>('types', TENSOR_TYPE_NAMES, L.maxTypesListed) }),
    model: f.has('model') ? f.str('model', L.maxModelChars) : '',
    maxExperts: f.has('max_experts') ? f.int('max_experts', 0, L.maxOfferExperts, L.maxOfferExperts) : 0,
    ...(f.has('max_slices') && { maxSlices: f.int('max_slices', 1, L.maxSlices, L.maxSlices) }),
    agent: f.has('agent') ? f.str('agent', L.maxAgentChars) : '',
  };
}

function parseCoverage(f: Fields): HeldRange[] {
  return f.list('coverage', L.maxCoverageRanges).map((r, i) => {
    const at = `${f.name('coverage')}[${i}]`;
    if (!Array.isArray(r) || r.length !== 3 || !r.every((x) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0)) {
      throw badFrame(`${at} must be [layer, begin, end] of integers ≥ 0`);
    }
    const [layer, begin, end] = r as HeldRange;
    if (layer >= L.maxLayers) throw tooLarge(`${at}: layer ${layer} is not below ${L.maxLayers}`);
    if (end > L.maxExperts) throw tooLarge(`${at}: end ${end} exceeds ${L.maxExperts} experts`);
    if (begin >= end) throw badFrame(`${at}: begin ${begin} must be below end ${end}`);
    return [layer, begin, end];
  });
}

/** welcome.hubs: at most maxHubs `http(s)://host[:port]` origins (a trailing slash allowed). */
function parseHubs(g: Fields, k: string): string[] {
  return g.list(k, L.maxHubs).map((h, i) => {
    if (typeof h !== 'string' || h.length > L.maxHubUrlChars || !HUB_ORIGIN.test(h))
      throw badFrame(`${k}[${i}] must be an http:// or https:// origin of at most ${L.maxHubUrlChars} characters, got ${show(h)}`);
    return h;
  });
}

const HUB_ORIGIN = /^https?:\/\/[^\s/?#@]+\/?$/;

function parseWelcomePeer(p: Fields): WelcomePeer {
  return {
    path: p.str('path', L.maxPeerPathChars, { min: 1, pattern: PEER_PATH }),
    key: p.str('key', L.maxPeerIdChars, { min: 1, pattern: PEER_ID }),
    id: p.str('id', L.maxPeerIdChars, { min: 1, pattern: PEER_ID }),
    token: p.str('token', L.maxPeerIdChars, { min: 1, pattern: PEER_ID }),
    ...(p.has('ice_servers') ? { iceServers: parseIceServers(p) } : {}),
  };
}

/** Parses a client → hub text message (what the hub receives). Throws VolunteerWireError. */
export function parseClientMessage(data: string | Uint8Array): ClientMessage {
  const { type, f: g } = parseObject(data);
  switch (type) {
    case 'hello':
      return parseHello(g);
    case 'loaded':
      return {
        type,
        assignmentId: assignmentId(g),
        ready: g.bool('ready'),
        backend: g.oneOf<Backend>('backend', ['webgpu', 'wasm']),
        gflops: g.num('gflops', 0, L.maxGflops),
        ...(g.has('peer_bytes') ? { peerBytes: g.int('peer_bytes', 0, L.maxDeviceBytes, L.maxDeviceBytes) } : {}),
        ...(g.has('hub_bytes') ? { hubBytes: g.int('hub_bytes', 0, L.maxDeviceBytes, L.maxDeviceBytes) } : {}),
      };
    case 'peer_report':
      return {
        type,
        assignmentId: assignmentId(g),
        peerId: g.str('peer_id', L.maxPeerIdChars, { min: 1, pattern: PEER_ID }),
        code: g.oneOf('code', PEER_REPORT_CODES),
        chunk: g.has('chunk') ? g.int('chunk', 0, 0xffffffff) : null,
        detail: g.str('detail', L.maxMessageChars),
      };
    case 'load_failed':
      return {
        type,
        assignmentId: assignmentId(g),
        code: g.oneOf('code', LOAD_FAILED_CODES),
        message: g.str('message', L.maxMessageChars),
      };
    case 'heartbeat': {
      const stats = g.obj('stats');
      return {
        type,
        model: g.str('model', L.maxModelChars),
        coverage: parseCoverage(g),
        paused: g.bool('paused'),
        stats: {
          pairsServed: stats.int('pairs_served', 0, Number.MAX_SAFE_INTEGER),
          queueDepth: stats.int('queue_depth', 0, L.maxQueueDepth, L.maxQueueDepth),
        },
      };
    }
    case 'pause':
    case 'resume':
    case 'leave':
      return { type };
    case 'ping':
    case 'pong':
      return { type, id: g.int('id', 0, 0xffffffff) };
    default:
      throw badFrame(`unknown client message type ${show(type)}`);
  }
}

/** Parses a hub → client text message (what the client receives). Throws VolunteerWireError. */
export function parseHubMessage(data: string | Uint8Array): HubMessage {
  const { type, f: g } = parseObject(data);
  switch (type) {
    case 'welcome': {
      const version = helloVersion(g);
      const heartbeatMs = g.int('heartbeat_ms', L.minIntervalMs, L.maxIntervalMs);
      return {
        type,
        version,
        workerId: g.str('worker_id', L.maxWorkerIdChars, { min: 1, pattern: WORKER_ID }),
        heartbeatMs,
        idleTimeoutMs: g.int('idle_timeout_ms', heartbeatMs, L.maxIntervalMs),
        encoding: g.oneOf('encoding', WIRE_ENCODINGS),
        credit: g.int('credit', 0, Number.MAX_SAFE_INTEGER),
        ...(g.has('peer') ? { peer: parseWelcomePeer(g.obj('peer')) } : {}),
        ...(g.has('hubs') ? { hubs: parseHubs(g, 'hubs') } : {}),
      };
    }
    case 'assign': {
      const nExpert = g.int('n_expert', 1, L.maxExperts, L.maxExperts);
      const experts = g.list('experts', 2);
      const [begin, end] = experts;
      if (
        experts.length !== 2 ||
        typeof begin !== 'number' ||
        typeof end !== 'number' ||
        !Number.isInteger(begin) ||
        !Number.isInteger(end) ||
        begin < 0 ||
        begin >= end ||
        end > nExpert
      ) {
        throw badFrame(`assign.experts must be [begin, end) with 0 ≤ begin < end ≤ n_expert ${nExpert}`);
      }
      return {
        type,
        assignmentId: assignmentId(g),
        model: g.str('model', L.maxModelChars, { min: 1 }),
        layer: g.int('layer', 0, L.maxLayers - 1, L.maxLayers - 1),
        experts: [begin, end],
        nEmbd: g.int('n_embd', 1, L.maxEmbd, L.maxEmbd),
        nExpert,
        numerics: g.oneOf<Numerics>('numerics', ['exact', 'llama']),
        shardUrl: g.str('shard_url', L.maxShardUrlChars, { min: 1, pattern: SHARD_URL }),
        shardBytes: g.int('shard_bytes', 1, L.maxDeviceBytes, L.maxDeviceBytes),
        shardDigest: g.str('shard_digest', 71, { min: 1, pattern: DIGEST }),
        ...(g.has('peers')
          ? {
              peers: g.list('peers', L.maxPeersListed).map((x, i) => {
                if (typeof x !== 'string' || x.length === 0 || !PEER_ID.test(x)) throw badFrame(`assign.peers[${i}] is not a peer id`);
                if (x.length > L.maxPeerIdChars)
                  throw tooLarge(`assign.peers[${i}] has ${x.length} characters, the cap is ${L.maxPeerIdChars}`);
                return x;
              }),
            }
          : {}),
        ...(g.has('chunks_url') ? { chunksUrl: g.str('chunks_url', L.maxShardUrlChars, { min: 1, pattern: SHARD_URL }) } : {}),
      };
    }
    case 'release':
      return { type, assignmentId: assignmentId(g), code: g.oneOf('code', RELEASE_CODES), reason: g.str('reason', L.maxMessageChars) };
    case 'credit':
      return {
        type,
        credit: g.int('credit', 0, Number.MAX_SAFE_INTEGER),
        ...(g.has('slices')
          ? {
              slices: g.list('slices', L.maxSlices).map((x, i) => {
                const s = Fields.of(x, `credit.slices[${i}]`);
                return { assignmentId: assignmentId(s), credit: s.int('credit', 0, Number.MAX_SAFE_INTEGER) };
              }),
            }
          : {}),
      };
    case 'ping':
    case 'pong':
      return { type, id: g.int('id', 0, 0xffffffff) };
    default:
      throw badFrame(`unknown hub message type ${show(type)}`);
  }
}

function wireClient(m: ClientMessage): Obj {
  switch (m.type) {
    case 'hello': {
      const d = m.device;
      return {
        type: m.type,
        version: m.version,
        token: m.token,
        worker_id: m.workerId,
        device: {
          webgpu: d.webgpu,
          adapter: d.adapter && {
            vendor: d.adapter.vendor,
            architecture: d.adapter.architecture,
            description: d.adapter.description,
            is_fallback_adapter: d.adapter.isFallbackAdapter,
          },
          limits: d.limits && {
            max_storage_buffer_binding_size: d.limits.maxStorageBufferBindingSize,
            max_buffer_size: d.limits.maxBufferSize,
          },
          features: d.features,
          backend: d.backend,
          gflops: d.gflops,
          memory_budget_bytes: d.memoryBudgetBytes,
        },
        numerics: m.numerics,
        encodings: m.encodings,
        ...(m.variants && { variants: m.variants }),
        ...(m.types && { types: m.types }),
        model: m.model,
        max_experts: m.maxExperts,
        ...(m.maxSlices !== undefined && { max_slices: m.maxSlices }),
        agent: m.agent,
      };
    }
    case 'loaded':
      return {
        type: m.type,
        assignment_id: m.assignmentId,
        ready: m.ready,
        backend: m.backend,
        gflops: m.gflops,
        ...(m.peerBytes !== undefined ? { peer_bytes: m.peerBytes } : {}),
        ...(m.hubBytes !== undefined ? { hub_bytes: m.hubBytes } : {}),
      };
    case 'peer_report':
      return {
        type: m.type,
        assignment_id: m.assignmentId,
        peer_id: m.peerId,
        code: m.code,
        chunk: m.chunk,
        detail: sentence(m.detail, L.maxMessageChars),
      };
    case 'load_failed':
      return { type: m.type, assignment_id: m.assignmentId, code: m.code, message: sentence(m.message, L.maxMessageChars) };
    case 'heartbeat':
      return {
        type: m.type,
        model: m.model,
        coverage: m.coverage,
        paused: m.paused,
        stats: { pairs_served: m.stats.pairsServed, queue_depth: m.stats.queueDepth },
      };
    case 'ping':
    case 'pong':
      return { type: m.type, id: m.id };
    default:
      return { type: m.type };
  }
}

function wireHub(m: HubMessage): Obj {
  switch (m.type) {
    case 'welcome':
      return {
        type: m.type,
        version: m.version,
        worker_id: m.workerId,
        heartbeat_ms: m.heartbeatMs,
        idle_timeout_ms: m.idleTimeoutMs,
        encoding: m.encoding,
        credit: m.credit,
        ...(m.peer
          ? {
              peer: {
                path: m.peer.path,
                key: m.peer.key,
                id: m.peer.id,
                token: m.peer.token,
                ...(m.peer.iceServers ? { ice_servers: wireIceServers(m.peer.iceServers) } : {}),
              },
            }
          : {}),
        ...(m.hubs ? { hubs: [...m.hubs] } : {}),
      };
    case 'assign':
      return {
        type: m.type,
        assignment_id: m.assignmentId,
        model: m.model,
        layer: m.layer,
        experts: m.experts,
        n_embd: m.nEmbd,
        n_expert: m.nExpert,
        numerics: m.numerics,
        shard_url: m.shardUrl,
        shard_bytes: m.shardBytes,
        shard_digest: m.shardDigest,
        ...(m.peers ? { peers: m.peers } : {}),
        ...(m.chunksUrl ? { chunks_url: m.chunksUrl } : {}),
      };
    case 'release':
      return { type: m.type, assignment_id: m.assignmentId, code: m.code, reason: sentence(m.reason, L.maxMessageChars) };
    case 'credit':
      return {
        type: m.type,
        credit: m.credit,
        ...(m.slices ? { slices: m.slices.map((s) => ({ assignment_id: s.assignmentId, credit: s.credit })) } : {}),
      };
    default:
      return { type: m.type, id: m.id };
  }
}

/**
 * The JSON text of a client message. It is parsed back before it is returned, so a client never sends what the hub
 * would refuse: an invalid message throws VolunteerWireError here instead (control messages are small and rare).
 */
export function encodeClientMessage(m: ClientMessage): string {
  const text = JSON.stringify(wireClient(m));
  parseClientMessage(text);
  return text;
}

/** The JSON text of a hub message, checked like encodeClientMessage. */
export function encodeHubMessage(m: HubMessage): string {
  const text = JSON.stringify(wireHub(m));
  parseHubMessage(text);
  return text;
}
