/**
 * How loud a generated model's routed-expert branch is: the RMS of the routed experts' output relative to the RMS of
 * the residual stream it is added to, at the prompt's first position, per MoE layer.
 *
 * Position 0 attends only to itself, so its attention output is Wo·(Wv·x) whatever the queries, keys, their norms and
 * RoPE (deepseek2's latent attention: Wo·concat over heads of Wv_b[h]·norm(the latent part of Wkv_a·x)); with every
 * norm weight 1 (make-model.ts) the residual stream at position 0 follows from the embedding, the
 * attention and FFN matrices (float64 here) and the routed-expert output, which is taken from what the dispatcher
 * returned for row 0 of each layer's prompt request. The dispatcher's row 0 (the coordinator's normed residual) checks
 * the walk: the cosine between it and ours is returned too. The model's last layer is left out: its prompt request
 * carries only the last position's row.
 */
import { openFileSource } from '../gguf/node-io.ts';
import { readGGUF } from '../gguf/reader.ts';
import type { GGUFTensorInfo } from '../gguf/types.ts';
import { dequantize } from '../gguf/dequantize.ts';
import type { ModelConfig } from '../tools/model-arch.ts';
import type { RequestRecord } from './test-dispatcher.ts';

export interface LayerLoudness {
  layer: number;
  /** RMS(routed-expert output) / RMS(residual stream entering the layer's FFN), at position 0. */
  ratio: number;
  /** Cosine between our normed residual and the coordinator's row 0 (≈ 1 when the walk is right). */
  rowCosine: number;
}

function rmsOf(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += (v[i] as number) ** 2;
  return Math.sqrt(s / v.length);
}

function rmsNorm(h: Float64Array): Float64Array {
  const r = Math.sqrt(h.reduce((s, x) => s + x * x, 0) / h.length + 1e-6);
  return h.map((x) => x / r);
}

/** y = W·x for a GGUF matrix W with dims [cols, rows] (row-major rows of `cols`). */
function matVec(w: Float32Array, rows: number, cols: number, x: Float64Array): Float64Array {
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let c = 0; c < cols; c++) s += (w[r * cols + c] as number) * (x[c] as number);
    y[r] = s;
  }
  return y;
}

const silu = (v: number): number => v / (1 + Math.exp(-v));
/** SwiGLU-OAI with build_moe_ffn's constants (α 1.702, limit 7): minimax-m3's dense and shared FFNs. */
const swigluOai = (g: number, u: number): number => {
  const x = Math.min(g, 7);
  return (x / (1 + Math.exp(-1.702 * x))) * (Math.min(Math.max(u, -7), 7) + 1);
};

/**
 * `firstToken`: the prompt's first token id; `promptRequests`: the dispatcher's log of the prompt evaluation, captured
 * (TestDispatcher.capture), one request per MoE layer in layer order.
 */
export async function expertLoudness(
  modelPath: string,
  config: ModelConfig,
  firstToken: number,
  promptRequests: readonly RequestRecord[],
): Promise<LayerLoudness[]> {
  const src = await openFileSource(modelPath);
  try {
    const file = await readGGUF(src);
    const matrix = async (name: string): Promise<{ w: Float32Array; rows: number; cols: number }> => {
      const t = file.tensors.find((x) => x.name === name) as GGUFTensorInfo | undefined;
      if (!t) throw new RangeError(`${name} missing`);
      const [cols, rows = 1] = t.dims as [number, number?];
      const w = dequantize(t.type, await src.read(file.dataOffset + t.offset, t.byteLength), cols * rows);
      return { w, rows, cols };
    };
    const apply = async (name: string, x: Float64Array): Promise<Float64Array> => {
      const m = await matrix(name);
      return matVec(m.w, m.rows, m.cols, x);
    };
    const unit = config.arch === 'minimax-m3' ? swigluOai : (g: number, u: number): number => silu(g) * u;
    const ffn = async (prefix: string, suffix: string, x: Float64Array): Promise<Float64Array> => {
      const g = await apply(`${prefix}.ffn_gate${suffix}.weight`, x);
      const u = await apply(`${prefix}.ffn_up${suffix}.weight`, x);
      return apply(
        `${prefix}.ffn_down${suffix}.weight`,
        g.map((v, i) => unit(v, u[i] as number)),
      );
    };

    const has = (name: string): boolean => file.tensors.some((t) => t.name === name);
    /** Position 0's attention output: its own value, through the output projection. */
    const attention = async (p: string, x: Float64Array): Promise<Float64Array> => {
      if (has(`${p}.attn_qkv.weight`)) {
        // Fused projection (bailingmoe2): queries, keys, then values.
        const qkv = await apply(`${p}.attn_qkv.weight`, x);
        const v = qkv.subarray(qkv.length - config.nEmbd);
        if ((qkv.length - config.nEmbd) / 2 !== config.nEmbd)
          throw new RangeError('residual probe: grouped-query attention is not walked (nHeadKv < nHead)');
        return apply(`${p}.attn_output.weight`, v);
      }
      if (!has(`${p}.attn_kv_a_mqa.weight`)) {
        const v = await apply(`${p}.attn_v.weight`, x);
        if (v.length !== config.nEmbd) throw new RangeError('residual probe: grouped-query attention is not walked (nHeadKv < nHead)');
        return apply(`${p}.attn_output.weight`, v);
      }
      const latent = rmsNorm((await apply(`${p}.attn_kv_a_mqa.weight`, x)).subarray(0, config.kvLoraRank));
      const vb = file.tensors.find((t) => t.name === `${p}.attn_v_b.weight`) as GGUFTensorInfo;
      const [cols, rows, heads] = vb.dims as [number, number, number];
      const w = dequantize(vb.type, await src.read(file.dataOffset + vb.offset, vb.byteLength), cols * rows * heads);
      const v = new Float64Array(rows * heads);
      for (let h = 0; h < heads; h++) v.set(matVec(w.subarray(h * rows * cols, (h + 1) * rows * cols), rows, cols, latent), h * rows);
      return apply(`${p}.attn_output.weight`, v);
    };

    const embd = await matrix('token_embd.weight');
    let h = Float64Array.from(embd.w.subarray(firstToken * embd.cols, (firstToken + 1) * embd.cols));
    const out: LayerLoudness[] = [];
    for (let i = 0; i < config.layers - 1; i++) {
      const p = `blk.${i}`;
      const attn = await attention(p, rmsNorm(h));
      h = h.map((x, k) => x + (attn[k] as number));
      const xf = rmsNorm(h);
      if (i < config.denseLeading) {
        const d = await ffn(p, '', xf);
        h = h.map((x, k) => x + (d[k] as number));
        continue;
      }
      const req = promptRequests.find((r) => r.layer === i);
      if (!req?.rows || !req.sums) {
        const seen = promptRequests.map((r) => `${r.layer}:${r.nTokens}${r.rows ? 'r' : ''}${r.sums ? 's' : ''}`).join(' ');
        throw new RangeError(`residual probe: no captured prompt request for layer ${i} (got ${seen})`);
      }
      const row = req.rows.subarray(0, config.nEmbd);
      const routed = req.sums.subarray(0, config.nEmbd);
      let dot = 0;
      for (let k = 0; k < config.nEmbd; k++) dot += (xf[k] as number) * (row[k] as number);
      const rowCosine = dot / (rmsOf(xf) * rmsOf(row) * config.nEmbd);
      out.push({ layer: i, ratio: rmsOf(routed) / rmsOf(h), rowCosine });
      let shared: Float64Array = new Float64Array(config.nEmbd);
      if (has(`${p}.ffn_gate_shexp.weight`)) {
        shared = await ffn(p, '_shexp', xf);
        if (has(`${p}.ffn_gate_inp_shexp.weight`)) {
          const gate = (await apply(`${p}.ffn_gate_inp_shexp.weight`, xf))[0] as number;
          shared = shared.map((x) => x / (1 + Math.exp(-gate)));
        }
      }
      h = h.map((x, k) => x + (routed[k] as number) + (shared[k] as number));
    }
    return out;
  } finally {
    await src.close();
  }
}
