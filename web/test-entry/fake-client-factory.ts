/**
 * The volunteer page's client in Vite's `test` mode (web/vite.config.ts aliases client-factory.ts here): a scripted
 * VolunteerControls that dials nothing. Browser tests drive it through `window.volunteerFake`, setting each state,
 * device report and stats as the real client would, and read back which controls the page called.
 *
 *   await page.evaluate(() => window.volunteerFake!.set({ kind: 'waiting' }));
 */
import {
  type DeviceReport,
  emptyStats,
  type VolunteerControls,
  type VolunteerEvents,
  type VolunteerState,
  type VolunteerStats,
} from '../../volunteer/state.ts';

export type FakeCall =
  | { method: 'join'; memoryBudgetBytes: number | undefined }
  | { method: 'pause' }
  | { method: 'resume' }
  | { method: 'leave' };

type Listeners = { [K in keyof VolunteerEvents]: Set<(value: VolunteerEvents[K]) => void> };

export class ScriptedVolunteerClient implements VolunteerControls {
  state: VolunteerState = { kind: 'idle' };
  device: DeviceReport | null = null;
  stats: VolunteerStats = emptyStats();
  wallet: string | null = null;
  readonly calls: FakeCall[] = [];
  readonly hubUrl: string;
  readonly #listeners: Listeners = { state: new Set(), device: new Set(), stats: new Set() };
  #beforePause: VolunteerState | null = null;

  constructor(hubUrl: string) {
    this.hubUrl = hubUrl;
  }

  join(options?: { memoryBudgetBytes?: number }): void {
    this.calls.push({ method: 'join', memoryBudgetBytes: options?.memoryBudgetBytes });
    this.set({ kind: 'connecting', attempt: 1 });
  }

  pause(): void {
    this.calls.push({ method: 'pause' });
    this.#beforePause = this.state;
    this.set({ kind: 'paused', slice: 'slice' in this.state ? this.state.slice : null });
  }

  resume(): void {
    this.calls.push({ method: 'resume' });
    this.set(this.#beforePause ?? { kind: 'waiting' });
    this.#beforePause = null;
  }

  async leave(): Promise<void> {
    this.calls.push({ method: 'leave' });
    this.set({ kind: 'left' });
  }

  on<K extends keyof VolunteerEvents>(event: K, listener: (value: VolunteerEvents[K]) => void): () => void {
    const set = this.#listeners[event] as Set<(value: VolunteerEvents[K]) => void>;
    set.add(listener);
    const current = { state: this.state, device: this.device, stats: this.stats }[event];
    if (current !== null) listener(current as VolunteerEvents[K]);
    return () => set.delete(listener);
  }

  /** Test hook: move to a state as the real client would. */
  set(state: VolunteerState): void {
    this.state = state;
    for (const l of this.#listeners.state) l(state);
  }

  setDevice(device: DeviceReport): void {
    this.device = device;
    for (const l of this.#listeners.device) l(device);
  }

  setStats(stats: VolunteerStats): void {
    this.stats = stats;
    for (const l of this.#listeners.stats) l(stats);
  }
}

declare global {
  interface Window {
    volunteerFake?: ScriptedVolunteerClient;
  }
}

export function createClient(hubUrl: string, _options: { model?: string } = {}): VolunteerControls {
  const fake = new ScriptedVolunteerClient(hubUrl);
  window.volunteerFake = fake;
  return fake;
}
