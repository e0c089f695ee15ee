/**
 * A hub in a process of its own, for tests that need it somewhere the test process is not (a network lab namespace,
 * harness/netlab.ts: `lab.spawn('hub', process.execPath, ['--import', 'tsx', HUB_PROCESS, JSON.stringify(spec)])`).
 * Takes a HubConfig (over defaultConfig) and an optional pages folder (harness/pages-build.ts) as one JSON argument,
 * prints `{"ready":true,"url":…}` once the API listens and its coordinators started, and closes on SIGTERM or when
 * its stdin closes (the test process is gone).
 */
import { fileURLToPath } from 'node:url';
import { runHub } from '../hub/cli.ts';
import { defaultConfig, type HubConfig } from '../hub/hub.ts';

export const HUB_PROCESS = fileURLToPath(import.meta.url);

export interface HubProcessSpec {
  config: Partial<HubConfig>;
  /** A built pages folder the hub serves (`buildPages`); absent: web/dist. */
  pagesDir?: string;
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? '{}') as HubProcessSpec;
  const config = defaultConfig(spec.config);
  // defaultConfig keeps the defaults' saturation and peers objects: a spec's fields go over them.
  if (spec.config.saturation) config.saturation = { ...defaultConfig().saturation, ...spec.config.saturation };
  const running = await runHub(config, (l) => console.error(l), spec.pagesDir ? { dir: spec.pagesDir } : {});
  let closing = false;
  const stop = (): void => {
    if (closing) return;
    closing = true;
    running.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', stop);
  process.stdin.on('end', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();
  console.log(JSON.stringify({ ready: true, url: running.url }));
}

if (process.argv[1] === HUB_PROCESS) {
  main().catch((e: unknown) => {
    console.error(e instanceof Error ? (e.stack ?? e.message) : String(e));
    process.exit(1);
  });
}
