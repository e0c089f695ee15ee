/**
 * The hub's durable store, one SQLite file (in --state DIR): settings (the token secret), models served, volunteer
 * identities, lifetime credit (expert-token pairs served), the items credited (each once: `markCredited`) and the
 * quarantine list. Live coverage stays in memory. With `--redis` the cluster's Redis holds credit and quarantine for
 * every hub (hub/cluster/); this file keeps the hub's own quarantines then too (they are pushed again after Redis lost
 * them), and its credit writes until Redis took them (`credit_outbox`, cluster/credit-outbox.ts).
 */
import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS models (name TEXT PRIMARY KEY, path TEXT, first_seen_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS volunteers (wallet TEXT PRIMARY KEY, first_seen_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL,
  credit_pairs INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS quarantine (subject TEXT PRIMARY KEY, reason TEXT NOT NULL, since_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS credited_items (item TEXT PRIMARY KEY, at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS credit_outbox (item TEXT PRIMARY KEY, wallet TEXT NOT NULL, pairs INTEGER NOT NULL, at_ms INTEGER NOT NULL);
`;

/** How long a credited item's id is kept (as hub/cluster/redis-state.ts CREDIT_ITEM_TTL_MS: the same promise). */
export const CREDITED_ITEM_KEEP_MS = 24 * 60 * 60 * 1000;
/** Forgetting old item ids runs once per this many credited items. */
const PRUNE_EVERY = 1000;

export class HubStore {
  private readonly db: Database.Database;
  private readonly stmts;
  private sincePrune = 0;

  constructor(path: string) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.db = new Database(path);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.exec(SCHEMA);
    this.stmts = {
      getSetting: this.db.prepare<[string], { value: Buffer }>('SELECT value FROM settings WHERE key = ?'),
      putSetting: this.db.prepare('INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value'),
      upsertModel: this.db.prepare(
        'INSERT INTO models (name, path, first_seen_ms, last_seen_ms) VALUES (?, ?, ?, ?) ' +
          'ON CONFLICT(name) DO UPDATE SET path = excluded.path, last_seen_ms = excluded.last_seen_ms',
      ),
      models: this.db.prepare<[], { name: string; path: string | null; first_seen_ms: number }>(
        'SELECT name, path, first_seen_ms FROM models ORDER BY name',
      ),
      touchVolunteer: this.db.prepare(
        'INSERT INTO volunteers (wallet, first_seen_ms, last_seen_ms) VALUES (?, ?, ?) ON CONFLICT(wallet) DO UPDATE SET last_seen_ms = excluded.last_seen_ms',
      ),
      addCredit: this.db.prepare(
        'INSERT INTO volunteers (wallet, first_seen_ms, last_seen_ms, credit_pairs) VALUES (?, ?, ?, ?) ' +
          'ON CONFLICT(wallet) DO UPDATE SET credit_pairs = credit_pairs + excluded.credit_pairs, last_seen_ms = excluded.last_seen_ms',
      ),
      volunteer: this.db.prepare<[string], { wallet: string; first_seen_ms: number; last_seen_ms: number; credit_pairs: number }>(
        'SELECT wallet, first_seen_ms, last_seen_ms, credit_pairs FROM volunteers WHERE wallet = ?',
      ),
      volunteerCount: this.db.prepare<[], { n: number }>('SELECT COUNT(*) AS n FROM volunteers'),
      quarantine: this.db.prepare(
        'INSERT INTO quarantine (subject, reason, since_ms) VALUES (?, ?, ?) ON CONFLICT(subject) DO UPDATE SET reason = excluded.reason',
      ),
      release: this.db.prepare('DELETE FROM quarantine WHERE subject = ?'),
      isQuarantined: this.db.prepare<[string], { reason: string }>('SELECT reason FROM quarantine WHERE subject = ?'),
      quarantined: this.db.prepare<[], { subject: string; reason: string; since_ms: number }>(
        'SELECT subject, reason, since_ms FROM quarantine ORDER BY since_ms, subject',
      ),
      markItem: this.db.prepare('INSERT INTO credited_items (item, at_ms) VALUES (?, ?) ON CONFLICT(item) DO NOTHING'),
      pruneItems: this.db.prepare('DELETE FROM credited_items WHERE at_ms < ?'),
      unmarkItem: this.db.prepare('DELETE FROM credited_items WHERE item = ?'),
      outboxAdd: this.db.prepare('INSERT INTO credit_outbox (item, wallet, pairs, at_ms) VALUES (?, ?, ?, ?) ON CONFLICT(item) DO NOTHING'),
      outboxDelete: this.db.prepare('DELETE FROM credit_outbox WHERE item = ?'),
      outbox: this.db.prepare<[], { item: string; wallet: string; pairs: number; at_ms: number }>(
        'SELECT item, wallet, pairs, at_ms FROM credit_outbox ORDER BY rowid',
      ),
    };
  }

  close(): void {
    this.db.close();
  }

  /** The HMAC secret for node tokens: created once, then the same across restarts. */
  tokenSecret(): Uint8Array {
    const row = this.stmts.getSetting.get('token_secret');
    if (row) return new Uint8Array(row.value);
    const secret = randomBytes(32);
    this.stmts.putSetting.run('token_secret', secret);
    return new Uint8Array(secret);
  }

  setting(key: string): string | undefined {
    return this.stmts.getSetting.get(key)?.value.toString();
  }

  setSetting(key: string, value: string): void {
    this.stmts.putSetting.run(key, Buffer.from(value));
  }

  recordModel(name: string, path: string | null, nowMs: number): void {
    this.stmts.upsertModel.run(name, path, nowMs, nowMs);
  }

  models(): Array<{ name: string; path: string | null; first_seen_ms: number }> {
    return this.stmts.models.all();
  }

  touchVolunteer(wallet: string, nowMs: number): void {
    this.stmts.touchVolunteer.run(wallet, nowMs, nowMs);
  }

  addCredit(wallet: string, pairs: number, nowMs: number): void {
    if (!Number.isSafeInteger(pairs) || pairs < 0) throw new RangeError(`credit must be a non-negative integer, got ${pairs}`);
    this.stmts.addCredit.run(wallet, nowMs, nowMs, pairs);
  }

  /**
   * Marks `item` (the id of one verified item) credited; false if it was before (then nothing changes). The caller
   * credits the pairs in the same tick (LocalCreditBook), and unmarks the item if that throws. Item ids are kept
   * CREDITED_ITEM_KEEP_MS.
   */
  markCredited(item: string, nowMs: number): boolean {
    const fresh = this.stmts.markItem.run(item, nowMs).changes === 1;
    if (fresh && ++this.sincePrune >= PRUNE_EVERY) {
      this.sincePrune = 0;
      this.stmts.pruneItems.run(nowMs - CREDITED_ITEM_KEEP_MS);
    }
    return fresh;
  }

  /** Takes back a mark whose credit could not be written. */
  unmarkCredited(item: string): void {
    this.stmts.unmarkItem.run(item);
  }

  /** With `--redis`: a credit write waiting for the cluster's Redis (cluster/credit-outbox.ts), kept until it took it. */
  outboxAdd(item: string, wallet: string, pairs: number, atMs: number): void {
    this.stmts.outboxAdd.run(item, wallet, pairs, Math.round(atMs));
  }

  outboxDelete(item: string): void {
    this.stmts.outboxDelete.run(item);
  }

  /** The waiting credit writes, in the order they were added. */
  outbox(): Array<{ item: string; wallet: string; pairs: number; at_ms: number }> {
    return this.stmts.outbox.all();
  }

  volunteer(wallet: string): { wallet: string; first_seen_ms: number; last_seen_ms: number; credit_pairs: number } | undefined {
    return this.stmts.volunteer.get(wallet);
  }

  volunteerCount(): number {
    return this.stmts.volunteerCount.get()?.n ?? 0;
  }

  quarantine(subject: string, reason: string, nowMs: number): void {
    this.stmts.quarantine.run(subject, reason, nowMs);
  }

  release(subject: string): void {
    this.stmts.release.run(subject);
  }

  quarantineReason(subject: string): string | undefined {
    return this.stmts.isQuarantined.get(subject)?.reason;
  }

  /** Every quarantined subject, oldest first. */
  quarantined(): Array<{ subject: string; reason: string; since_ms: number }> {
    return this.stmts.quarantined.all();
  }
}
