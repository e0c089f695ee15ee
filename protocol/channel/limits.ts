/**
 * The volunteer channel's constants: version, frame magic and header sizes, path, and every size cap (VOLUNTEER_LIMITS).
 * One place for the numbers both ends check against, as `ws` keeps its in constants.js.
 */
import {
  DEVICE_BYTES_MAX,
  EXPERTS_MAX,
  HELD_RANGES_MAX,
  LAYERS_MAX,
  MODEL_NAME_MAX_CHARS,
  OFFER_EXPERTS_MAX,
  TOKEN_MAX_CHARS,
  WORKER_ID_MAX_CHARS,
} from '../limits.ts';

/** The one version this side speaks; hello carries it and any other is closed with UNSUPPORTED_VERSION. */
export const VOLUNTEER_WIRE_VERSION = 1;
/** Bytes `E X V W` read as a little-endian u32: the first four bytes of every binary frame. */
export const WIRE_MAGIC = 0x57565845;
/** Every binary frame starts with a header of this size; the arrays after it are then naturally aligned. */
export const WIRE_HEADER_BYTES = 32;
/** Bytes per (row, expert) pair in a work frame: weight f32, row index u16, local expert u16. */
export const WIRE_PAIR_BYTES = 8;
/** The WebSocket path of the channel. */
export const VOLUNTEER_PATH = '/api/volunteer';

/** Every cap of the channel. The caps the HTTP side shares come from protocol/limits.ts, so both sides agree. */
export const VOLUNTEER_LIMITS = Object.freeze({
  /** Any binary frame; the hub's `ws` maxPayload. A work frame that would be larger is split by the hub. */
  maxFrameBytes: 64 * 1024 * 1024,
  /** Any text (JSON) message, in UTF-8 bytes. */
  maxTextBytes: 16 * 1024,
  /** Rows in one work frame (row indices are u16; the coordinator sends at most 8192 tokens per request). */
  maxRows: 8192,
  maxEmbd: 65536,
  /** Pairs in one work frame: every row routed to at most 64 experts, as the dispatch protocol allows. */
  maxPairs: 8192 * 64,
  /** Work-failed message, UTF-8 bytes. */
  maxFailureMessageBytes: 256,
  maxTokenChars: TOKEN_MAX_CHARS,
  maxWorkerIdChars: WORKER_ID_MAX_CHARS,
  maxModelChars: MODEL_NAME_MAX_CHARS,
  /** Adapter vendor, architecture and description, each. */
  maxAdapterChars: 256,
  maxFeatures: 64,
  maxFeatureChars: 64,
  /** Entries of a capability list (numerics, encodings), known or not. */
  maxListed: 8,
  /** Entries of the weight-type list (`types`: ggml's type names, ~40), known or not. */
  maxTypesListed: 64,
  /** The client's description of itself (e.g. "page/0.1.0 Chrome/131"). */
  maxAgentChars: 128,
  /** Each byte count a device states. */
  maxDeviceBytes: DEVICE_BYTES_MAX,
  /** Measured GFLOP/s (a PFLOP/s card would be 1e6). */
  maxGflops: 1e7,
  maxOfferExperts: OFFER_EXPERTS_MAX,
  /** Layers are < this. */
  maxLayers: LAYERS_MAX,
  /** Experts per layer. */
  maxExperts: EXPERTS_MAX,
  /** Held ranges in one heartbeat. */
  maxCoverageRanges: HELD_RANGES_MAX,
  /** Slices one volunteer holds at once (hello.max_slices): each is one range of its heartbeat. */
  maxSlices: HELD_RANGES_MAX,
  maxShardUrlChars: 2048,
  /** Human sentences: load_failed.message, release.reason. */
  maxMessageChars: 512,
  maxQueueDepth: 1_000_000,
  /** Peer ids in one assign (docs/peers.md). */
  maxPeersListed: 16,
  /** A PeerJS id or token the hub issues, characters. */
  maxPeerIdChars: 64,
  /** The path of the hub's PeerJS signalling server. */
  maxPeerPathChars: 128,
  /** welcome.peer.ice_servers: servers, URLs per server, a URL's and a username's or credential's characters. */
  maxIceServers: 4,
  /** welcome.hubs: the other hubs of a cluster a volunteer may dial (issue 30), and one URL's characters. */
  maxHubs: 16,
  maxHubUrlChars: 512,
  maxIceUrls: 4,
  maxIceUrlChars: 256,
  maxIceCredentialChars: 256,
  /** Heartbeat interval and idle timeout the hub may announce, ms. */
  minIntervalMs: 1000,
  maxIntervalMs: 3_600_000,
});
