/**
 * The headless volunteer's slice cache: one file per digest in a directory (default ~/.cache/expertswarm/shards),
 * written to a temporary name and renamed, so a crash never leaves a half file under a digest's name.
 */
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { checkDigest, type ShardCache } from '../shard-cache.ts';

export const DEFAULT_SHARD_CACHE_DIR = join(homedir(), '.cache', 'expertswarm', 'shards');

export class FileShardCache implements ShardCache {
  constructor(private readonly dir: string = DEFAULT_SHARD_CACHE_DIR) {}

  private path(digest: string): string {
    return join(this.dir, `${checkDigest(digest).replace(':', '-')}.gguf`);
  }

  async get(digest: string): Promise<Uint8Array | null> {
    try {
      return new Uint8Array(await readFile(this.path(digest)));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  async put(digest: string, bytes: Uint8Array): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    const final = this.path(digest);
    const temp = `${final}.${process.pid}.${Date.now()}.part`;
    await writeFile(temp, bytes);
    await rename(temp, final);
  }

  async delete(digest: string): Promise<void> {
    await rm(this.path(digest), { force: true });
  }
}
