#!/usr/bin/env node
// `npx expertswarm hub …` / `npx expertswarm volunteer …` — TypeScript, run through tsx's loader.
import { register } from 'tsx/esm/api';

register();
const [command, ...rest] = process.argv.slice(2);
if (command === 'volunteer') {
  const { main } = await import('../volunteer/node/main.ts');
  process.exitCode = await main(rest);
} else {
  const { main } = await import('../hub/cli.ts');
  process.exitCode = await main(process.argv.slice(2));
}
