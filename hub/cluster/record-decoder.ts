/**
 * The other hubs' worker records as a sync reads them, each text decoded once (codec.ts decodeWorker, its checks and
 * its JSON.parse): a record whose text is the one the last sync read comes back as the same object, so a sync with
 * 1,000 serving workers decodes only those whose heartbeat rewrote their record since (about syncMs / 15 s of them)
 * and the mirror re-indexes only those (cluster.ts applyRemote compares by identity). Pure but for its memory.
 *
 *   const d = new RecordDecoder();
 *   const { workers, corrupt, decoded } = d.decode(await redis.readWorkerTexts(models, isLocal));
 */
import { type ClusterWorker, decodeWorker } from './codec.ts';
import type { CorruptValue } from './redis-state.ts';

interface Seen {
  text: string;
  worker: ClusterWorker | null;
  error: string | null;
}

export class RecordDecoder {
  private last = new Map<string, Seen>();

  /**
   * The records of one sync: decoded (or the last sync's object for an unchanged text), those of another model than
   * their set's left out, the unreadable ones in `corrupt` (again at each sync, as long as they are there).
   */
  decode(entries: ReadonlyArray<{ model: string; id: string; key: string; text: string }>): {
    workers: ClusterWorker[];
    corrupt: CorruptValue[];
    decoded: number;
  } {
    const next = new Map<string, Seen>();
    const workers: ClusterWorker[] = [];
    const corrupt: CorruptValue[] = [];
    let decoded = 0;
    for (const e of entries) {
      let seen = this.last.get(e.key);
      if (seen?.text !== e.text) {
        decoded++;
        try {
          seen = { text: e.text, worker: decodeWorker(e.text, e.key, e.id), error: null };
        } catch (err) {
          seen = { text: e.text, worker: null, error: (err as Error).message };
        }
      }
      next.set(e.key, seen);
      if (seen.worker) {
        if (seen.worker.model === e.model) workers.push(seen.worker);
      } else corrupt.push({ key: e.key, error: seen.error ?? 'unreadable' });
    }
    this.last = next;
    return { workers, corrupt, decoded };
  }

  /** Forgets every text (Redis away: the next sync decodes everything anew). */
  clear(): void {
    this.last.clear();
  }
}
