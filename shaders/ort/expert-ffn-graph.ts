/**
 * The expert FFN of one slice as an ONNX graph of standard operators (opset 17), with the weights as dequantized
 * float32 initializers:
 *
 *   inputs  x [T, nEmbd]      the token rows
 *           p [T, nExpert]    dense router probs: probs[t,k] at column ids[t,k], 0 elsewhere
 *   output  y [T, nEmbd]
 *
 *   per expert e:  g_e = x · Gᵀ_e   u_e = x · Uᵀ_e                      (MatMul with pre-transposed initializers)
 *                  h_e = Sigmoid(g_e) ⊙ g_e ⊙ u_e                        (silu(g) ⊙ u)
 *                  y  += (h_e · Dᵀ_e) ⊙ p[:, e]                          (Gather of column e with indices [e] → [T, 1])
 *
 * One graph serves every routing of the slice, so every expert runs on every row and unrouted ones are multiplied
 * by 0: the work is nExpert/nUsed times what routing needs. Skipping unrouted experts (one session per expert, or
 * gathering only the routed rows per expert) is a later optimisation, as is keeping the weights quantized with
 * com.microsoft MatMulNBits (4-bit block-quantized weights) instead of float32 initializers.
 */
import {
  DataType,
  encodeModel,
  floatTensor,
  int64Tensor,
  node,
  valueInfo,
  type ModelOptions,
  type NodeSpec,
  type TensorSpec,
} from './onnx-builder.ts';

export interface DenseExpertSlice {
  nEmbd: number;
  ff: number;
  nExpert: number;
  /** nExpert row-major [ff × nEmbd] matrices, consecutive. */
  gate: Float32Array;
  up: Float32Array;
  /** nExpert row-major [nEmbd × ff] matrices, consecutive. */
  down: Float32Array;
}

export const EXPERT_FFN_INPUTS = { rows: 'x', probs: 'p' } as const;
export const EXPERT_FFN_OUTPUT = 'y';

/** The transpose of a row-major [rows × cols] matrix. */
export function transpose(m: Float32Array, rows: number, cols: number): Float32Array {
  if (m.length !== rows * cols) throw new RangeError(`transpose: ${m.length} values are not ${rows} × ${cols}`);
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    const o = r * cols;
    for (let c = 0; c < cols; c++) out[c * rows + r] = m[o + c]!;
  }
  return out;
}

/** The ModelProto bytes of the slice's expert FFN (see the module comment for inputs and outputs). */
export function buildExpertFfnModel(s: DenseExpertSlice, options: ModelOptions = {}): Uint8Array {
  const { nEmbd, ff, nExpert } = s;
  const per = nEmbd * ff;
  for (const m of ['gate', 'up', 'down'] as const) {
    if (s[m].length !== nExpert * per) {
      throw new RangeError(`buildExpertFfnModel: ${m} has ${s[m].length} values, expected ${nExpert} × ${ff} × ${nEmbd}`);
    }
  }
  const { rows: x, probs: p } = EXPERT_FFN_INPUTS;
  const nodes: NodeSpec[] = [];
  const initializers: TensorSpec[] = [];
  let acc = '';
  for (let e = 0; e < nExpert; e++) {
    const slice = (m: Float32Array): Float32Array => m.subarray(e * per, (e + 1) * per);
    const G = `gate_t.${e}`;
    const U = `up_t.${e}`;
    const D = `down_t.${e}`;
    const idx = `expert_index.${e}`;
    initializers.push(
      floatTensor(G, [nEmbd, ff], transpose(slice(s.gate), ff, nEmbd)),
      floatTensor(U, [nEmbd, ff], transpose(slice(s.up), ff, nEmbd)),
      floatTensor(D, [ff, nEmbd], transpose(slice(s.down), nEmbd, ff)),
      int64Tensor(idx, [1], [e]),
    );
    const v = (name: string): string => `e${e}.${name}`;
    const last = e === nExpert - 1;
    const sum = last ? EXPERT_FFN_OUTPUT : `acc.${e}`;
    const scaled = e === 0 ? sum : v('scaled');
    nodes.push(
      node('MatMul', [x, G], [v('g')], { name: v('gate') }),
      node('MatMul', [x, U], [v('u')], { name: v('up') }),
      node('Sigmoid', [v('g')], [v('sig')], { name: v('sigmoid') }),
      node('Mul', [v('sig'), v('g')], [v('silu')], { name: v('silu') }),
      node('Mul', [v('silu'), v('u')], [v('h')], { name: v('hidden') }),
      node('MatMul', [v('h'), D], [v('d')], { name: v('down') }),
      node('Gather', [p, idx], [v('prob')], { name: v('routing_column'), attributes: [{ name: 'axis', type: 'int', value: 1 }] }),
      node('Mul', [v('d'), v('prob')], [scaled], { name: v('scale') }),
    );
    if (e > 0) nodes.push(node('Add', [acc, scaled], [sum], { name: v('accumulate') }));
    acc = sum;
  }
  return encodeModel(
    {
      name: `expert_ffn_${nExpert}x${nEmbd}x${ff}`,
      nodes,
      initializers,
      inputs: [valueInfo(x, DataType.FLOAT, ['T', nEmbd]), valueInfo(p, DataType.FLOAT, ['T', nExpert])],
      outputs: [valueInfo(EXPERT_FFN_OUTPUT, DataType.FLOAT, ['T', nEmbd])],
    },
    options,
  );
}
