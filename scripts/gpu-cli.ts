/**
 * bin/expertswarm.js for the GPU bundle (scripts/gpu-bundle-plan.ts): the same commands (bin/commands.ts), without
 * tsx's loader — the bundle is plain JavaScript and the GPU host has no node_modules to load tsx from.
 *
 *   node app/bin/expertswarm.js volunteer --hub … | hub …
 */
import { runCommand } from '../bin/commands.ts';

process.exitCode = await runCommand(process.argv.slice(2));
