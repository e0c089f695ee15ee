/**
 * The page's view of one volunteer client: the client's events as reactive state, the retry countdown, and the
 * user's actions. The sentences and rules live in page-model.ts; this class only keeps them current.
 *
 *   const view = new VolunteerView(client);
 *   view.message.title;   // "Waiting for demand"
 *   view.join();          // the consent: the client dials the hub only now
 *   view.destroy();
 */
import {
  type BackendPreference,
  type DeviceReport,
  emptyStats,
  type VolunteerControls,
  type VolunteerState,
  type VolunteerStats,
} from '../../../volunteer/state.ts';
import {
  actionsFor,
  BUDGET_MIB,
  budgetBytes,
  clampBudgetMiB,
  describeState,
  retrySecondsLeft,
  SHARE_INITIAL_MIB_PER_S,
  shareChoice,
} from './page-model.ts';

/** How often the retry countdown is redrawn; well under a second so it never skips a number. */
const COUNTDOWN_TICK_MS = 250;

export class VolunteerView {
  state: VolunteerState = $state.raw({ kind: 'idle' });
  device: DeviceReport | null = $state.raw(null);
  stats: VolunteerStats = $state.raw(emptyStats());
  budgetMiB: number = $state(BUDGET_MIB.initial);
  /** The backend the visitor asks for ('auto': the faster one, measured on the slice). */
  backend: BackendPreference = $state('auto');
  /** The upload cap for passing the slice on to other volunteers, MiB/s (0: do not share). */
  shareMiBPerS: number = $state(SHARE_INITIAL_MIB_PER_S);

  #now = $state(0);
  #retrySince = 0;
  #timer: ReturnType<typeof setInterval> | undefined;
  readonly #unsubscribe: (() => void)[];

  readonly message = $derived(
    describeState(this.state, {
      device: this.device,
      ...(this.state.kind === 'retrying' ? { secondsLeft: retrySecondsLeft(this.state.inSeconds, this.#retrySince, this.#now) } : {}),
    }),
  );
  readonly actions = $derived(actionsFor(this.state));
  /** Whether the user has joined (anything but idle and left): the budget is then fixed. */
  readonly joined = $derived(this.state.kind !== 'idle' && this.state.kind !== 'left');

  readonly #client: VolunteerControls;
  readonly #clock: () => number;

  constructor(client: VolunteerControls, clock: () => number = () => Date.now()) {
    this.#client = client;
    this.#clock = clock;
    this.#now = clock();
    this.#unsubscribe = [
      client.on('state', (s) => this.#onState(s)),
      // Called at once with the current value, which is null until the client has examined the device.
      client.on('device', (d) => {
        this.device = d ?? null;
      }),
      client.on('stats', (s) => {
        this.stats = s;
      }),
    ];
  }

  join(): void {
    this.budgetMiB = clampBudgetMiB(this.budgetMiB);
    this.#client.join({ memoryBudgetBytes: budgetBytes(this.budgetMiB), backend: this.backend, share: shareChoice(this.shareMiBPerS) });
  }

  pause(): void {
    this.#client.pause();
  }

  resume(): void {
    this.#client.resume();
  }

  leave(): Promise<void> {
    return this.#client.leave();
  }

  destroy(): void {
    for (const off of this.#unsubscribe) off();
    this.#stopTicking();
  }

  #onState(s: VolunteerState): void {
    this.#now = this.#clock();
    if (s.kind === 'retrying') {
      this.#retrySince = this.#now;
      this.#timer ??= setInterval(() => {
        this.#now = this.#clock();
      }, COUNTDOWN_TICK_MS);
    } else {
      this.#stopTicking();
    }
    this.state = s;
  }

  #stopTicking(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
