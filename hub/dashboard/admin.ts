/**
 * The dashboard's admin side: the token check and the parsers of the actions' bodies. The actions themselves are the
 * Hub's (`adminRelease`, `adminQuarantine`, `adminTarget`, `adminDispatch`); the routes are in routes.ts.
 *
 *   const token = checkedAdminToken(process.env.EXPERTSWARM_ADMIN_TOKEN); // throws at startup when too short
 *   adminAccess(token, req.headers.authorization);                        // 'ok' | 'disabled' | 'invalid'
 *
 * The comparison is constant-time in the token's content and length: both sides are hashed (sha256) and the digests
 * compared with crypto.timingSafeEqual, so neither a prefix nor the length leaks through timing.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { HubError } from '../errors.ts';
import { ADMIN_TOKEN_MAX_CHARS, ADMIN_TOKEN_MIN_CHARS, BOOST_MAX, TARGET_BASE_MAX } from '../limits.ts';
import { object } from '../validate.ts';
import { ADMIN_REASON_MAX_CHARS, DISPATCH_MODES, type DispatchModeName } from '../../protocol/dashboard.ts';

/** The configured token, checked once at startup; null = admin disabled. Throws an Error a person can act on. */
export function checkedAdminToken(token: string | null | undefined): string | null {
  if (token === undefined || token === null || token === '') return null;
  if (token.length < ADMIN_TOKEN_MIN_CHARS)
    throw new Error(
      `the admin token must be at least ${ADMIN_TOKEN_MIN_CHARS} characters (it guards releases, quarantines and targets); ` +
        'generate one with `openssl rand -hex 24`',
    );
  if (token.length > ADMIN_TOKEN_MAX_CHARS) throw new Error(`the admin token must be at most ${ADMIN_TOKEN_MAX_CHARS} characters`);
  if (/\s/.test(token)) throw new Error('the admin token must not contain whitespace (it travels in an Authorization header)');
  return token;
}

const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();

/** A constant-time check of a presented token against the configured one. */
export class AdminGate {
  private readonly want: Buffer | null;

  constructor(token: string | null) {
    this.want = token === null ? null : digest(token);
  }

  get enabled(): boolean {
    return this.want !== null;
  }

  /** 'ok' for `Bearer <the token>`, 'disabled' when no token is configured, 'invalid' for anything else. */
  access(authorization: string | undefined): 'ok' | 'disabled' | 'invalid' {
    if (this.want === null) return 'disabled';
    const m = /^Bearer ([^\s]{1,1024})$/.exec(authorization ?? '');
    if (!m) return 'invalid';
    return timingSafeEqual(digest(m[1] as string), this.want) ? 'ok' : 'invalid';
  }

  /** Throws ADMIN_DISABLED (403) or ADMIN_TOKEN_INVALID (401) unless the header carries the token. */
  require(authorization: string | undefined): void {
    const a = this.access(authorization);
    if (a === 'disabled')
      throw new HubError(
        'ADMIN_DISABLED',
        'admin actions are disabled on this hub: start it with --admin-token or EXPERTSWARM_ADMIN_TOKEN',
      );
    if (a === 'invalid') throw new HubError('ADMIN_TOKEN_INVALID', 'send the admin token as Authorization: Bearer <token>');
  }
}

/** `{reason?}` of a release; '' when absent. */
export function releaseBody(body: unknown): { reason: string } {
  const b = body === undefined || body === null ? {} : object(body);
  return { reason: reasonField(b, false) };
}

/**
 * `{reason, wallet?}` of a quarantine: reason required, non-empty (it is what the worker is told, and what the store
 * keeps); `wallet: true` quarantines the worker's wallet too (default false: the worker id alone).
 */
export function quarantineBody(body: unknown): { reason: string; wallet: boolean } {
  const b = object(body);
  const wallet = b.wallet ?? false;
  if (typeof wallet !== 'boolean') throw new HubError('BODY_INVALID', 'wallet must be true or false');
  return { reason: reasonField(b, true), wallet };
}

function reasonField(b: Record<string, unknown>, required: boolean): string {
  const v = b.reason;
  if (v === undefined && !required) return '';
  if (typeof v !== 'string' || v.length > ADMIN_REASON_MAX_CHARS || (required && v.trim() === ''))
    throw new HubError(
      'BODY_INVALID',
      `reason must be ${required ? 'a non-empty' : 'a'} string of at most ${ADMIN_REASON_MAX_CHARS} characters`,
    );
  return v;
}

/** `{base?, boost?}`: at least one, base in [1, TARGET_BASE_MAX], boost in [0, BOOST_MAX]. */
export function targetBody(body: unknown): { base?: number; boost?: number } {
  const b = object(body);
  const int = (key: 'base' | 'boost', min: number, max: number): number | undefined => {
    const v = b[key];
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
      throw new HubError('BODY_INVALID', `${key} must be an integer in [${min}, ${max}]`);
    return v;
  };
  const base = int('base', 1, TARGET_BASE_MAX);
  const boost = int('boost', 0, BOOST_MAX);
  if (base === undefined && boost === undefined) throw new HubError('BODY_INVALID', 'give base, boost or both');
  return { ...(base !== undefined ? { base } : {}), ...(boost !== undefined ? { boost } : {}) };
}

/** `{mode}`: auto, always or off. */
export function dispatchBody(body: unknown): { mode: DispatchModeName } {
  const v = object(body).mode;
  if (typeof v !== 'string' || !(DISPATCH_MODES as readonly string[]).includes(v))
    throw new HubError('BODY_INVALID', `mode must be one of ${DISPATCH_MODES.join(', ')}`);
  return { mode: v as DispatchModeName };
}
