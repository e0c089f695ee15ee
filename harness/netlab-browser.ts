/**
 * Headless Chromium inside a network lab namespace (issue 29, docs/netlab.md): its every socket (pages, WebSockets,
 * WebRTC's ICE, STUN and TURN) starts in that namespace, behind the lab's NAT, as a tab in a home is. playwright-core
 * drives Chromium over a pipe (`--remote-debugging-pipe`, fds 3 and 4), so it launches a small wrapper script as the
 * "executable" that runs `ip netns exec NS /usr/bin/chromium "$@"`: `ip netns exec` execs Chromium in place, the pipe
 * descriptors pass through, and nothing listens on a port.
 *
 *   const browser = await launchChromiumIn(lab.nsOf('a'), ['http://198.18.0.2:8080']);
 *   const tab = await joinVolunteerPage(browser, 'http://198.18.0.2:8080', 'wasm');
 *
 * The hub's pages are served over plain http from a lab address, which is not a secure context (no WebCrypto, no
 * WebGPU): `secureOrigins` are treated as secure (`--unsafely-treat-insecure-origin-as-secure`), as a hub behind TLS
 * would be.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { CHROMIUM, CHROMIUM_LAUNCH } from './browser.ts';

const NS_NAME = /^[A-Za-z0-9_.-]+$/;
const ORIGIN = /^https?:\/\/[A-Za-z0-9.-]+(:\d+)?$/;

export async function launchChromiumIn(ns: string, secureOrigins: string[] = [], extraArgs: string[] = []): Promise<Browser> {
  if (!NS_NAME.test(ns)) throw new Error(`netlab-browser: bad namespace name "${ns}"`);
  for (const o of secureOrigins) if (!ORIGIN.test(o)) throw new Error(`netlab-browser: "${o}" is not an origin (http://host:port)`);
  const dir = mkdtempSync(join(tmpdir(), 'xs-chromium-ns-'));
  const wrapper = join(dir, 'chromium');
  writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec '${ns}' ${CHROMIUM} "$@"\n`);
  chmodSync(wrapper, 0o755);
  const args = [...CHROMIUM_LAUNCH.args, ...extraArgs];
  if (secureOrigins.length > 0) args.push(`--unsafely-treat-insecure-origin-as-secure=${secureOrigins.join(',')}`);
  try {
    const browser = await chromium.launch({ ...CHROMIUM_LAUNCH, executablePath: wrapper, args });
    browser.on('disconnected', () => rmSync(dir, { recursive: true, force: true }));
    return browser;
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}
