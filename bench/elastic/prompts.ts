/**
 * bench:elastic's prompts (and bench:elastic:overlap's): distinct, ~100 tokens each (the generated vocabulary makes
 * most of these words one token), the i-th the same in every run.
 */
const WORDS = `the swarm serves a model that is too large for one machine each layer routes every token to a few experts and
the experts that are not needed at this moment rest on the computers of people who volunteered them a volunteer opens a
page in the browser and the page computes the experts of one layer with the graphics card when the coordinator has more
requests than it can serve it sends the work of the routed experts to the volunteers and what they do not return in time
is computed at home so no expert is ever dropped and every answer is the same`
  .split(/\s+/)
  .filter(Boolean);
const PROMPT_WORDS = 45;

/** Prompt i: 45 words of the text from word 7i on, after "Request i:". */
export function benchPrompt(i: number): string {
  const words = Array.from({ length: PROMPT_WORDS }, (_, k) => WORDS[(i * 7 + k) % WORDS.length] as string);
  return `Request ${i}: ${words.join(' ')}.`;
}

/** Prompts 0 … n − 1. */
export function benchPrompts(n: number): string[] {
  return Array.from({ length: n }, (_, i) => benchPrompt(i));
}
