/**
 * The real volunteer client (volunteer/client.ts) as this page runs it: the browser's WebGPU, onnxruntime-web's wasm
 * fallback (its runtime file is a hashed asset of this build), the key pair in localStorage, slices in the Cache API,
 * one worker id per tab, WebRTC data channels to other volunteers where the browser has them. The client builds the environment only after join(), so onnxruntime-web, a large chunk, is
 * not even fetched before the visitor consents.
 */
import ortWasmUrl from 'onnxruntime-web/ort-wasm-simd-threaded.wasm?url';
import type { OrtModuleLike } from '../../../shaders/ort/fallback.ts';
import { createVolunteerClient as createClient, type SocketFactory } from '../../../volunteer/client.ts';
import type { ComputeEnvironment } from '../../../volunteer/engine-open.ts';
import { LocalStorageIdentityStore } from '../../../volunteer/identity.ts';
import { openPeerJsNetwork, webRtcAvailable } from '../../../volunteer/peers-peerjs.ts';
import { defaultBrowserCache } from '../../../volunteer/shard-cache.ts';
import type { BackendPreference, VolunteerControls } from '../../../volunteer/state.ts';

const WORKER_ID_KEY = 'expertswarm.worker-id';

/** Stable across reloads of this tab (sessionStorage), distinct between tabs: the hub replaces a reloaded tab's old connection. */
function tabWorkerId(): string {
  try {
    const known = sessionStorage.getItem(WORKER_ID_KEY);
    if (known) return known;
    const id = `page-${crypto.randomUUID()}`;
    sessionStorage.setItem(WORKER_ID_KEY, id);
    return id;
  } catch {
    return `page-${crypto.randomUUID()}`;
  }
}

/**
 * WebGPU where the browser has it, and the wasm fallback: our kernel (shaders/wasm/: routed pairs only, from the
 * slice's quantized bytes), or onnxruntime-web's dense graph — a large chunk, loaded only — if the kernel does not
 * compile here.
 */
async function browserEnvironment(backend: BackendPreference): Promise<ComputeEnvironment> {
  const gpu = navigator.gpu ?? null;
  if (backend === 'webgpu') return { gpu, ort: null, backend };
  try {
    const { default: kernelBytes } = await import('virtual:expertswarm-kernel');
    return { gpu, ort: null, wasmKernel: await WebAssembly.compile(kernelBytes), backend };
  } catch {
    const ort = await import('onnxruntime-web/wasm');
    ort.env.wasm.wasmPaths = { wasm: ortWasmUrl };
    // Threads need cross-origin isolation, which a page that others embed cannot count on.
    ort.env.wasm.numThreads = 1;
    return { gpu, ort: ort as unknown as OrtModuleLike, backend };
  }
}

/** `model`: the model this tab prefers to serve ('' or absent: whichever the hub needs most). */
export function createVolunteerClient({ hubUrl, model = '' }: { hubUrl: string; model?: string }): VolunteerControls {
  return createClient({
    hubUrl,
    model,
    environment: browserEnvironment,
    identity: new LocalStorageIdentityStore(),
    cache: defaultBrowserCache(),
    // The DOM's handler types take `Event`s where SocketLike's take `unknown`: the same object, typed stricter.
    WebSocket: WebSocket as unknown as SocketFactory,
    workerId: tabWorkerId(),
    agent: 'page/0.1.0',
    // Slices from and to other volunteers over WebRTC (docs/peers.md); without it, from the hub alone. peerjs itself
    // is loaded only when the hub grants a peer id, after the visitor joined.
    peers: webRtcAvailable() ? openPeerJsNetwork : null,
  });
}
