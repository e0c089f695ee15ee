// The wasm fallback's entry points (shaders/wasm/fallback.ts drives them): one slice's experts, routed pairs only.
// The slice's GGUF bytes sit in this module's memory as they are; each call decodes one weight row at a time into a
// small buffer and meets it with every routed row of that expert (so a row of weights is read once per call).
//
// Memory (JS lays it out): [static data][gate | up | down bytes][biases, if any][scales, if any][gelu table, if read]
// [3 row buffers][call scratch (callLayout)].
import { T_F32, ROW_INT, ROW_GGUF, DOT_Q32, DOT_Q80, DOT_MX4, DOT_NL4, DOT_Q40, DOT_Q50, DOT_Q41, DOT_Q51, DOT_Q4K, DOT_Q5K, DOT_Q6K, DOT_Q2K, DOT_Q3K, DOT_IQ4X, DOT_IQ2XXS, DOT_IQ2XS, DOT_IQ3XXS, DOT_IQ1SX, DOT_IQ1MX, DOT_IQ1M, RELAXED, rowKind, actKind, dotKind, blockSize, blockBytes, align16 } from './kinds';
import { actBytes, quantizeRow } from './activations';
import { intRow, dequantRow } from './weight-rows';
import { dot, intDots, iq1mDots, q4kDots, q80Dots, q4tDots, k45Dots, twoRowsQ4K, q6kDots, q2kDots, q3kDots, iq4xsDots, iqGridDots, qnDots, iq1sDots, iq1mxDots } from './dots';
import {
  ggmlSwiglu,
  exactSwiglu,
  ggmlSwigluOai,
  exactSwigluOai,
  ggmlSwigluClamp,
  exactSwigluClamp,
  ggmlSiluLimit,
  exactSiluLimit,
  ggmlGeglu,
  exactGeglu,
  probeFusedMadd,
  usesFusedMadd,
} from './ggml-float';

let nEmbd = 0;
let ff = 0;
let nExpert = 0;
let llama = false;
// per matrix: 0 gate, 1 up, 2 down
const typ = memory.data(12, 4);
const base = memory.data(12, 4);
const rowBytes = memory.data(12, 4);
const rowBuf = memory.data(12, 4);
/** Up to 4 activation records for intDots, and its results for gate and up. */
const ACTS = memory.data(16, 4);
const GOUT = memory.data(16, 4);
const UOUT = memory.data(16, 4);

// The expert FFN variant (protocol/variant.ts; configureVariant): the gated unit, where the biases and the scales are
// (0: none) and where ggml's f16 GELU table is (0: not read).
const ACT_SILU: i32 = 0;
const ACT_SWIGLU_OAI: i32 = 1;
const ACT_SWIGLU_CLAMP: i32 = 2;
const ACT_SILU_LIMIT: i32 = 3;
const ACT_GELU: i32 = 4;
let activation = ACT_SILU;
let alpha: f32 = 0;
let limit: f32 = 0;
let biasGate: usize = 0;
let biasUp: usize = 0;
let biasDown: usize = 0;
/** f32 [3 × nExpert]: gate's scales, up's, down's. */
let scales: usize = 0;
let geluTable: usize = 0;

@inline
function m32(at: usize, m: i32): i32 {
  return load<i32>(at + 4 * m);
}

/**
 * Computes ggml's fused multiply-adds with relaxed_madd where it fuses here and `allow` is not 0, else by the f64
 * emulation; returns 1 when relaxed_madd is used. Call before compute (the emulation until then).
 */
export function allowFusedMadd(allow: i32): i32 {
  probeFusedMadd(allow != 0);
  return usesFusedMadd() ? 1 : 0;
}

export function heapBase(): usize {
  return __heap_base;
}

/** Bytes of one row buffer: f32 values or i16 quants (at 0) and block parameters (after 4 bytes per element). */
export function rowBufferBytes(n: i32): usize {
  return align16(<usize>(4 * n)) + align16(<usize>(n / 4 + 64));
}

function rowBytesOf(t: i32, n: i32): i32 {
  return (n / blockSize(t)) * blockBytes(t);
}

/**
 * Sets the slice: shapes, the three types (ggml ids), numerics (1 = llama), where the three matrices' bytes are, and
 * where the three row buffers start (rowBufferBytes(max(nEmbd, ff)) each).
 */
export function configure(
  nEmbd_: i32,
  ff_: i32,
  nExpert_: i32,
  tGate: i32,
  tUp: i32,
  tDown: i32,
  llama_: i32,
  gate: usize,
  up: usize,
  down: usize,
  rowBuffers: usize,
): void {
  nEmbd = nEmbd_;
  ff = ff_;
  nExpert = nExpert_;
  llama = llama_ != 0;
  store<i32>(typ, tGate);
  store<i32>(typ, tUp, 4);
  store<i32>(typ, tDown, 8);
  store<i32>(base, <i32>gate);
  store<i32>(base, <i32>up, 4);
  store<i32>(base, <i32>down, 8);
  store<i32>(rowBytes, rowBytesOf(tGate, nEmbd));
  store<i32>(rowBytes, rowBytesOf(tUp, nEmbd), 4);
  store<i32>(rowBytes, rowBytesOf(tDown, ff), 8);
  const each = rowBufferBytes(max<i32>(nEmbd, ff));
  for (let m = 0; m < 3; m++) store<i32>(rowBuf + 4 * m, <i32>(rowBuffers + each * m));
}

/**
 * Sets the slice's variant, after configure: activation (0 silu, 1 swiglu_oai, 2 swiglu_clamp, 3 silu_limit, 4 gelu),
 * α and the limit L where it takes them; where its f32 biases are (gate and up [nExpert × ff], down [nExpert × nEmbd],
 * expert-major) and its f32 per-expert scales (gate's [nExpert], then up's, then down's), or 0s for a variant without;
 * and, for gelu in llama numerics, where ggml's f16 GELU table is (65,536 u16; else 0).
 */
export function configureVariant(
  activation_: i32,
  alpha_: f32,
  limit_: f32,
  gateBias: usize,
  upBias: usize,
  downBias: usize,
  scales_: usize,
  geluTable_: usize,
): void {
  activation = activation_;
  alpha = alpha_;
  limit = limit_;
  biasGate = gateBias;
  biasUp = upBias;
  biasDown = downBias;
  scales = scales_;
  geluTable = geluTable_;
  switch (activation) {
    case ACT_SWIGLU_OAI:
      gatedUnit = unitSwigluOai;
      break;
    case ACT_SWIGLU_CLAMP:
      gatedUnit = unitSwigluClamp;
      break;
    case ACT_SILU_LIMIT:
      gatedUnit = unitSiluLimit;
      break;
    case ACT_GELU:
      gatedUnit = unitGelu;
      break;
    default:
      gatedUnit = unitSilu;
  }
}

// The gated units of the second wave, one function each, called through the function table (configureVariant picks one
// per slice), so their code stays out of compute: inlined there, as binaryen inlines a function called once, a switch
// over all five made the silu loop of the relaxed build ~5% slower in V8 at 8 and 32 tokens (measured against the
// kernel before them; swiglu_oai and silu stay inline, as in the first wave, which cost nothing).
function unitSilu(g: f32, u: f32): f32 {
  return llama ? ggmlSwiglu(g, u) : exactSwiglu(g, u);
}
function unitSwigluOai(g: f32, u: f32): f32 {
  return llama ? ggmlSwigluOai(g, u, alpha, limit) : exactSwigluOai(g, u, alpha, limit);
}
function unitSwigluClamp(g: f32, u: f32): f32 {
  return llama ? ggmlSwigluClamp(g, u, limit) : exactSwigluClamp(g, u, limit);
}
function unitSiluLimit(g: f32, u: f32): f32 {
  return llama ? ggmlSiluLimit(g, u, limit) : exactSiluLimit(g, u, limit);
}
function unitGelu(g: f32, u: f32): f32 {
  return llama ? ggmlGeglu(g, u, geluTable) : exactGeglu(g, u);
}
let gatedUnit: (g: f32, u: f32) => f32 = unitSilu;

/**
 * h of one pair's row r of expert e for a variant other than plain silu: gate and up times the expert's scales (f32,
 * ggml_mul), then its biases added in f32 (ggml_add_id), then the gated unit (ggml_swiglu_oai and ggml_swiglu here, the
 * others through gatedUnit). Apart from compute's loop so silu's stays as it was.
 */
function variantUnit(g: f32, u: f32, e: i32, r: i32): f32 {
  if (scales != 0) {
    g *= load<f32>(scales + 4 * <usize>e);
    u *= load<f32>(scales + 4 * <usize>(nExpert + e));
  }
  if (biasGate != 0) {
    const at = 4 * (<usize>e * <usize>ff + <usize>r);
    g += load<f32>(biasGate + at);
    u += load<f32>(biasUp + at);
  }
  if (activation == ACT_SWIGLU_OAI) return llama ? ggmlSwigluOai(g, u, alpha, limit) : exactSwigluOai(g, u, alpha, limit);
  if (activation == ACT_SILU) return llama ? ggmlSwiglu(g, u) : exactSwiglu(g, u);
  return gatedUnit(g, u);
}

// Call scratch, in order: rows f32 [T × nEmbd], ids i32 [P], probs f32 [P], out f32 [T × nEmbd] (these four JS
// writes and reads), then order i32 [P], starts i32 [nExpert + 1], xg, xu activation records [T], h f32 [P × ff],
// hq records [P], y f32 [P × nEmbd].
const L_ROWS = 0;
const L_IDS = 1;
const L_PROBS = 2;
const L_OUT = 3;
const L_ORDER = 4;
const L_STARTS = 5;
const L_XG = 6;
const L_XU = 7;
const L_H = 8;
const L_HQ = 9;
const L_Y = 10;
const L_END = 11;

/** Offset of part `what` (L_*) of the call scratch for T tokens of K pairs; L_END (11) is its size. */
export function callLayout(T: i32, K: i32, what: i32): usize {
  const P = <usize>(T * K);
  const ag = actKind(m32(typ, 0), llama);
  const au = actKind(m32(typ, 1), llama);
  // (no arrays: the stub runtime would allocate them over the slice, which starts at __heap_base)
  let o: usize = 0;
  for (let i = 0; i < what; i++) {
    switch (i) {
      case L_ROWS:
      case L_OUT:
        o += align16(<usize>(4 * T * nEmbd));
        break;
      case L_IDS:
      case L_PROBS:
      case L_ORDER:
        o += align16(4 * P);
        break;
      case L_STARTS:
        o += align16(<usize>(4 * (nExpert + 1)));
        break;
      case L_XG:
        o += <usize>T * actBytes(ag, nEmbd);
        break;
      case L_XU:
        o += au == ag ? 0 : <usize>T * actBytes(au, nEmbd);
        break;
      case L_H:
        o += align16(P * 4 * <usize>ff);
        break;
      case L_HQ:
        o += P * actBytes(actKind(m32(typ, 2), llama), ff);
        break;
      default:
        o += align16(P * 4 * <usize>nEmbd);
    }
  }
  return o;
}

/** Decodes row r of expert e of matrix m into its row buffer; returns where the values are (F32 rows: in place). */
@inline
function decodeRow(m: i32, e: i32, r: i32, rowsPerExpert: i32, n: i32): usize {
  const t = m32(typ, m);
  const src = <usize>m32(base, m) + <usize>(e * rowsPerExpert + r) * <usize>m32(rowBytes, m);
  const buf = <usize>m32(rowBuf, m);
  const kind = rowKind(t, llama);
  if (kind == ROW_GGUF) return src; // its dot reads the GGUF bytes itself
  if (kind == ROW_INT) intRow(t, src, n, buf, buf + align16(<usize>(4 * n)));
  else if (t == T_F32) return src;
  else dequantRow(t, src, n, buf);
  return buf;
}

/** Where touchRow's loads go (a sink, so no compiler drops them). */
const TOUCHED = memory.data(4, 4);
/** Whether touchRow loads at all (setTouchAhead): it helps on some CPUs and costs on others, so it is measured. */
let touchAhead = true;

/** Turns the touch-ahead on (1) or off (0); the bits of every result are the same either way. */
export function setTouchAhead(on: i32): void {
  touchAhead = on != 0;
}

/**
 * Loads one word of each 64-byte line of row r of expert e of matrix m (if the expert has that row): called with the
 * row after the one about to be computed, so that row is on its way from memory meanwhile. Wasm has no prefetch
 * instruction, and on the Intel Xeon it was tuned on the hardware prefetchers alone left the kernel stalled on its
 * weight loads (they stop at 4 KiB pages and start again slowly); with this the 1-row call took ~0.75× the time and
 * the 4-row ~0.65× (docs/kernels.md). On an AMD EPYC the same loads made it ~1.3× slower (its prefetchers stream the
 * rows better than loads that must retire in order): hence touchAhead, which the JS side measures.
 */
@inline
function touchRow(m: i32, e: i32, r: i32, rowsPerExpert: i32): void {
  if (!touchAhead || r >= rowsPerExpert) return;
  const bytes = <usize>m32(rowBytes, m);
  const src = <usize>m32(base, m) + <usize>(e * rowsPerExpert + r) * bytes;
  let sink = load<u32>(TOUCHED);
  for (let off: usize = 0; off < bytes; off += 64) sink ^= load<u32>(src + off);
  store<u32>(TOUCHED, sink);
}

/**
 * One decoded row against the records of `count` pairs (pair indices at `pairs`; record index = pair / per): the
 * integer kinds four at a time, the float kinds one by one. Results (f32) to out.
 */
@inline
function gateUp(kind: i32, w: usize, wp: usize, recs: usize, recBytes: usize, pairs: usize, count: i32, per: i32, out: usize): void {
  const n = per == 1 ? ff : nEmbd;
  if (kind >= DOT_Q32) {
    for (let j = 0; j < count; j++) store<usize>(ACTS + 4 * j, recs + recBytes * <usize>(load<i32>(pairs + 4 * j) / per));
    if (RELAXED && (kind == DOT_Q4K || kind == DOT_Q5K)) k45Dots(kind == DOT_Q5K, w, ACTS, count, n, out);
    else if (RELAXED && kind == DOT_Q6K) q6kDots(w, ACTS, count, n, out);
    else if (RELAXED && kind == DOT_Q2K) q2kDots(w, ACTS, count, n, out);
    else if (RELAXED && kind == DOT_Q3K) q3kDots(w, ACTS, count, n, out);
    else if (RELAXED && kind == DOT_IQ4X) iq4xsDots(w, ACTS, count, n, out);
    else if (RELAXED && (kind == DOT_IQ2XXS || kind == DOT_IQ2XS || kind == DOT_IQ3XXS)) iqGridDots(kind, w, ACTS, count, n, out);
    else if (RELAXED && kind == DOT_IQ1SX) iq1sDots(w, ACTS, count, n, out);
    else if (RELAXED && kind == DOT_IQ1MX) iq1mxDots(w, ACTS, count, n, out);
    else if (kind == DOT_Q4K) q4kDots(w, ACTS, count, n, out);
    else if (kind == DOT_IQ1M) iq1mDots(w, wp, ACTS, count, n, out);
    else if (RELAXED && kind == DOT_Q80) q80Dots(w, ACTS, count, n, out);
    else if (RELAXED && (kind == DOT_MX4 || kind == DOT_NL4 || kind == DOT_Q40)) q4tDots(kind, w, ACTS, count, n, out);
    else if (RELAXED && (kind == DOT_Q50 || kind == DOT_Q41 || kind == DOT_Q51)) qnDots(kind, w, ACTS, count, n, out);
    else intDots(kind, w, wp, ACTS, count, n, out);
    return;
  }
  for (let j = 0; j < count; j++) store<f32>(out + 4 * j, dot(kind, w, wp, recs + recBytes * <usize>(load<i32>(pairs + 4 * j) / per), n));
}

/**
 * out[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t]) for T tokens of K pairs, with the call scratch at `s`
 * (callLayout). Pairs with prob 0 are neither computed nor added. The sums go in k order as ggml adds them.
 */
export function compute(T: i32, K: i32, s: usize): void {
  const P = T * K;
  const rows = s + callLayout(T, K, L_ROWS);
  const ids = s + callLayout(T, K, L_IDS);
  const probs = s + callLayout(T, K, L_PROBS);
  const out = s + callLayout(T, K, L_OUT);
  const order = s + callLayout(T, K, L_ORDER);
  const starts = s + callLayout(T, K, L_STARTS);
  const xg = s + callLayout(T, K, L_XG);
  const xuOwn = s + callLayout(T, K, L_XU);
  const h = s + callLayout(T, K, L_H);
  const hq = s + callLayout(T, K, L_HQ);
  const y = s + callLayout(T, K, L_Y);
  const tG = m32(typ, 0);
  const tU = m32(typ, 1);
  const tD = m32(typ, 2);
  const ag = actKind(tG, llama);
  const au = actKind(tU, llama);
  const ad = actKind(tD, llama);
  const xu = au == ag ? xg : xuOwn;
  const bg = actBytes(ag, nEmbd);
  const bu = actBytes(au, nEmbd);
  const bd = actBytes(ad, ff);
  const dg = dotKind(tG, llama);
  const du = dotKind(tU, llama);
  const dd = dotKind(tD, llama);
  const pg = align16(<usize>(4 * nEmbd));
  const pd = align16(<usize>(4 * ff));
  const plainSilu = activation == ACT_SILU && biasGate == 0 && scales == 0;

  // Routed pairs grouped by expert, in token order within each expert.
  memory.fill(starts, 0, 4 * (nExpert + 1));
  for (let q = 0; q < P; q++) {
    if (load<f32>(probs + 4 * q) == 0) continue;
    const e = load<i32>(ids + 4 * q);
    store<i32>(starts + 4 * (e + 1), load<i32>(starts + 4 * (e + 1)) + 1);
  }
  for (let e = 0; e < nExpert; e++) store<i32>(starts + 4 * (e + 1), load<i32>(starts + 4 * (e + 1)) + load<i32>(starts + 4 * e));
  // fill: order positions advance per expert (cursor = starts[e] moved, restored after)
  for (let q = 0; q < P; q++) {
    if (load<f32>(probs + 4 * q) == 0) continue;
    const e = load<i32>(ids + 4 * q);
    const at = load<i32>(starts + 4 * e);
    store<i32>(order + 4 * at, q);
    store<i32>(starts + 4 * e, at + 1);
  }
  for (let e = nExpert; e > 0; e--) store<i32>(starts + 4 * e, load<i32>(starts + 4 * (e - 1)));
  store<i32>(starts, 0);

  for (let t = 0; t < T; t++) {
    quantizeRow(ag, rows + 4 * t * nEmbd, nEmbd, xg + bg * t);
    if (au != ag) quantizeRow(au, rows + 4 * t * nEmbd, nEmbd, xu + bu * t);
  }

  // gate and up, then h = swiglu
  for (let e = 0; e < nExpert; e++) {
    const q0 = load<i32>(starts + 4 * e);
    const q1 = load<i32>(starts + 4 * (e + 1));
    if (q0 == q1) continue;
    if (RELAXED && q1 - q0 == 1 && dg == DOT_Q4K && du == DOT_Q4K) {
      // one token (decode), both Q4_K: gate's and up's rows in one pass (one activation record), read in place
      const q = load<i32>(order + 4 * q0);
      const a = xg + bg * <usize>(q / K);
      const bytesG = <usize>m32(rowBytes, 0);
      const bytesU = <usize>m32(rowBytes, 1);
      let wg = <usize>m32(base, 0) + <usize>(e * ff) * bytesG;
      let wu = <usize>m32(base, 1) + <usize>(e * ff) * bytesU;
      const hq = h + 4 * <usize>q * <usize>ff;
      for (let r = 0; r < ff; r++) {
        touchRow(0, e, r + 1, ff);
        touchRow(1, e, r + 1, ff);
        twoRowsQ4K(wg, wu, a, nEmbd, GOUT, UOUT);
        const g = load<f32>(GOUT);
        const u = load<f32>(UOUT);
        store<f32>(hq + 4 * r, plainSilu ? ggmlSwiglu(g, u) : variantUnit(g, u, e, r));
        wg += bytesG;
        wu += bytesU;
      }
      continue;
    }
    for (let r = 0; r < ff; r++) {
      touchRow(0, e, r + 1, ff);
      touchRow(1, e, r + 1, ff);
      const wg = decodeRow(0, e, r, ff, nEmbd);
      const wu = decodeRow(1, e, r, ff, nEmbd);
      for (let i = q0; i < q1; i += 4) {
        const count = min<i32>(4, q1 - i);
        if (RELAXED && count == 1 && dg == DOT_Q4K && du == DOT_Q4K) {
          // one token (decode): gate's and up's rows in one pass (both Q4_K, so one activation record)
          twoRowsQ4K(wg, wu, xg + bg * <usize>(load<i32>(order + 4 * i) / K), nEmbd, GOUT, UOUT);
        } else {
          gateUp(dg, wg, wg + pg, xg, bg, order + 4 * i, count, K, GOUT);
          gateUp(du, wu, wu + pg, xu, bu, order + 4 * i, count, K, UOUT);
        }
        for (let j = 0; j < count; j++) {
          const q = load<i32>(order + 4 * (i + j));
          const g = load<f32>(GOUT + 4 * j);
          const u = load<f32>(UOUT + 4 * j);
          const hv = plainSilu ? (llama ? ggmlSwiglu(g, u) : exactSwiglu(g, u)) : variantUnit(g, u, e, r);
          store<f32>(h + 4 * (<usize>q * ff + r), hv);
        }
      }
    }
  }

  // h in down's vec-dot type, then down
  for (let i = 0; i < load<i32>(starts + 4 * nExpert); i++) {
    const q = load<i32>(order + 4 * i);
    quantizeRow(ad, h + 4 * <usize>q * ff, ff, hq + bd * q);
  }
  for (let e = 0; e < nExpert; e++) {
    const q0 = load<i32>(starts + 4 * e);
    const q1 = load<i32>(starts + 4 * (e + 1));
    if (q0 == q1) continue;
    if (RELAXED && q1 - q0 == 1 && dd == DOT_Q4K && (nEmbd & 1) == 0) {
      // one token (decode): two rows per pass
      const q = load<i32>(order + 4 * q0);
      const a = hq + bd * <usize>q;
      for (let r = 0; r < nEmbd; r += 2) {
        touchRow(2, e, r + 2, nEmbd);
        touchRow(2, e, r + 3, nEmbd);
        const w0 = decodeRow(2, e, r, nEmbd, ff);
        const yr = y + 4 * (<usize>q * nEmbd + r);
        twoRowsQ4K(w0, w0 + <usize>m32(rowBytes, 2), a, ff, yr, yr + 4);
      }
      continue;
    }
    for (let r = 0; r < nEmbd; r++) {
      touchRow(2, e, r + 1, nEmbd);
      const wd = decodeRow(2, e, r, nEmbd, ff);
      for (let i = q0; i < q1; i += 4) {
        const count = min<i32>(4, q1 - i);
        gateUp(dd, wd, wd + pd, hq, bd, order + 4 * i, count, 1, GOUT);
        for (let j = 0; j < count; j++) {
          const q = load<i32>(order + 4 * (i + j));
          store<f32>(y + 4 * (<usize>q * nEmbd + r), load<f32>(GOUT + 4 * j));
        }
      }
    }
  }

  // each pair's down scale, then its down bias, in f32 before its router weight (ggml_mul, ggml_add_id, then ggml_mul)
  if (scales != 0) {
    for (let e = 0; e < nExpert; e++) {
      const sd = load<f32>(scales + 4 * <usize>(2 * nExpert + e));
      for (let i = load<i32>(starts + 4 * e); i < load<i32>(starts + 4 * (e + 1)); i++) {
        const yq = y + 4 * <usize>load<i32>(order + 4 * i) * <usize>nEmbd;
        for (let r = 0; r < nEmbd; r++) store<f32>(yq + 4 * r, load<f32>(yq + 4 * r) * sd);
      }
    }
  }
  if (biasDown != 0) {
    for (let e = 0; e < nExpert; e++) {
      const bias = biasDown + 4 * <usize>e * <usize>nEmbd;
      for (let i = load<i32>(starts + 4 * e); i < load<i32>(starts + 4 * (e + 1)); i++) {
        const yq = y + 4 * <usize>load<i32>(order + 4 * i) * <usize>nEmbd;
        for (let r = 0; r < nEmbd; r++) store<f32>(yq + 4 * r, load<f32>(yq + 4 * r) + load<f32>(bias + 4 * r));
      }
    }
  }

  // Σ_k prob · y in k order (ggml_mul, then the adds of the experts' views)
  for (let t = 0; t < T; t++) {
    const o = out + 4 * <usize>t * nEmbd;
    memory.fill(o, 0, 4 * nEmbd);
    let first = true;
    for (let k = 0; k < K; k++) {
      const q = t * K + k;
      const p = load<f32>(probs + 4 * q);
      if (p == 0) continue;
      const yq = y + 4 * <usize>q * nEmbd;
      for (let i = 0; i < nEmbd; i++) {
        const w = load<f32>(yq + 4 * i) * p;
        store<f32>(o + 4 * i, first ? w : load<f32>(o + 4 * i) + w);
      }
      first = false;
    }
  }
}
