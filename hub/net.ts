/** Network helpers: a free loopback port, and the key that per-client limits count by. */
import { createServer } from 'node:net';

/** The key per-client limits count by: the client's address, or its /64 for IPv6 (clients rotate inside it). */
export function clientKey(req: { ip: string }): string {
  const ip = req.ip;
  if (ip.includes(':') && !ip.startsWith('::ffff:')) return ip.split(':').slice(0, 4).join(':');
  return ip;
}

/** A TCP port on loopback that was free a moment ago (the OS picks it; the caller binds it next). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => (typeof a === 'object' && a ? resolve(a.port) : reject(new Error('no free port'))));
    });
  });
}
