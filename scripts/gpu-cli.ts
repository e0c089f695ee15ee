/**
 * bin/expertswarm.js for the GPU bundle (scripts/gpu-bundle-plan.ts): the same two commands, without tsx's loader —
 * the bundle is plain JavaScript and the GPU host has no node_modules to load tsx from.
 *
 *   node app/bin/expertswarm.js volunteer --hub … | hub …
 */
const [command, ...rest] = process.argv.slice(2);
if (command === 'volunteer') {
  const { main } = await import('../volunteer/node/main.ts');
  process.exitCode = await main(rest);
} else {
  const { main } = await import('../hub/cli.ts');
  process.exitCode = await main(process.argv.slice(2));
}
