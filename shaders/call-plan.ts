/**
 * The plan of one compute call: everything the slice's shape, the call's routing, the tuning, the weight parts, the
 * numerics and the device limits decide, with no GPU — the per-call buffer sizes (BATCH_TOO_LARGE past a binding),
 * the batched regime's grouping of pairs by expert, which weight parts dispatch and with how many workgroups (folded
 * into 2-D; DISPATCH_TOO_LARGE), the activation roundings of llama numerics, and the uniform of each dispatch.
 * call-run.ts carries a plan out on a device; test/unit/call-plan.test.ts tables it.
 *
 * Per call (nPairs = nTokens · nUsed):
 *   [llama]  round_activations                   the rows, per the gate and up types' vec-dot types (callRounding)
 * for each part p that some pair routes to:
 *   up       expert_up(_q8) / expert_up_batched  h[nPairs × ff]       (one dispatch per up pass)
 *   [llama]  round_activations                   h, per the down type's vec-dot type (once, after every part's up)
 * for each such part:
 *   down     expert_down(_q8) / …_batched        y[nPairs × nEmbd]
 * then once:
 *   combine  expert_combine                      out[nTokens × nEmbd] = Σ_k prob · y
 *
 * @example
 *   const plan = planCall(shape, { ids, counts, nTokens, nUsed, regime }, tuning, [[0, 8]], limits);
 *   plan.sizes.hidden; plan.parts[0].up; plan.uniforms;   // bytes, [x, y] workgroups, Shape uniforms
 */
import type { ExpertMatrix } from '../gguf/expert-slice.ts';
import type { Numerics } from '../protocol/numerics.ts';
import { ExpertRuntimeError } from './errors.ts';
import { groupByExpert, type ExpertGroups } from './expert-groups.ts';
import { INT8_LANES, INT8_SNIPPETS, type IntegerDot, type KernelTuning } from './expert-ffn.ts';
import { vecDotType } from './reference/ggml-activations.ts';
import type { Regime } from './regime-policy.ts';
import { roundModeOf, roundScaleBytes, roundWorkgroups, writeRoundParams, type RoundMode } from './round-activations.ts';
import type { CallShape, SliceShape, SliceTypes } from './slice.ts';

/** Bytes a u32 byte offset in the kernels can address. */
const U32_ADDRESSABLE = 2 ** 32 - 4;

/** The smallest of the limits that cap one binding, with its name (`cap`: the runtime's maxBindingBytes option). */
export function bindingLimit(
  limits: Pick<GPUSupportedLimits, 'maxStorageBufferBindingSize' | 'maxBufferSize'>,
  cap?: number,
): { limit: number; limitName: string } {
  const candidates: [string, number][] = [
    ['maxStorageBufferBindingSize', limits.maxStorageBufferBindingSize],
    ['maxBufferSize', limits.maxBufferSize],
    ['u32 byte addressing of the kernels', U32_ADDRESSABLE],
  ];
  if (cap !== undefined) candidates.push(['the maxBindingBytes option', cap]);
  candidates.sort((a, b) => a[1] - b[1]);
  const [limitName, limit] = candidates[0]!;
  return { limit, limitName };
}

/** Fields of `struct Shape` in wgsl/common.wgsl, in declaration order; each is one u32. */
export const SHAPE_FIELDS = [
  'n_embd',
  'ff',
  'n_tokens',
  'n_used',
  'n_expert',
  'n_row_tiles',
  'expert_begin',
  'expert_end',
  'tile_begin',
] as const;
export type ShapeField = (typeof SHAPE_FIELDS)[number];

/** Bytes of the Shape uniform. */
export const SHAPE_UNIFORM_BYTES = SHAPE_FIELDS.length * 4;

/** What one part's dispatches cover: its experts [expertBegin, expertEnd) and, batched, its tiles [tileBegin, + nRowTiles). */
export interface PartDispatch {
  expertBegin: number;
  expertEnd: number;
  tileBegin: number;
  nRowTiles: number;
}

/** The Shape uniform's bytes, written in SHAPE_FIELDS order (the WGSL struct's). */
export function writeShapeUniform(s: Pick<SliceShape, 'nEmbd' | 'ff' | 'nExpert'>, call: CallShape, part: PartDispatch): Uint32Array {
  const values: Record<ShapeField, number> = {
    n_embd: s.nEmbd,
    ff: s.ff,
    n_tokens: call.nTokens,
    n_used: call.nUsed,
    n_expert: s.nExpert,
    n_row_tiles: part.nRowTiles,
    expert_begin: part.expertBegin,
    expert_end: part.expertEnd,
    tile_begin: part.tileBegin,
  };
  return Uint32Array.from(SHAPE_FIELDS, (f) => values[f]);
}

/**
 * Workgroup counts (x, y) for `workgroups` workgroups: 1-D while they fit one dimension, else folded into 2-D; the
 * kernels rebuild the linear index as x + y · num_workgroups.x and skip the padding past `workgroups`.
 */
export function foldDispatch(workgroups: number, maxPerDimension: number): [number, number] {
  if (workgroups <= maxPerDimension) return [workgroups, 1];
  const y = Math.ceil(workgroups / maxPerDimension);
  if (y > maxPerDimension) {
    throw new ExpertRuntimeError(
      'DISPATCH_TOO_LARGE',
      { workgroups, maxPerDimension },
      `${workgroups} workgroups do not fit a ${maxPerDimension} × ${maxPerDimension} dispatch; send fewer tokens per call`,
    );
  }
  return [Math.ceil(workgroups / y), y];
}

/** Workgroups of expert_up / expert_down for a call (before folding). */
export function rowKernelWorkgroups(nPairs: number, rows: number, rowsPerWorkgroup: number): number {
  return nPairs * Math.ceil(rows / rowsPerWorkgroup);
}

/** Weight rows per workgroup of the int8 kernels: workgroupSize / INT8_LANES, whatever rowsPerWorkgroup says. */
export function int8RowsPerWorkgroup(workgroupSize: number): number {
  return workgroupSize / INT8_LANES;
}

/** Workgroups of expert_up_batched / expert_down_batched (before folding): every row tile × every column tile of `rows`. */
export function batchedWorkgroups(nRowTiles: number, rows: number, tileCols: number): number {
  return nRowTiles * Math.ceil(rows / tileCols);
}

/** Workgroups of expert_combine for a call (before folding). */
export function combineWorkgroups(nTokens: number, nEmbd: number, workgroupSize: number): number {
  return Math.ceil((nTokens * nEmbd) / workgroupSize);
}

/** Tiles each expert's pairs make in the batched regime, as groupByExpert cuts them. */
function tilesPerExpert(counts: Uint32Array, tileRows: number): Uint32Array {
  return counts.map((c) => Math.ceil(c / tileRows));
}

/** The dispatch of the part holding experts [begin, end), or null when no pair routes to its experts. */
function partDispatch([begin, end]: readonly [number, number], counts: Uint32Array, tiles: Uint32Array | null): PartDispatch | null {
  let pairs = 0;
  for (let e = begin; e < end; e++) pairs += counts[e]!;
  if (pairs === 0) return null;
  if (!tiles) return { expertBegin: begin, expertEnd: end, tileBegin: 0, nRowTiles: 0 };
  let tileBegin = 0;
  for (let e = 0; e < begin; e++) tileBegin += tiles[e]!;
  let nRowTiles = 0;
  for (let e = begin; e < end; e++) nRowTiles += tiles[e]!;
  return { expertBegin: begin, expertEnd: end, tileBegin, nRowTiles };
}

/** One activation rounding: ggml's rounding `mode` (round_activations.wgsl), with the packed int8 output or not. */
export interface RoundStep {
  mode: RoundMode;
  /** The int8 kernels read the packed quants and scales (main_packed); otherwise the float kernels read the values. */
  packed: boolean;
}

/** How a call's activations are rounded before each matrix; null: as they are (exact numerics, or F32 weights). */
export interface CallRounding {
  gate: RoundStep | null;
  up: RoundStep | null;
  down: RoundStep | null;
}

/** No rounding anywhere: exact numerics. */
export const NO_ROUNDING: CallRounding = { gate: null, up: null, down: null };

/**
 * The roundings a call needs: none in exact numerics; in llama numerics, before each matrix whose vec-dot type is not
 * F32, ggml's rounding for that type (roundModeOf(vecDotType(type))). `integerDot` (the runtime's, see IntegerDot)
 * decides whether the decode regime's kernels read packed int8: the up step when gate and up both have an integer
 * block dot (INT8_SNIPPETS) and round alike, the down step when down has one. The batched regime always reads values.
 */
export function callRounding(types: SliceTypes, numerics: Numerics, regime: Regime, integerDot: IntegerDot): CallRounding {
  if (numerics === 'exact') return NO_ROUNDING;
  const mode = (m: ExpertMatrix): RoundMode | null => {
    const r = roundModeOf(vecDotType(types[m]));
    return r === 'f32' ? null : r;
  };
  const int8 = regime === 'decode' && integerDot !== 'float';
  const [g, u, d] = [mode('gate'), mode('up'), mode('down')];
  const upPacked = int8 && INT8_SNIPPETS.has(types.gate) && INT8_SNIPPETS.has(types.up) && g === u;
  const step = (m: RoundMode | null, packed: boolean): RoundStep | null => (m ? { mode: m, packed } : null);
  return { gate: step(g, upPacked), up: step(u, upPacked), down: step(d, int8 && INT8_SNIPPETS.has(types.down)) };
}

/** A call as the planner sees it: its shape, routing (ids and their per-expert counts), the regime that serves it and its roundings. */
export interface PlannedCall extends CallShape {
  ids: Int32Array;
  /** Pairs per expert of the slice (expertCounts). */
  counts: Uint32Array;
  regime: Regime;
  /** callRounding's answer (default NO_ROUNDING: exact numerics). */
  rounding?: CallRounding;
}

/** One round_activations dispatch of a call. */
export interface PlannedRound {
  /** What it rounds: the call's rows (before gate and/or up) or the hidden vectors h (before down). */
  input: 'rows' | 'hidden';
  /** The matrices whose kernels read the result. */
  for: ExpertMatrix[];
  mode: RoundMode;
  packed: boolean;
  nRows: number;
  rowLen: number;
  /** Workgroups (x, y), folded into 2-D. */
  workgroups: [number, number];
  /** Bytes of its outputs: the rounded values, and when packed the int8 quants (one byte each) and the scales (Q8_K: and bsums). */
  bytes: { values: number; qs: number; scales: number };
}

/** The device limits a call must fit. */
export interface PlanLimits {
  /** What one per-call buffer may hold: bindingLimit of the device's limits (the maxBindingBytes option caps weights only). */
  binding: { limit: number; limitName: string };
  /** Workgroups per dispatch dimension (the device's, or lower with the maxWorkgroupsPerDimension option). */
  maxPerDimension: number;
  /** minUniformBufferOffsetAlignment: the Shape uniforms sit at multiples of it. */
  uniformAlignment: number;
}

/** Bytes of each per-call buffer. */
export interface CallBufferSizes {
  rows: number;
  probs: number;
  hidden: number;
  expertOut: number;
  out: number;
  /** decode: the ids; batched: the permutation of the pairs by expert (same size). */
  ids: number;
  /** batched: the tile list; decode: 0. */
  tiles: number;
}

/** One weight part's share of the call. */
export interface PlannedPart {
  /** Index of the part in the `parts` planCall was given. */
  index: number;
  dispatch: PartDispatch;
  /** Workgroups (x, y) of the up kernel (each up pass) and of the down kernel. */
  up: [number, number];
  down: [number, number];
}

export interface CallPlan {
  regime: Regime;
  /** Batched: the pairs grouped by expert (uploaded as the permutation and the tile list); decode: null. */
  groups: ExpertGroups | null;
  sizes: CallBufferSizes;
  /** The parts some pair routes to, in order; the others dispatch nothing. */
  parts: PlannedPart[];
  /** Workgroups (x, y) of expert_combine. */
  combine: [number, number];
  /** The roundings the kernels read (callRounding), and their dispatches: the rows' (0, 1 or 2) first, then h's (0 or 1). */
  rounding: CallRounding;
  rounds: PlannedRound[];
  /** Bytes from one uniform to the next in the uniform buffer (SHAPE_UNIFORM_BYTES rounded up to the alignment). */
  uniformStride: number;
  /**
   * The Shape uniform of each planned part, in order, then the combine's (the whole slice), then each round's
   * RoundParams (writeRoundParams): uniforms.length · uniformStride bytes.
   */
  uniforms: Uint32Array[];
}

/** The round_activations dispatches of a call with `rounding`: one per distinct rounding of the rows, then h's. */
function planRounds(
  shape: Pick<SliceShape, 'nEmbd' | 'ff'>,
  nTokens: number,
  nPairs: number,
  rounding: CallRounding,
  fold: (workgroups: number) => [number, number],
): PlannedRound[] {
  const round = (input: PlannedRound['input'], f: ExpertMatrix[], step: RoundStep, nRows: number, rowLen: number): PlannedRound => {
    const n = nRows * rowLen;
    return {
      input,
      for: f,
      mode: step.mode,
      packed: step.packed,
      nRows,
      rowLen,
      workgroups: fold(roundWorkgroups(n)),
      bytes: { values: n * 4, qs: step.packed ? n : 0, scales: step.packed ? roundScaleBytes(step.mode as 'q8_0' | 'q8_k', n) : 0 },
    };
  };
  const out: PlannedRound[] = [];
  const { gate, up, down } = rounding;
  if (gate && up && gate.mode === up.mode && gate.packed === up.packed) {
    out.push(round('rows', ['gate', 'up'], gate, nTokens, shape.nEmbd));
  } else {
    if (gate) out.push(round('rows', ['gate'], gate, nTokens, shape.nEmbd));
    if (up) out.push(round('rows', ['up'], up, nTokens, shape.nEmbd));
  }
  if (down) out.push(round('hidden', ['down'], down, nPairs, shape.ff));
  return out;
}

/**
 * Plans one call; throws BATCH_TOO_LARGE when a per-call buffer exceeds a binding and DISPATCH_TOO_LARGE when a
 * dispatch does not fold into 2-D, before any GPU work. `parts` are the expert ranges [begin, end) of the weight parts.
 */
export function planCall(
  shape: Pick<SliceShape, 'nEmbd' | 'ff' | 'nExpert'>,
  call: PlannedCall,
  tuning: KernelTuning,
  parts: readonly (readonly [number, number])[],
  limits: PlanLimits,
): CallPlan {
  const { nEmbd, ff } = shape;
  const { nTokens, nUsed, counts } = call;
  const nPairs = nTokens * nUsed;
  const { tileRows, rowsPerWorkgroup, workgroupSize, tileCols } = tuning;
  const groups = call.regime === 'batched' ? groupByExpert(call.ids, counts, tileRows) : null;
  const sizes: CallBufferSizes = {
    rows: nTokens * nEmbd * 4,
    probs: nPairs * 4,
    hidden: nPairs * ff * 4,
    expertOut: nPairs * nEmbd * 4,
    out: nTokens * nEmbd * 4,
    ids: nPairs * 4,
    tiles: groups ? groups.tiles.byteLength : 0,
  };
  const fold = (workgroups: number): [number, number] => foldDispatch(workgroups, limits.maxPerDimension);
  const rounding = call.rounding ?? NO_ROUNDING;
  const rounds = planRounds(shape, nTokens, nPairs, rounding, fold);
  const { limit, limitName } = limits.binding;
  const buffers: [string, number][] = Object.entries(sizes);
  for (const r of rounds) {
    const name = `rounded ${r.input} (${r.mode})`;
    buffers.push([`${name} values`, r.bytes.values], [`${name} quants`, r.bytes.qs], [`${name} scales`, r.bytes.scales]);
  }
  for (const [buffer, bytes] of buffers) {
    if (bytes > limit) {
      throw new ExpertRuntimeError(
        'BATCH_TOO_LARGE',
        { buffer, bytes, limit, limitName },
        `${nTokens} tokens × ${nUsed} experts need a ${buffer} buffer of ${bytes} bytes, over ${limitName} = ${limit}; send fewer tokens per call`,
      );
    }
  }
  // Each part dispatches only when some pair routes to its experts; batched, over its own tiles.
  const tiles = groups ? tilesPerExpert(counts, tileRows) : null;
  const planned: PlannedPart[] = [];
  // Decode rows per workgroup: the int8 kernels (a packed rounding before them) have their own.
  const upRows = rounding.gate?.packed ? int8RowsPerWorkgroup(workgroupSize) : rowsPerWorkgroup;
  const downRows = rounding.down?.packed ? int8RowsPerWorkgroup(workgroupSize) : rowsPerWorkgroup;
  parts.forEach((range, index) => {
    const dispatch = partDispatch(range, counts, tiles);
    if (!dispatch) return;
    planned.push({
      index,
      dispatch,
      up: fold(groups ? batchedWorkgroups(dispatch.nRowTiles, ff, tileCols) : rowKernelWorkgroups(nPairs, ff, upRows)),
      down: fold(groups ? batchedWorkgroups(dispatch.nRowTiles, nEmbd, tileCols) : rowKernelWorkgroups(nPairs, nEmbd, downRows)),
    });
  });
  const combine = fold(combineWorkgroups(nTokens, nEmbd, workgroupSize));
  const align = limits.uniformAlignment;
  const whole: PartDispatch = { expertBegin: 0, expertEnd: shape.nExpert, tileBegin: 0, nRowTiles: 0 };
  return {
    regime: call.regime,
    groups,
    sizes,
    parts: planned,
    combine,
    rounding,
    rounds,
    uniformStride: Math.ceil(SHAPE_UNIFORM_BYTES / align) * align,
    uniforms: [
      ...planned.map((p) => writeShapeUniform(shape, call, p.dispatch)),
      writeShapeUniform(shape, call, whole),
      ...rounds.map((r) => writeRoundParams(r.nRows, r.rowLen)),
    ],
  };
}
