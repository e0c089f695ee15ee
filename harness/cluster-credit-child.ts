/**
 * A hub of a cluster in a process of its own, to be SIGKILLed with credit waiting (test/integration/hub-cluster-feed.test.ts):
 * starts with `--state DIR` and `--redis URL` (degraded if Redis is away), credits `PAIRS` to `WALLET` through its
 * ledger (the credit outbox, hub/cluster/credit-outbox.ts), prints `{"ready":true,"pending":N}` and waits to be killed.
 *
 *   node --import tsx harness/cluster-credit-child.ts STATE_DIR REDIS_URL MODEL_PATH WALLET PAIRS
 */
import { testHub } from './hub-fixtures.ts';

const [stateDir, redis, modelPath, wallet, pairs] = process.argv.slice(2) as [string, string, string, string, string];
const t = await testHub({
  stateDir,
  models: [{ path: modelPath, name: 'wide' }],
  redis,
  cluster: { hubId: 'hub-k', syncMs: 50, connectTimeoutMs: 300, reconnectMaxMs: 100, commandTimeoutMs: 300 },
});
t.hub.addCredit(wallet, Number(pairs));
await t.hub.clusterFlush();
console.log(JSON.stringify({ ready: true, pending: t.hub.clusterStatus()?.pending.credits ?? -1 }));
setInterval(() => {}, 60_000); // until SIGKILL
