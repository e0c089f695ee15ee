/**
 * Every size cap and default bound of the hub, in one place. The HTTP edge (app.ts), the market's CoverageStore, the
 * poller and the Hub's defaults read them from here; none of them restates a number. Each limit exists so that one
 * client, volunteer or coordinator cannot make the hub allocate or scan without bound.
 *
 * Auth's own wire caps (wallet, nonce, signature and token lengths) live beside their parsers in auth/.
 */

// HTTP bodies
/** Body of any `/api/*` request; larger → 413 BODY_TOO_LARGE. */
export const API_BODY_MAX_BYTES = 64 * 1024;
/** Body of `/v1/chat/completions` and `/v1/completions` (chat histories and prompts are long). */
export const OPENAI_BODY_MAX_BYTES = 8 * 1024 * 1024;

// fields of the market endpoints (the caps the volunteer channel shares live in protocol/limits.ts)
export {
  DEVICE_BYTES_MAX,
  EXPERTS_MAX,
  HELD_RANGES_MAX,
  LAYERS_MAX,
  MODEL_NAME_MAX_CHARS,
  OFFER_EXPERTS_MAX,
  WORKER_ID_MAX_CHARS,
} from '../protocol/limits.ts';
/** Every number of a held range `[layer, begin, end]` is below this (exclusive): they index Int32 arrays. */
export const HELD_RANGE_NUMBER_LIMIT = 2 ** 31;

// live state
/** Live workers tracked at once; a new one beyond this gets 503 TOO_MANY_WORKERS (default of --max-workers). */
export const WORKERS_MAX = 10_000;
/** A worker without a heartbeat for this long is evicted (default of --stale-ms). */
export const WORKER_STALE_MS = 120_000;
/** Recruitment events kept in memory, and how many of the newest `GET /api/events` lists. */
export const EVENTS_KEPT = 1000;
export const EVENTS_LISTED = 200;
/** Wallets whose lifetime credit the hub keeps in memory for the dashboard (beyond it the cache starts over). */
export const CREDIT_CACHE_MAX = 100_000;
/** Per-client token bucket shared by both login calls (a login costs 2 tokens). */
export const AUTH_RATE_LIMIT: Readonly<{ capacity: number; refillPerSec: number }> = Object.freeze({ capacity: 30, refillPerSec: 0.5 });

// the HTTP server (app.ts): Slowloris and connection floods
/**
 * Time a client has to send a request's headers (Node's `headersTimeout`, default 60 s); then 408 and the socket is
 * closed. A browser or an HTTP library sends them in one packet; 10 s still covers a slow mobile link. A client that
 * trickles them a byte at a time (Slowloris) or opens a socket and sends nothing is cut after this.
 */
export const HTTP_HEADERS_TIMEOUT_MS = 10_000;
/**
 * Time a client has to send a whole request, headers and body (Node's `requestTimeout`; fastify's default is none).
 * The largest body is OPENAI_BODY_MAX_BYTES (8 MiB): 60 s is ~140 KB/s. It bounds receiving only: a response that
 * streams for longer (the dashboard's event stream, a `/v1/*` generation) is not cut (test/integration/security.test.ts).
 */
export const HTTP_REQUEST_TIMEOUT_MS = 60_000;
/**
 * An idle keep-alive socket is closed after this. Above the 60 s idle timeout of common load balancers (fastify's own
 * default, made explicit), so the hub never closes a socket a balancer in front of it is about to reuse.
 */
export const HTTP_KEEP_ALIVE_TIMEOUT_MS = 72_000;
/** How often the server checks the two timeouts above (Node's default 30 s would let a Slowloris socket live 40 s). */
export const HTTP_TIMEOUT_CHECK_MS = 1_000;
/** Bytes of request headers (Node's default, made explicit): a node token is ≤ 1 KiB; larger → 431. */
export const HTTP_MAX_HEADER_BYTES = 16 * 1024;
/**
 * Sockets open at once, hub-wide (`server.maxConnections`; one more is closed at accept): every volunteer's
 * WebSocket (WORKERS_MAX) and as many again for HTTP clients, downloads and dashboards.
 */
export const HTTP_SOCKETS_MAX = 20_000;
/**
 * Sockets open at once from one client address (IPv6: its /64; net.ts `clientKey`); one more is closed at accept.
 * CHANNEL_CONNECTIONS_PER_ADDRESS volunteers behind one NAT, each with a WebSocket and a few HTTP sockets (the
 * page's keep-alive connections, a download). Behind a reverse proxy every client has the proxy's address: raise it
 * there (`--config` `{"http": {"socketsPerAddress": …}}`) and let the proxy limit per client.
 */
export const HTTP_SOCKETS_PER_ADDRESS = 256;

// the volunteer channel (volunteers/channel.ts): per address and per identity
/**
 * Volunteer WebSockets open at once from one client address (IPv6: its /64); one more is refused at the upgrade
 * with 503 TOO_MANY_CONNECTIONS. Several tabs, or a lab of machines, may share one NAT.
 */
export const CHANNEL_CONNECTIONS_PER_ADDRESS = 64;
/**
 * Volunteer connections of one wallet (node token) at once; one more is closed at its hello with OVER_CAPACITY.
 * A person's tabs and machines: a wallet is free to make, so this bounds one token, not one person.
 */
export const CHANNEL_CONNECTIONS_PER_WALLET = 16;
/**
 * Volunteer WebSocket opens per client address: a burst of CHANNEL_CONNECTIONS_PER_ADDRESS (every tab of a NAT
 * dialling back after a hub restart), then one a second; beyond → 429 RATE_LIMITED at the upgrade, with Retry-After.
 */
export const CHANNEL_OPEN_RATE: Readonly<{ capacity: number; refillPerSec: number }> = Object.freeze({
  capacity: CHANNEL_CONNECTIONS_PER_ADDRESS,
  refillPerSec: 1,
});
/**
 * A binary frame that answers no work in flight (never sent, or given up long ago) costs the control-message bucket
 * one token per started block of this many bytes: a flood of such frames is closed with RATE_LIMITED as a flood of
 * control messages is, and a large one costs as much as the bytes it made the hub read.
 */
export const CHANNEL_UNSOLICITED_BYTES_PER_TOKEN = 64 * 1024;
/**
 * Work ids per connection remembered after the hub stopped waiting for them (timed out, released): a late answer to
 * one of them is dropped for free, as a race and not a flood (docs/volunteer-channel.md).
 */
export const CHANNEL_LATE_IDS_KEPT = 256;
/**
 * Bytes queued to one volunteer and not yet sent beyond which no new work goes to it (its pairs are computed by the
 * coordinator): a volunteer that stops reading cannot make the hub buffer without bound, and work that waits behind
 * 32 MiB on a home link (about 3 s at 100 Mbit/s) would miss any dispatch deadline anyway.
 */
export const CHANNEL_SEND_BACKLOG_MAX_BYTES = 32 * 1024 * 1024;

// coverage over HTTP (market/grants.ts): what the market assigned and the wallet downloaded
/** Assigned slices, and downloaded slices, remembered per wallet (oldest forgotten first beyond this). */
export const SLICE_GRANTS_PER_WALLET = 16;
/** Wallets whose slices are remembered (least recently used forgotten first): 2× WORKERS_MAX, ~3 KB each at most. */
export const SLICE_GRANT_WALLETS_KEPT = 20_000;

// the shard server (shards.ts)
/** Shard downloads in flight per wallet (node token); one more → 429 RATE_LIMITED with Retry-After. */
export const SHARD_DOWNLOADS_PER_WALLET = 2;
/** Shard downloads in flight per client IP (IPv6: per /64): several volunteers may share one NAT. */
export const SHARD_DOWNLOADS_PER_IP = 8;
/** Shard downloads in flight hub-wide; one more → 503 SHARDS_BUSY with Retry-After. */
export const SHARD_DOWNLOADS_MAX = 64;
/** Retry-After (s) of both refusals: a download slot frees when some download ends, which is not predictable. */
export const SHARD_RETRY_AFTER_S = 2;
/** Slice digests (with byte lengths and layouts) remembered, least recently used dropped first: ~1 KB each. */
export const SHARD_DIGESTS_KEPT = 4096;
/**
 * Warming the digests of the slices the market will likely offer (hub/shard-warmer.ts): at most this many slices and
 * bytes read in all, for at most this many kinds of volunteer (the widths they take).
 */
export const SHARD_WARM_SLICES = SHARD_DIGESTS_KEPT / 2;
export const SHARD_WARM_BYTES = 1024 * 1024 * 1024;
export const SHARD_WARM_KINDS = 8;
/** A slice up to this size is kept whole in memory once read; a larger one is streamed from the model file each time. */
export const SHARD_MEMORY_SLICE_MAX_BYTES = 4 * 1024 * 1024;
/** Bytes of those in-memory slices, least recently used dropped first. */
export const SHARD_MEMORY_CACHE_BYTES = 64 * 1024 * 1024;
/** Bytes per read of the model file while streaming or hashing a slice (also the most buffered per download). */
export const SHARD_READ_CHUNK_BYTES = 256 * 1024;

// what coordinators send back
/** Slots accepted from a coordinator's `GET /slots` (a real server has a handful). */
export const COORDINATOR_SLOTS_MAX = 4096;
/** A `/slots` or `/metrics` reply longer than this is dropped unparsed (a long /slots falls back to /metrics). */
export const COORDINATOR_REPLY_MAX_CHARS = 4_000_000;

// the dashboard (hub/dashboard/; its wire caps are in protocol/dashboard.ts)
/** Shortest admin token accepted at startup (`--admin-token`, EXPERTSWARM_ADMIN_TOKEN); a longer one is not guessable. */
export const ADMIN_TOKEN_MIN_CHARS = 16;
export const ADMIN_TOKEN_MAX_CHARS = 512;
/** The base target and the boost an admin may set (`POST /api/admin/target`). */
export const TARGET_BASE_MAX = 64;
export const BOOST_MAX = 64;
/**
 * Bytes a stream client may leave unread, beyond its snapshot, before it is dropped as a slow consumer. The snapshot
 * (up to ~300 KB of history per model) is sent whole first and does not count until the socket first drains: a slow
 * link cut for its own snapshot would reconnect, get another one, and loop.
 */
export const STREAM_BACKLOG_MAX_BYTES = 4 * 1024 * 1024;
/** Dashboard streams open at once from one client IP (IPv6: per /64); one more → 503 TOO_MANY_STREAMS. */
export const STREAMS_PER_IP = 4;
/** Stream opens per client IP: a burst, then this many a second; beyond → 429 RATE_LIMITED with Retry-After. */
export const STREAM_OPEN_RATE: Readonly<{ capacity: number; refillPerSec: number }> = Object.freeze({ capacity: 8, refillPerSec: 0.5 });
/**
 * How long a worker an operator released is kept from taking a slice again: an HTTP-heartbeat worker's heartbeats are
 * refused (409 WORKER_RELEASED), a channel volunteer is left out of offer rounds until then or until it reconnects.
 */
export const RELEASE_COOL_DOWN_MS = 10 * 60 * 1000;
/** Released HTTP-heartbeat workers remembered for their cool-down (oldest forgotten first beyond this). */
export const RELEASED_WORKERS_KEPT = 10_000;
/** Round trips kept per model per tick for its percentiles (a uniform sample of them beyond this). */
export const RTT_SAMPLES_PER_TICK = 4096;
/** Workers released or quarantined by the hub that the dashboard still lists (newest kept). */
export const RETIRED_WORKERS_KEPT = 1000;
