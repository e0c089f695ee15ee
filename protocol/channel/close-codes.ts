/**
 * How the volunteer channel ends: the catalogue of close codes with what a client does after each (CLOSE_CODES),
 * close reasons cut to what a WebSocket allows, and VolunteerWireError, which every decoder throws and whose
 * `closeCode` the receiver closes with. One catalogue, as fastify's lib/errors.js: callers match the code.
 */
import { utf8 } from './text.ts';

/** What a client does after the hub closed the channel with a code. */
export type CloseAction =
  /** Dial again with the usual jittered exponential backoff. */
  | 'backoff'
  /** Log in again (a fresh node token), then dial. */
  | 'new-token'
  /** Dial again, but not before a minute or more. */
  | 'later'
  /** Do not dial again by itself; say why to the user. */
  | 'stop';

interface CloseEntry {
  readonly code: number;
  readonly meaning: string;
  readonly then: CloseAction;
}

const entry = (code: number, then: CloseAction, meaning: string): CloseEntry => Object.freeze({ code, then, meaning });

/** WebSocket application close codes of the channel (4000–4999), the same in both directions. A normal leave is 1000. */
export const CLOSE_CODES = Object.freeze({
  INTERNAL_ERROR: entry(4000, 'backoff', 'The hub failed on its side; nothing was wrong with what the volunteer sent.'),
  BAD_TOKEN: entry(4001, 'new-token', 'The node token in hello is missing, malformed, tampered with or expired: log in again.'),
  BAD_FRAME: entry(
    4002,
    'backoff',
    'A message or frame was malformed: bad JSON, unknown type, a missing or mistyped field, sizes that do not add up, a value out of range or not finite.',
  ),
  UNSUPPORTED_VERSION: entry(
    4003,
    'stop',
    'The other side speaks another version of the volunteer channel; reload the page or update the volunteer.',
  ),
  TOO_LARGE: entry(4004, 'backoff', 'A message, frame, string, list or dimension exceeded its cap in VOLUNTEER_LIMITS.'),
  OVER_CAPACITY: entry(4005, 'later', 'The hub holds as many volunteers as it accepts; try again later.'),
  REPLACED: entry(4006, 'stop', 'A newer connection with the same worker id took over (another tab of the same volunteer).'),
  SHUTTING_DOWN: entry(4007, 'backoff', 'The hub is shutting down or restarting.'),
  IDLE_TIMEOUT: entry(4008, 'backoff', 'Nothing arrived from the volunteer within the idle timeout announced in welcome.'),
  HELLO_TIMEOUT: entry(4009, 'backoff', 'The connection opened but no hello arrived in time.'),
  UNEXPECTED_MESSAGE: entry(
    4010,
    'backoff',
    'A well-formed message came at the wrong moment (a second hello, work before loaded, a result for work never sent).',
  ),
  RATE_LIMITED: entry(4011, 'later', 'The volunteer sent control messages faster than the hub accepts them.'),
  QUARANTINED: entry(4012, 'later', "The hub's verification found this worker's results wrong; it is not given work for a while."),
});

export type CloseName = keyof typeof CLOSE_CODES;

const CLOSE_BY_CODE: ReadonlyMap<number, CloseName> = new Map(
  (Object.keys(CLOSE_CODES) as CloseName[]).map((name) => [CLOSE_CODES[name].code, name]),
);

/** The name of one of our close codes, or undefined for any other code (1000, 1006, …). */
export function closeName(code: number): CloseName | undefined {
  return CLOSE_BY_CODE.get(code);
}

/** A WebSocket close reason may hold 123 UTF-8 bytes; longer throws in `ws` and in browsers. Cuts at a character. */
export function closeReason(text: string): string {
  if (text.length <= 41) return text; // ≤ 3 bytes per UTF-16 unit
  const bytes = utf8.encode(text);
  if (bytes.length <= 123) return text;
  let end = 120;
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  return `${new TextDecoder().decode(bytes.subarray(0, end))}…`;
}

/** A malformed or oversized message; `code` names the CLOSE_CODES entry the receiver closes with. */
export class VolunteerWireError extends Error {
  readonly closeCode: number;

  constructor(
    readonly code: CloseName,
    message: string,
  ) {
    super(message);
    this.name = 'VolunteerWireError';
    this.closeCode = CLOSE_CODES[code].code;
  }
}

/** A malformation: closes with BAD_FRAME. */
export const badFrame = (m: string): VolunteerWireError => new VolunteerWireError('BAD_FRAME', m);
/** A value beyond a VOLUNTEER_LIMITS cap: closes with TOO_LARGE. */
export const tooLarge = (m: string): VolunteerWireError => new VolunteerWireError('TOO_LARGE', m);
