#!/usr/bin/env node
// `npx expertswarm hub …` — the hub is TypeScript, run through tsx's loader.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../hub/cli.ts');
process.exitCode = await main(process.argv.slice(2));
