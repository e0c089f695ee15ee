/**
 * Where the page gets its volunteer client; the page itself sees only VolunteerControls. Vite's `test` mode aliases
 * this module to web/test-entry/fake-client-factory.ts (a scripted fake with the same export).
 */
import type { VolunteerControls } from '../../../volunteer/state.ts';
import { createVolunteerClient } from './browser-client.ts';

export function createClient(hubUrl: string, options: { model?: string } = {}): VolunteerControls {
  return createVolunteerClient({ hubUrl, ...options });
}
