/** Edge validation of JSON bodies and queries: every failure is a HubError with a sentence naming the field. */
import { HubError, type ErrorCode } from './errors.ts';

export function object(v: unknown, what = 'body', code: ErrorCode = 'BODY_INVALID'): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new HubError(code, `${what} must be a JSON object`);
  return v as Record<string, unknown>;
}

/** JSON bodies nest at most this deep (an OpenAI request: ~6); deeper ones would overflow a recursive JSON.stringify. */
export const JSON_DEPTH_MAX = 64;

/** Throws BODY_INVALID when `v` nests objects or arrays deeper than `max` (iterative: safe on any depth). */
export function shallowJson(v: unknown, max = JSON_DEPTH_MAX): void {
  const stack: Array<[unknown, number]> = [[v, 1]];
  while (stack.length > 0) {
    const [x, depth] = stack.pop() as [unknown, number];
    if (typeof x !== 'object' || x === null) continue;
    if (depth > max) throw new HubError('BODY_INVALID', `the body nests deeper than ${max} levels`);
    for (const c of Array.isArray(x) ? x : Object.values(x)) if (typeof c === 'object' && c !== null) stack.push([c, depth + 1]);
  }
}

export function integer(
  o: Record<string, unknown>,
  key: string,
  min: number,
  max: number,
  fallback?: number,
  code: ErrorCode = 'BODY_INVALID',
): number {
  const v = o[key];
  if (v === undefined && fallback !== undefined) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new HubError(code, `${key} must be an integer in [${min}, ${max}]`);
  }
  return v;
}

export function optionalNumber(
  o: Record<string, unknown>,
  key: string,
  min: number,
  max: number,
  code: ErrorCode = 'BODY_INVALID',
): number | undefined {
  const v = o[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max)
    throw new HubError(code, `${key} must be a number in [${min}, ${max}]`);
  return v;
}

export function string(
  o: Record<string, unknown>,
  key: string,
  maxLength: number,
  fallback?: string,
  code: ErrorCode = 'BODY_INVALID',
): string {
  const v = o[key];
  if (v === undefined && fallback !== undefined) return fallback;
  if (typeof v !== 'string' || v.length > maxLength) throw new HubError(code, `${key} must be a string of at most ${maxLength} characters`);
  return v;
}

/** A query parameter that must be a decimal integer. */
export function queryInt(q: Record<string, unknown>, key: string, min: number, max: number): number {
  const v = q[key];
  if (typeof v !== 'string' || !/^\d{1,9}$/.test(v)) throw new HubError('QUERY_INVALID', `${key} must be an integer in [${min}, ${max}]`);
  const n = Number(v);
  if (n < min || n > max) throw new HubError('QUERY_INVALID', `${key} must be an integer in [${min}, ${max}]`);
  return n;
}

export function queryString(q: Record<string, unknown>, key: string, maxLength: number, fallback?: string): string {
  const v = q[key];
  if (v === undefined && fallback !== undefined) return fallback;
  if (typeof v !== 'string' || v.length > maxLength)
    throw new HubError('QUERY_INVALID', `${key} must be a string of at most ${maxLength} characters`);
  return v;
}
