/**
 * The volunteer client's one catalogue of failure codes: what `failed` states and `load_failed` messages carry.
 * Pages and tests match the code; the message is for people.
 */
export const VOLUNTEER_ERRORS = {
  /** The hub answered the slice download with an error status. */
  SHARD_HTTP: 'the hub refused the slice download',
  /** The downloaded bytes do not hash to the digest the hub announced. */
  SHARD_DIGEST_MISMATCH: 'the slice downloaded does not match its digest',
  /** More bytes than announced, or a size above the client's cap. */
  SHARD_TOO_LARGE: 'the slice is larger than announced or allowed',
  /** The download stopped (network) and resuming failed too. */
  SHARD_NETWORK: 'the slice download failed',
  /** The slice needs more memory than the budget, or than one GPU binding can hold. */
  SLICE_DOES_NOT_FIT: 'the slice does not fit this device',
  /** Neither WebGPU nor the wasm fallback could build and compute the slice. */
  NO_BACKEND: 'no backend could compute the slice',
  /** The hub closed the channel for good (bad token, version); retrying will not help. */
  HUB_REFUSED: 'the hub refused this volunteer',
  /** A work frame could not be computed. */
  COMPUTE_FAILED: 'computing a work frame failed',
} as const;

export type VolunteerErrorCode = keyof typeof VOLUNTEER_ERRORS;

export class VolunteerError extends Error {
  constructor(
    readonly code: VolunteerErrorCode,
    message: string = VOLUNTEER_ERRORS[code],
  ) {
    super(message);
    this.name = 'VolunteerError';
  }
}

export const errorMessage = (e: unknown): string => (e instanceof Error ? e.message : String(e));
