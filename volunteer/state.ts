/**
 * What the volunteer client tells its user interface: the states it moves through and the numbers it keeps. The
 * page, the widget's frame and the headless volunteer render these and nothing else; they never look inside the
 * client. Browser-safe (no Node imports).
 *
 *   client.on('state', (s) => { if (s.kind === 'retrying') show(`hub unreachable, retrying in ${s.inSeconds} s`); });
 */
import type { Backend } from '../protocol/numerics.ts';
import type { AssignedSlice } from '../protocol/slice.ts';
import type { VariantFeature } from '../protocol/variant.ts';

/** The volunteer's record of the slice the hub assigned (`experts` is `[begin, end)` of `layer`), and where it came from. */
export interface SliceAssignment extends AssignedSlice {
  /** Set once the slice is in hand: true when it came from this device's cache (nothing downloaded). */
  fromCache?: boolean;
}

/**
 * One slice the volunteer holds or loads (it holds several at once, up to its budget: docs/volunteer-channel.md
 * `max_slices`), as the page lists them.
 */
export interface HeldSlice extends SliceAssignment {
  state: 'loading' | 'serving';
  /** What computes it once loaded. */
  backend: Backend | null;
  /** Pairs it served on this connection. */
  pairsServed: number;
  /** Pairs the hub credited for it (its `credit` messages' per-slice counts; 0 from a hub that sends none). */
  credit: number;
  /** Bytes of memory it takes of the budget (its engine's, at least what it holds; 0 while loading). */
  memoryBytes: number;
  /** Its bytes taken from other volunteers and from the hub (both 0: from this device's cache). */
  fromPeers: number;
  fromHub: number;
}

export type VolunteerState =
  /** Not joined yet: nothing is downloaded before the user consents (`join()`). */
  | { kind: 'idle' }
  | { kind: 'connecting'; attempt: number }
  /** The hub could not be reached or dropped the channel; the client dials again by itself. */
  | { kind: 'retrying'; inSeconds: number; reason: string; attempt: number }
  /** Connected, holding nothing: the hub pushes an assignment when a model needs more replicas. */
  | { kind: 'waiting' }
  | { kind: 'downloading'; slice: SliceAssignment; loadedBytes: number; totalBytes: number; fromCache: boolean }
  /** Building the engine and measuring WebGPU against the wasm fallback. */
  | { kind: 'starting'; slice: SliceAssignment }
  | { kind: 'serving'; slice: SliceAssignment; backend: Backend }
  /** Paused by the user: holds its slice, serves nothing until `resume()`. */
  | { kind: 'paused'; slice: SliceAssignment | null }
  /** The hub no longer needs the slice: GPU memory freed, back to waiting shortly. */
  | { kind: 'released'; slice: SliceAssignment; reason: string }
  /** Something this device cannot do (slice does not fit, no backend computes); `code` is stable. */
  | { kind: 'failed'; code: string; message: string; retrying: boolean }
  /** Left by the user (`leave()`): channel closed, memory freed. */
  | { kind: 'left' };

export type VolunteerStateKind = VolunteerState['kind'];

/** Which backend the volunteer computes with: 'auto' measures both and keeps the faster. */
export type BackendPreference = 'auto' | Backend;

/** The device as the client found it, and which backend it chose and why. */
export interface DeviceReport {
  webgpu: boolean;
  adapter: { vendor: string; architecture: string; description: string; isFallbackAdapter: boolean } | null;
  limits: { maxStorageBufferBindingSize: number; maxBufferSize: number } | null;
  features: string[];
  /** The memory the volunteer lends (bytes). */
  memoryBudgetBytes: number;
  backend: Backend | null;
  /** Why that backend (e.g. "no WebGPU in this browser", "webgpu is faster: 3.1 vs 0.8 GFLOP/s"). */
  backendReason: string;
  /** The chosen backend's measured speed on this slice, GFLOP/s (null before the first measurement). */
  gflops: number | null;
  /**
   * The expert FFN variant features this client computes (protocol/variant.ts; engine-open.ts computedVariants): what it
   * announces in its hello, so the hub offers it only layers of those variants.
   */
  variants: VariantFeature[];
}

export interface VolunteerStats {
  pairsServed: number;
  /** Over the last 10 s. */
  pairsPerSec: number;
  workFrames: number;
  lastLatencyMs: number | null;
  /** Pairs served under this wallet as the hub counts them, durable across sessions. */
  credit: number;
  /** Slice sharing (docs/peers.md), once a slice was loaded on a hub that lists peers; absent before. */
  peers?: PeerStats;
  /** Every slice it holds or loads now, in the order the hub assigned them. */
  slices: HeldSlice[];
}

/** Where the last slice's bytes came from, and what this volunteer has passed on to others on this connection. */
export interface PeerStats {
  fromPeers: number;
  fromHub: number;
  uploaded: number;
}

/** Whether and how fast this volunteer passes held slices on to other volunteers (volunteer/peer-host.ts). */
export interface ShareChoice {
  share: boolean;
  /** Bytes per second, all peers together; 0 uploads nothing. */
  uploadCapBytesPerSec: number;
}

export interface VolunteerEvents {
  state: VolunteerState;
  device: DeviceReport;
  stats: VolunteerStats;
}

export function emptyStats(): VolunteerStats {
  return { pairsServed: 0, pairsPerSec: 0, workFrames: 0, lastLatencyMs: null, credit: 0, slices: [] };
}

/** What a user interface may do with the client: the page, the widget's frame and the headless volunteer use only this. */
export interface VolunteerControls {
  readonly state: VolunteerState;
  readonly device: DeviceReport | null;
  readonly stats: VolunteerStats;
  /** The volunteer's wallet (base58 ed25519 public key) once it logged in: its credit is kept under it. */
  readonly wallet: string | null;
  /** The user consents: dial the hub, announce the device, wait for an assignment. */
  join(options?: { memoryBudgetBytes?: number; backend?: BackendPreference; share?: ShareChoice }): void;
  pause(): void;
  resume(): void;
  /** Close the channel and free GPU memory. */
  leave(): Promise<void>;
  /** Returns the function that unsubscribes. The listener is called at once with the current value. */
  on<K extends keyof VolunteerEvents>(event: K, listener: (value: VolunteerEvents[K]) => void): () => void;
}
