/**
 * Reading the JSON text messages of the volunteer channel: the size and UTF-8 checks of a text frame, and Fields,
 * a checked field reader that names every failure by its path and picks TOO_LARGE or BAD_FRAME. Internal to
 * protocol/channel/; messages.ts builds the parsers on it.
 */
import { badFrame, tooLarge } from './close-codes.ts';
import { VOLUNTEER_LIMITS } from './limits.ts';
import { CONTROL_CHARS, fatalUtf8, utf8 } from './text.ts';

/** A JSON object as parsed, before its fields are checked. */
export type Obj = Record<string, unknown>;
/** A value, shortened, for an error message. */
export const show = (v: unknown): string => (typeof v === 'string' ? JSON.stringify(v.slice(0, 32)) : v === null ? 'null' : typeof v);

/** Reads fields of one JSON object, naming each failure by its path (`hello.device.limits.max_buffer_size`). */
export class Fields {
  constructor(
    private readonly o: Obj,
    private readonly path: string,
  ) {}

  static of(v: unknown, path: string): Fields {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw badFrame(`${path} must be an object`);
    return new Fields(v as Obj, path);
  }

  get(k: string): unknown {
    return Object.hasOwn(this.o, k) ? this.o[k] : undefined;
  }

  has(k: string): boolean {
    const v = this.get(k);
    return v !== undefined && v !== null;
  }

  name(k: string): string {
    return `${this.path}.${k}`;
  }

  int(k: string, min: number, max: number, cap?: number): number {
    const v = this.get(k);
    if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw badFrame(`${this.name(k)} must be an integer, got ${show(v)}`);
    if (cap !== undefined && v > cap) throw tooLarge(`${this.name(k)} ${v} exceeds the cap of ${cap}`);
    if (v < min || v > max) throw badFrame(`${this.name(k)} ${v} is outside [${min}, ${max}]`);
    return v;
  }

  num(k: string, min: number, cap: number): number {
    const v = this.get(k);
    if (typeof v !== 'number' || !Number.isFinite(v)) throw badFrame(`${this.name(k)} must be a finite number, got ${show(v)}`);
    if (v > cap) throw tooLarge(`${this.name(k)} ${v} exceeds the cap of ${cap}`);
    if (v < min) throw badFrame(`${this.name(k)} ${v} is below ${min}`);
    return v;
  }

  bool(k: string): boolean {
    const v = this.get(k);
    if (typeof v !== 'boolean') throw badFrame(`${this.name(k)} must be true or false, got ${show(v)}`);
    return v;
  }

  str(k: string, cap: number, opts: { min?: number; pattern?: RegExp } = {}): string {
    const v = this.get(k);
    if (typeof v !== 'string') throw badFrame(`${this.name(k)} must be a string, got ${show(v)}`);
    if (v.length > cap) throw tooLarge(`${this.name(k)} has ${v.length} characters, the cap is ${cap}`);
    if (v.length < (opts.min ?? 0)) throw badFrame(`${this.name(k)} must not be empty`);
    if (opts.pattern ? v.length > 0 && !opts.pattern.test(v) : CONTROL_CHARS.test(v)) {
      throw badFrame(`${this.name(k)} ${show(v)} is not of the allowed form`);
    }
    return v;
  }

  oneOf<T extends string>(k: string, values: readonly T[]): T {
    const v = this.get(k);
    if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) {
      throw badFrame(`${this.name(k)} must be one of ${values.join(', ')}, got ${show(v)}`);
    }
    return v as T;
  }

  list(k: string, cap: number): unknown[] {
    const v = this.get(k);
    if (!Array.isArray(v)) throw badFrame(`${this.name(k)} must be an array, got ${show(v)}`);
    if (v.length > cap) throw tooLarge(`${this.name(k)} has ${v.length} entries, the cap is ${cap}`);
    return v;
  }

  /** A capability list: strings, unknown ones dropped (a newer client may list more), duplicates dropped. */
  known<T extends string>(k: string, values: readonly T[], cap: number = VOLUNTEER_LIMITS.maxListed): T[] {
    const out: T[] = [];
    for (const x of this.list(k, cap)) {
      if (typeof x !== 'string') throw badFrame(`${this.name(k)} must hold strings`);
      if ((values as readonly string[]).includes(x) && !out.includes(x as T)) out.push(x as T);
    }
    return out;
  }

  obj(k: string): Fields {
    return Fields.of(this.get(k), this.name(k));
  }
}

/** The JSON object of a text message, and a field reader named after its `type`. */
export function parseObject(data: string | Uint8Array): { type: unknown; f: Fields } {
  let text: string;
  if (typeof data === 'string') {
    // A UTF-16 unit is 1 to 3 UTF-8 bytes: count the bytes only when the length alone does not settle it.
    const cap = VOLUNTEER_LIMITS.maxTextBytes;
    if (data.length > cap || (data.length * 3 > cap && utf8.encode(data).length > cap)) {
      throw tooLarge(`text message exceeds ${cap} bytes`);
    }
    text = data;
  } else if (data instanceof Uint8Array) {
    if (data.length > VOLUNTEER_LIMITS.maxTextBytes)
      throw tooLarge(`text message of ${data.length} bytes exceeds ${VOLUNTEER_LIMITS.maxTextBytes}`);
    try {
      text = fatalUtf8.decode(data);
    } catch {
      throw badFrame('text message is not UTF-8');
    }
  } else {
    throw badFrame('a text message must be a string or bytes');
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw badFrame('text message is not JSON');
  }
  const type = Fields.of(v, 'message').get('type');
  return { type, f: Fields.of(v, typeof type === 'string' ? type.slice(0, 32) : 'message') };
}
