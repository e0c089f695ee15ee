/**
 * `expertswarm hub` for a test that needs the hub as a process of its own (to kill it) serving a given build of the
 * pages: the CLI's own arguments, the pages from the directory in EXPERTSWARM_TEST_PAGES. Stops on SIGTERM / SIGINT.
 *
 *   spawn(process.execPath, ['--import', 'tsx', 'harness/hub-main.ts', '--model', 'm=…'], { env: { …, EXPERTSWARM_TEST_PAGES: dir } })
 */
import { parseHubArgs, runHub } from '../hub/cli.ts';

const config = parseHubArgs(process.argv.slice(2));
if (config === 'help') throw new Error('hub-main takes the hub’s arguments, not --help');
const dir = process.env.EXPERTSWARM_TEST_PAGES;
const running = await runHub(config, console.log, dir ? { dir } : {});
await new Promise<void>((resolve) => {
  process.once('SIGTERM', () => resolve());
  process.once('SIGINT', () => resolve());
});
await running.close();
