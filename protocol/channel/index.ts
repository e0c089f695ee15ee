/**
 * The volunteer channel, version 1 (docs/volunteer-channel.md): one WebSocket per volunteer at `/api/volunteer`,
 * opened by the volunteer. Control messages are JSON text frames; work and results are binary frames. The hub (Node,
 * `ws`) and every client (the page, the widget's frame, the headless volunteer) use this one module, so it stays
 * browser-safe: no Node imports, only typed arrays, DataView and TextEncoder/TextDecoder.
 *
 * Every decoder validates everything and throws VolunteerWireError, whose `closeCode` is what the receiver closes with:
 *
 *   ws.on('message', (data, isBinary) => {
 *     try {
 *       if (!isBinary) return onControl(parseClientMessage(data));
 *       const { kind, workId } = peekFrame(data);
 *       if (kind === 'result') onResult(decodeResult(data, expectFor(workId)));
 *       else if (kind === 'work_failed') onFailed(decodeWorkFailed(data));
 *       else throw new VolunteerWireError('BAD_FRAME', 'volunteers do not send work frames');
 *     } catch (e) {
 *       if (e instanceof VolunteerWireError) ws.close(e.closeCode, closeReason(e.message));
 *     }
 *   });
 *
 * Rule for codes: a value beyond a VOLUNTEER_LIMITS cap → TOO_LARGE; any other malformation → BAD_FRAME; a version
 * other than ours → UNSUPPORTED_VERSION; a missing or malformed token → BAD_TOKEN.
 *
 * This index is the public surface; the files behind it split the contract by job, as `ws` splits framing:
 * limits.ts (version, magic, path, caps), close-codes.ts (close catalogue and the error), encodings.ts (f32/f16),
 * frames.ts (binary work/result/work_failed), messages.ts (JSON control messages), wire-cost.ts (bench arithmetic);
 * text.ts and json-fields.ts are internal helpers.
 */
export { CLOSE_CODES, type CloseAction, type CloseName, VolunteerWireError, closeName, closeReason } from './close-codes.ts';
export { WIRE_ENCODINGS, type WireEncoding, f16ArrayToF32, f32ArrayToF16, firstNonFinite } from './encodings.ts';
export {
  type FrameKindName,
  type ResultExpectation,
  type ResultFrame,
  type ResultInput,
  WORK_FAILED_CODES,
  type WireBytes,
  type WorkFailed,
  type WorkFailedCode,
  type WorkFrame,
  type WorkInput,
  decodeResult,
  decodeWork,
  decodeWorkFailed,
  encodeResult,
  encodeWork,
  encodeWorkFailed,
  maxRowsPerFrame,
  peekFrame,
} from './frames.ts';
export { VOLUNTEER_LIMITS, VOLUNTEER_PATH, VOLUNTEER_WIRE_VERSION, WIRE_HEADER_BYTES, WIRE_MAGIC, WIRE_PAIR_BYTES } from './limits.ts';
export {
  type Assign,
  type ClientMessage,
  type Credit,
  type SliceCredit,
  type Heartbeat,
  type ChannelHello,
  type HelloDevice,
  type HubMessage,
  LOAD_FAILED_CODES,
  type Leave,
  type LoadFailed,
  type LoadFailedCode,
  type Loaded,
  PEER_REPORT_CODES,
  type PeerReport,
  type PeerReportCode,
  type Ping,
  type Pong,
  type Pause,
  RELEASE_CODES,
  type Release,
  type ReleaseCode,
  type Resume,
  type Welcome,
  type WelcomePeer,
  encodeClientMessage,
  encodeHubMessage,
  parseClientMessage,
  parseHubMessage,
} from './messages.ts';
export { type WireCostInput, wireBytesPerToken, wsFrameOverhead } from './wire-cost.ts';
