/**
 * The two commands behind `npx expertswarm` (bin/expertswarm.js, through tsx) and the GPU bundle's plain-JavaScript
 * copy of it (scripts/gpu-cli.ts): `volunteer …` runs the headless volunteer, anything else the hub's CLI.
 *
 *   process.exitCode = await runCommand(process.argv.slice(2));
 */
export async function runCommand(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === 'volunteer') {
    const { main } = await import('../volunteer/node/main.ts');
    return main(rest);
  }
  const { main } = await import('../hub/cli.ts');
  return main(argv);
}
