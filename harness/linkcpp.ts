/**
 * Starts and stops a real linkcpp-server (the coordinator built by `npm run build:coordinator`) for tests.
 * Every wait is bounded; a server that does not come up is killed and its log is put in the error.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from '../hub/net.ts';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';

export const LINKCPP_SERVER = fileURLToPath(new URL('../coordinator/bin/linkcpp-server', import.meta.url));
export const LINKCPP_QUANTIZE = fileURLToPath(new URL('../coordinator/bin/linkcpp-quantize', import.meta.url));

export interface ServerOptions {
  model: string;
  /** Server binary; linkcpp-server by default. */
  binary?: string;
  slots?: number;
  ctx?: number;
  threads?: number;
  args?: string[];
  env?: Record<string, string>;
  startTimeoutMs?: number;
}

export interface RunningServer {
  url: string;
  proc: ChildProcess;
  log(): string;
  stop(): Promise<void>;
}

export { freePort } from '../hub/net.ts';

export async function startServer(o: ServerOptions): Promise<RunningServer> {
  const binary = o.binary ?? LINKCPP_SERVER;
  if (!existsSync(binary)) throw new Error(`${binary} is missing: run npm run build:coordinator`);
  const port = await freePort();
  const slots = o.slots ?? 1;
  const args = [
    '-m',
    o.model,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '-c',
    String((o.ctx ?? 512) * slots),
    '-np',
    String(slots),
    '-t',
    String(o.threads ?? 2),
    '--no-warmup',
    ...(o.args ?? []),
  ];
  const proc = spawn(binary, args, { env: { ...process.env, ...o.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let logText = '';
  const keep = (d: Buffer): void => {
    logText += d.toString();
    if (logText.length > 1_000_000) logText = logText.slice(-500_000);
  };
  proc.stdout?.on('data', keep);
  proc.stderr?.on('data', keep);
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const server: RunningServer = {
    url: `http://127.0.0.1:${port}`,
    proc,
    log: () => logText,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
    },
  };
  const deadline = Date.now() + (o.startTimeoutMs ?? 60_000);
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`linkcpp-server exited with ${proc.exitCode}:\n${logText.slice(-4000)}`);
    try {
      const r = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(1000) });
      if (r.ok) return server;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await server.stop();
  throw new Error(`linkcpp-server did not become healthy in time:\n${logText.slice(-4000)}`);
}

export interface Completion {
  tokens: number[];
  content: string;
  raw: Record<string, unknown>;
}

/** Greedy completion returning token ids; `ban` lists token ids that must never be sampled. */
export async function completeGreedy(
  url: string,
  prompt: string,
  nPredict: number,
  ban: number[],
  extra: Record<string, unknown> = {},
): Promise<Completion> {
  const body = {
    prompt,
    n_predict: nPredict,
    temperature: 0,
    top_k: 1,
    seed: 1,
    cache_prompt: false,
    ignore_eos: true,
    return_tokens: true,
    logit_bias: ban.map((id) => [id, false]),
    ...extra,
  };
  const r = await fetch(`${url}/completion`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(120_000),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`/completion answered ${r.status}: ${text.slice(0, 500)}`);
  const raw = JSON.parse(text) as Record<string, unknown>;
  return { tokens: raw.tokens as number[], content: raw.content as string, raw };
}

/** The server's tokens for `text` as a completion prompt would get them (special tokens added as the model says). */
export async function tokenize(url: string, text: string): Promise<number[]> {
  const r = await fetch(`${url}/tokenize`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ content: text, add_special: true }),
    signal: AbortSignal.timeout(10_000),
  });
  if (!r.ok) throw new Error(`/tokenize answered ${r.status}`);
  return ((await r.json()) as { tokens: number[] }).tokens;
}
