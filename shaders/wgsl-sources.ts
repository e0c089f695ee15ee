/**
 * The WGSL files as strings. Node reads them relative to this module; a browser bundler replaces this one file with
 * `?raw` imports of the same paths (e.g. `import common from './wgsl/common.wgsl?raw'`), so nothing else changes.
 */
import { readFileSync } from 'node:fs';

const read = (path: string): string => readFileSync(new URL(`./wgsl/${path}`, import.meta.url), 'utf8');

/** Quant snippets by file stem (shaders/wgsl/quant/<stem>.wgsl). */
export type QuantSnippet =
  | 'f32'
  | 'f16'
  | 'bf16'
  | 'q8_0'
  | 'q4_0'
  | 'q4_k'
  | 'q5_k'
  | 'q6_k'
  | 'mxfp4'
  | 'iq4_nl'
  | 'q5_0'
  | 'q2_k'
  | 'q3_k'
  | 'q4_1'
  | 'q5_1'
  | 'iq4_xs'
  | 'iq2_xxs'
  | 'iq2_xs'
  | 'iq3_xxs'
  | 'iq1_s'
  | 'iq1_m';
/** Quant snippets that also have an integer block dot against 8-bit activations (shaders/wgsl/int8/<stem>.wgsl). */
export type Int8Quant =
  | 'q8_0'
  | 'q4_0'
  | 'q4_k'
  | 'q5_k'
  | 'q6_k'
  | 'mxfp4'
  | 'iq4_nl'
  | 'q5_0'
  | 'q3_k'
  | 'q2_k'
  | 'q4_1'
  | 'q5_1'
  | 'iq4_xs'
  | 'iq2_xxs'
  | 'iq2_xs'
  | 'iq3_xxs'
  | 'iq1_s'
  | 'iq1_m';
export type KernelName =
  | 'expert_up'
  | 'expert_down'
  | 'expert_combine'
  | 'expert_up_batched'
  | 'expert_down_batched'
  | 'expert_up_q8'
  | 'expert_down_q8';

export interface WgslSources {
  /** Shape uniform and pure helpers; part of every module. */
  readonly common: string;
  /** The expert FFN variant's overrides and helpers (gated unit, biases); part of every up and down kernel. */
  readonly variant: string;
  /** Readers of weight bytes; part of every module that reads quantized weights. */
  readonly weights: string;
  /** row_sum of the decode kernels, by feature variant. */
  readonly reduce: Readonly<{ base: string; subgroups: string }>;
  /** lane_sum of the int8 kernels (ggml's horizontal sum of its 8 float lanes), by feature variant. */
  readonly lanes: Readonly<{ base: string; subgroups: string }>;
  /** ggml's float steps bit for bit (fused multiply-add, division, swiglu); part of the int8 kernels. */
  readonly ggmlMath: string;
  /** Staged-tile types of the batched kernels, by variant. */
  readonly tile: Readonly<{ f32: string; f16: string }>;
  /** The check of the subgroup layout reduce_subgroups.wgsl needs (run once per device). */
  readonly subgroupProbe: string;
  readonly quant: Readonly<Record<QuantSnippet, string>>;
  /** llama numerics: the integer block dots (int8/<quant>.wgsl) and dot_i8 with or without dot4I8Packed. */
  readonly int8: Readonly<Record<Int8Quant, string>>;
  readonly dot: Readonly<{ packed: string; unpacked: string }>;
  /** ggml's activation rounding (a standalone module: shaders/round-activations.ts). */
  readonly roundActivations: string;
  readonly kernels: Readonly<Record<KernelName, string>>;
}

export const WGSL: WgslSources = {
  common: read('common.wgsl'),
  variant: read('ffn_variant.wgsl'),
  weights: read('weights.wgsl'),
  reduce: { base: read('reduce.wgsl'), subgroups: read('reduce_subgroups.wgsl') },
  lanes: { base: read('lanes.wgsl'), subgroups: read('lanes_subgroups.wgsl') },
  ggmlMath: read('ggml_math.wgsl'),
  tile: { f32: read('tile_f32.wgsl'), f16: read('tile_f16.wgsl') },
  subgroupProbe: read('subgroup_probe.wgsl'),
  quant: {
    f32: read('quant/f32.wgsl'),
    f16: read('quant/f16.wgsl'),
    bf16: read('quant/bf16.wgsl'),
    q8_0: read('quant/q8_0.wgsl'),
    q4_0: read('quant/q4_0.wgsl'),
    q4_k: read('quant/q4_k.wgsl'),
    q5_k: read('quant/q5_k.wgsl'),
    q6_k: read('quant/q6_k.wgsl'),
    mxfp4: read('quant/mxfp4.wgsl'),
    iq4_nl: read('quant/iq4_nl.wgsl'),
    q5_1: read('quant/q5_1.wgsl'),
    q4_1: read('quant/q4_1.wgsl'),
    q2_k: read('quant/q2_k.wgsl'),
    q3_k: read('quant/q3_k.wgsl'),
    q5_0: read('quant/q5_0.wgsl'),
    iq4_xs: read('quant/iq4_xs.wgsl'),
    iq2_xxs: read('quant/iq2_xxs.wgsl'),
    iq2_xs: read('quant/iq2_xs.wgsl'),
    iq3_xxs: read('quant/iq3_xxs.wgsl'),
    // the two IQ1 types read one grid (ggml's iq1s_grid)
    iq1_s: read('iq1s_grid.wgsl') + read('quant/iq1_s.wgsl'),
    iq1_m: read('iq1s_grid.wgsl') + read('quant/iq1_m.wgsl'),
  },
  int8: {
    q8_0: read('int8/q8_0.wgsl'),
    q4_0: read('int8/q4_0.wgsl'),
    q4_k: read('int8/q4_k.wgsl'),
    q5_k: read('int8/q5_k.wgsl'),
    q6_k: read('int8/q6_k.wgsl'),
    mxfp4: read('int8/mxfp4.wgsl'),
    iq4_nl: read('int8/iq4_nl.wgsl'),
    q5_1: read('int8/q5_1.wgsl'),
    q4_1: read('int8/q4_1.wgsl'),
    q2_k: read('int8/q2_k.wgsl'),
    q3_k: read('int8/q3_k.wgsl'),
    q5_0: read('int8/q5_0.wgsl'),
    iq4_xs: read('int8/iq4_xs.wgsl'),
    iq2_xxs: read('int8/iq2_xxs.wgsl'),
    iq2_xs: read('int8/iq2_xs.wgsl'),
    iq3_xxs: read('int8/iq3_xxs.wgsl'),
    iq1_s: read('int8/iq1_s.wgsl'),
    iq1_m: read('int8/iq1_m.wgsl'),
  },
  dot: { packed: read('int8/dot_packed.wgsl'), unpacked: read('int8/dot_unpacked.wgsl') },
  roundActivations: read('round_activations.wgsl'),
  kernels: {
    expert_up: read('expert_up.wgsl'),
    expert_down: read('expert_down.wgsl'),
    expert_combine: read('expert_combine.wgsl'),
    expert_up_batched: read('expert_up_batched.wgsl'),
    expert_down_batched: read('expert_down_batched.wgsl'),
    expert_up_q8: read('expert_up_q8.wgsl'),
    expert_down_q8: read('expert_down_q8.wgsl'),
  },
};
