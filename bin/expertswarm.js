#!/usr/bin/env node
// `npx expertswarm hub …` / `npx expertswarm volunteer …` — TypeScript, run through tsx's loader.
import { register } from 'tsx/esm/api';

register();
const { runCommand } = await import('./commands.ts');
process.exitCode = await runCommand(process.argv.slice(2));
