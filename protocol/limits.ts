/**
 * The caps that more than one wire shares: the hub's HTTP edge (hub/limits.ts, hub/auth/tokens.ts) and the volunteer
 * channel (protocol/channel/limits.ts VOLUNTEER_LIMITS) both read these, so a worker id or a model name that one side accepts
 * the other accepts too. Everything else stays beside the one parser that uses it.
 */

/** A model name in a body, query or hello. */
export const MODEL_NAME_MAX_CHARS = 256;
/** A volunteer's `worker_id`. */
export const WORKER_ID_MAX_CHARS = 128;
/** `max_experts` a volunteer may offer (0 = no limit). */
export const OFFER_EXPERTS_MAX = 2 ** 20;
/** Each byte count of a volunteer's `device` (2^50 B = 1 PiB: above any GPU, still an exact double). */
export const DEVICE_BYTES_MAX = 2 ** 50;
/** `n_layer` and `n_expert` a volunteer may state (checked against the model before anything else). */
export const LAYERS_MAX = 4096;
/** Experts per layer; local expert ids are u16 on the channel, so any slice fits. */
export const EXPERTS_MAX = 4096;
/** Held ranges in one heartbeat or coverage report; more → TOO_MANY_SEGMENTS (HTTP) or TOO_LARGE (channel). */
export const HELD_RANGES_MAX = 256;
/** Longest node token accepted (and longest Authorization header). */
export const TOKEN_MAX_CHARS = 1024;
