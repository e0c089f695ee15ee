/**
 * validateVariant (shaders/slice.ts) refuses what checkVariant (protocol/variant.ts) refuses, with the code every
 * backend uses for a variant it cannot compute (UNSUPPORTED_VARIANT) and checkVariant's sentence, before it looks at
 * the backend's features or the biases. Valid variants still pass, and biases are still checked against them.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  checkVariant,
  describeVariant,
  GPT_OSS_VARIANT,
  SILU_VARIANT,
  VARIANT_FEATURES,
  type ExpertActivation,
  type ExpertVariant,
} from '../../protocol/variant.ts';
import { ExpertRuntimeError } from '../../shaders/errors.ts';
import { validateVariant, validateVariantFeatures, type SliceBiases } from '../../shaders/slice.ts';

const SHAPE = { nEmbd: 8, ff: 4, nExpert: 2 };

function biases(): SliceBiases {
  return {
    gate: new Float32Array(SHAPE.nExpert * SHAPE.ff),
    up: new Float32Array(SHAPE.nExpert * SHAPE.ff),
    down: new Float32Array(SHAPE.nExpert * SHAPE.nEmbd),
  };
}

function refusal(code: string, message: RegExp) {
  return (e: unknown): boolean => {
    assert.ok(e instanceof ExpertRuntimeError, `not an ExpertRuntimeError: ${String(e)}`);
    assert.equal(e.code, code);
    assert.match(e.message, message);
    return true;
  };
}

describe('validateVariant checks the variant itself', () => {
  // Each still wrong however many activations protocol/variant.ts knows.
  const bad: [string, ExpertVariant][] = [
    ['swiglu_oai alpha 0', { ...GPT_OSS_VARIANT, alpha: 0 }],
    ['swiglu_oai alpha < 0', { ...GPT_OSS_VARIANT, alpha: -1.702 }],
    ['swiglu_oai alpha NaN', { ...GPT_OSS_VARIANT, alpha: Number.NaN }],
    ['swiglu_oai limit NaN', { ...GPT_OSS_VARIANT, limit: Number.NaN }],
    ['swiglu_oai limit ∞', { ...GPT_OSS_VARIANT, limit: Number.POSITIVE_INFINITY }],
    ['swiglu_oai limit 0', { ...GPT_OSS_VARIANT, limit: 0 }],
    ['silu with an alpha', { ...SILU_VARIANT, alpha: 1.702 }],
    ['an unknown activation', { ...GPT_OSS_VARIANT, activation: 'geglu' as ExpertActivation }],
  ];
  /** checkVariant's own sentence for `v` (the refusal carries it unchanged). */
  const checkMessage = (v: ExpertVariant): RegExp => {
    try {
      checkVariant(v);
    } catch (e) {
      assert.ok(e instanceof RangeError);
      return new RegExp(`^${e.message.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`);
    }
    return assert.fail(`checkVariant accepts ${JSON.stringify(v)}`);
  };
  for (const [what, variant] of bad) {
    it(`refuses ${what}: UNSUPPORTED_VARIANT with checkVariant's message`, () => {
      // Every feature listed and the biases the right size: only the variant's own numbers are wrong.
      assert.throws(
        () => validateVariant({ ...SHAPE, variant, biases: variant.biases ? biases() : undefined }, VARIANT_FEATURES),
        refusal('UNSUPPORTED_VARIANT', checkMessage(variant)),
      );
    });
  }

  it('names the variant and the features in the details', () => {
    const variant = { ...GPT_OSS_VARIANT, alpha: -1 };
    try {
      validateVariant({ ...SHAPE, variant, biases: biases() }, ['silu', 'swiglu_oai', 'bias']);
      assert.fail('accepted alpha -1');
    } catch (e) {
      assert.ok(e instanceof ExpertRuntimeError && e.code === 'UNSUPPORTED_VARIANT');
      assert.deepEqual(e.details, { variant: describeVariant(variant), supported: ['silu', 'swiglu_oai', 'bias'] });
    }
  });

  it('validateVariantFeatures (a stream header, before its biases) checks the variant the same way, biases aside', () => {
    validateVariantFeatures(GPT_OSS_VARIANT, VARIANT_FEATURES);
    for (const [, variant] of bad) {
      assert.throws(() => validateVariantFeatures(variant, VARIANT_FEATURES), refusal('UNSUPPORTED_VARIANT', checkMessage(variant)));
    }
    assert.throws(
      () => validateVariantFeatures(GPT_OSS_VARIANT, ['silu', 'swiglu_oai']),
      refusal('UNSUPPORTED_VARIANT', /does not compute/),
    );
  });

  it('accepts valid variants, and still checks features and biases after them', () => {
    validateVariant({ ...SHAPE, variant: GPT_OSS_VARIANT, biases: biases() }, VARIANT_FEATURES);
    validateVariant({ ...SHAPE, variant: { ...GPT_OSS_VARIANT, biases: false } }, ['swiglu_oai']);
    validateVariant({ ...SHAPE, variant: SILU_VARIANT }, ['silu']);
    validateVariant(SHAPE, ['silu']);
    assert.throws(
      () => validateVariant({ ...SHAPE, variant: GPT_OSS_VARIANT, biases: biases() }, ['silu']),
      refusal('UNSUPPORTED_VARIANT', /does not compute swiglu_oai/),
    );
    assert.throws(
      () => validateVariant({ ...SHAPE, variant: GPT_OSS_VARIANT }, VARIANT_FEATURES),
      refusal('BAD_SLICE_BIASES', /gate bias/),
    );
  });
});

it('per-expert scales: present exactly when the variant has them, one per expert and matrix', () => {
  const base = { nEmbd: 32, ff: 32, nExpert: 4 };
  const four = (): Float32Array => new Float32Array(4).fill(1.5);
  const scaled = { ...SILU_VARIANT, scales: true };
  validateVariant({ ...base, variant: scaled, scales: { gate: four(), up: four(), down: four() } }, ['silu', 'scale']);
  const refuse = (s: Parameters<typeof validateVariant>[0], which: RegExp): void =>
    assert.throws(
      () => validateVariant(s, ['silu', 'scale']),
      (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'BAD_SLICE_BIASES' && which.test(e.message),
    );
  refuse({ ...base, variant: scaled }, /^gate scale: .* needs 4 values, got 0/);
  refuse({ ...base, variant: scaled, scales: { gate: four(), up: new Float32Array(3), down: four() } }, /^up scale/);
  refuse({ ...base, variant: SILU_VARIANT, scales: { gate: four(), up: four(), down: four() } }, /without scales takes 0/);
  assert.throws(
    () => validateVariant({ ...base, variant: scaled, scales: { gate: four(), up: four(), down: four() } }, ['silu']),
    (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'UNSUPPORTED_VARIANT',
  );
});
