/** What the test dispatcher computes a layer with (the CPU reference, ggml-exact, WGSL): one contract, no circle. */

/** Computes one layer's routed-expert sums: out[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t]). */
export interface ExpertBackend {
  readonly name: string;
  layerSums(layer: number, rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array>;
  close?(): Promise<void> | void;
}
