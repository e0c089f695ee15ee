/**
 * A small byte-level BPE vocabulary (GPT-2 style) for generated models.
 *
 * llama.cpp's "gpt2" tokenizer model needs: every token as a string in the GPT-2 byte→unicode alphabet, a token type per
 * token, and the merges as "left right" strings whose concatenation is itself a token. We learn the merges from a short
 * built-in text so that common words become single tokens, which keeps prompts short in tests.
 */

export const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

export interface Vocabulary {
  tokens: string[];
  types: Int32Array;
  merges: string[];
  bosId: number;
  eosId: number;
  /** ids of the tokens whose bytes are not valid UTF-8 on their own (a generation test bans them). */
  nonUtf8Ids: number[];
  /** Token id → the raw bytes it stands for (specials map to their text). */
  bytesOf(id: number): Uint8Array;
}

/** GPT-2's reversible map from bytes to printable code points. */
export function byteToUnicodeTable(): string[] {
  const table: string[] = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    table[b] = String.fromCodePoint(printable ? b : next++);
  }
  return table;
}

const CORPUS = `
The swarm serves a model that is too large for one machine. Each layer routes every token to a few experts,
and the experts that are not needed at this moment rest on the computers of people who volunteered them.
A volunteer opens a page in the browser and the page computes the experts of one layer with the graphics card.
When the coordinator has more requests than it can serve, it sends the work of the routed experts to the volunteers,
and what they do not return in time is computed at home, so no expert is ever dropped and every answer is the same.
The hub watches the load, raises the demand for experts while the model is busy, and lets the volunteers go when it is quiet.
hello world, this is a test of the tokenizer; numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 and the end.
`;

/** Splits text into words the way the merges are learned: a leading space stays with the word that follows it. */
function preTokenize(text: string): string[] {
  return text.match(/ ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+/g) ?? [];
}

/**
 * Builds the vocabulary: 256 byte tokens, `nMerges` learned merges, then the special tokens.
 * Deterministic: pair-frequency ties are broken by the pair's text.
 */
export function buildVocabulary(nMerges = 240): Vocabulary {
  const b2u = byteToUnicodeTable();
  const encoder = new TextEncoder();
  const tokens: string[] = [...b2u];
  const tokenBytes: Uint8Array[] = b2u.map((_, b) => Uint8Array.of(b));
  const known = new Map<string, number>(tokens.map((t, i) => [t, i]));
  const merges: string[] = [];

  // Each word as a list of symbols (unicode-mapped), with its count.
  const wordCounts = new Map<string, number>();
  for (const w of preTokenize(CORPUS)) wordCounts.set(w, (wordCounts.get(w) ?? 0) + 1);
  const words = [...wordCounts.entries()].map(([w, count]) => ({
    symbols: [...encoder.encode(w)].map((b) => b2u[b] as string),
    count,
  }));

  for (let m = 0; m < nMerges; m++) {
    const pairCounts = new Map<string, number>();
    for (const { symbols, count } of words) {
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = `${symbols[i]} ${symbols[i + 1]}`;
        pairCounts.set(key, (pairCounts.get(key) ?? 0) + count);
      }
    }
    let best: string | undefined;
    let bestCount = 1; // a pair seen once is not worth a token
    for (const [key, count] of pairCounts) {
      if (count > bestCount || (count === bestCount && best !== undefined && key < best)) {
        best = key;
        bestCount = count;
      }
    }
    if (best === undefined) break;
    const space = best.indexOf(' ', 1);
    const left = best.slice(0, space);
    const right = best.slice(space + 1);
    const merged = left + right;
    merges.push(best);
    if (!known.has(merged)) {
      known.set(merged, tokens.length);
      const lb = tokenBytes[known.get(left) as number] as Uint8Array;
      const rb = tokenBytes[known.get(right) as number] as Uint8Array;
      const bytes = new Uint8Array(lb.length + rb.length);
      bytes.set(lb);
      bytes.set(rb, lb.length);
      tokens.push(merged);
      tokenBytes.push(bytes);
    }
    for (const word of words) {
      const s = word.symbols;
      const out: string[] = [];
      for (let i = 0; i < s.length; i++) {
        if (i + 1 < s.length && s[i] === left && s[i + 1] === right) {
          out.push(merged);
          i++;
        } else {
          out.push(s[i] as string);
        }
      }
      word.symbols = out;
    }
  }

  const specials = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];
  const firstSpecial = tokens.length;
  for (const s of specials) {
    tokens.push(s);
    tokenBytes.push(encoder.encode(s));
  }
  const types = new Int32Array(tokens.length).fill(TOKEN_TYPE.NORMAL);
  types.fill(TOKEN_TYPE.CONTROL, firstSpecial);

  const decoder = new TextDecoder('utf-8', { fatal: true });
  const nonUtf8Ids: number[] = [];
  tokenBytes.forEach((bytes, id) => {
    try {
      decoder.decode(bytes);
    } catch {
      nonUtf8Ids.push(id);
    }
  });

  return {
    tokens,
    types,
    merges,
    bosId: firstSpecial,
    eosId: firstSpecial,
    nonUtf8Ids,
    bytesOf: (id) => {
      const bytes = tokenBytes[id];
      if (!bytes) throw new RangeError(`token id ${id} out of range 0..${tokenBytes.length - 1}`);
      return bytes;
    },
  };
}

/** A ChatML template, so `/v1/chat/completions` works against generated models. */
export const CHATML_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
