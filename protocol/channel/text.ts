/**
 * Text hygiene shared by the channel's decoders and encoders: UTF-8 codecs, the control-character test, and
 * sentence(), which makes an arbitrary error message safe to send. Internal to protocol/channel/.
 */

/** Shared UTF-8 encoder (byte counts of text messages and close reasons). */
export const utf8 = new TextEncoder();
/** A decoder that throws on malformed UTF-8, so a bad message is refused rather than patched with U+FFFD. */
export const fatalUtf8 = new TextDecoder('utf-8', { fatal: true });

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what it refuses
export const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: and what sentence() replaces
const CONTROL_CHARS_ALL = /[\u0000-\u001f\u007f]+/g;

/**
 * A human sentence as encoders send it (an exception's message may hold newlines or run long): control characters
 * become spaces and it is cut to `maxChars`, so a client is never closed for the way an error was worded.
 */
export function sentence(text: string, maxChars: number): string {
  const clean = text.replace(CONTROL_CHARS_ALL, ' ');
  return clean.length <= maxChars ? clean : `${clean.slice(0, maxChars - 1)}…`;
}
