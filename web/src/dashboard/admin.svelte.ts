/**
 * The admin token: typed by the operator, checked with `GET /api/admin/check`, then kept in this tab's
 * sessionStorage only (gone when the tab closes) and sent as a Bearer token with each admin action. Every action's
 * outcome — done, or refused with the hub's code — becomes `notice`, which the page announces.
 */
import type { AdminResult } from '../../../protocol/dashboard.ts';
import { ApiError, checkToken, TOKEN_KEY } from './api.ts';

export interface AdminNotice {
  ok: boolean;
  text: string;
}

export class AdminSession {
  token: string | null = $state(null);
  checking = $state(false);
  notice: AdminNotice | null = $state(null);
  readonly unlocked = $derived(this.token !== null);

  /** A token kept from earlier in this tab is checked again (the hub may have changed it since). */
  async restore(): Promise<void> {
    const kept = readToken();
    if (!kept) return;
    try {
      await checkToken(kept);
      this.token = kept;
    } catch {
      forgetToken();
    }
  }

  async unlock(token: string): Promise<boolean> {
    const t = token.trim();
    if (!t) {
      this.notice = { ok: false, text: 'Type the admin token first.' };
      return false;
    }
    this.checking = true;
    try {
      await checkToken(t);
      this.token = t;
      keepToken(t);
      this.notice = { ok: true, text: 'Unlocked: admin actions are available.' };
      return true;
    } catch (e) {
      this.notice = { ok: false, text: describe(e) };
      return false;
    } finally {
      this.checking = false;
    }
  }

  lock(): void {
    this.token = null;
    forgetToken();
    this.notice = { ok: true, text: 'Locked: the page is read-only.' };
  }

  /** Runs one admin action and reports it; resolves whether it was done. */
  async act(what: (token: string | null) => Promise<AdminResult>): Promise<boolean> {
    try {
      const r = await what(this.token);
      this.notice = { ok: true, text: r.detail };
      return true;
    } catch (e) {
      // A token the hub no longer takes (it restarted with another): back to read-only, and say why.
      if (e instanceof ApiError && e.status === 401) {
        this.token = null;
        forgetToken();
      }
      this.notice = { ok: false, text: describe(e) };
      return false;
    }
  }
}

function describe(e: unknown): string {
  return e instanceof ApiError ? e.display : e instanceof Error ? e.message : String(e);
}

function readToken(): string | null {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

function keepToken(t: string): void {
  try {
    sessionStorage.setItem(TOKEN_KEY, t);
  } catch {
    // storage refused (a private mode): the token lives in this page only
  }
}

function forgetToken(): void {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // nothing kept
  }
}
