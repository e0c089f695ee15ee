/**
 * Work over a list, a few at a time: `width` lanes each take the next item when their last one is done, so items
 * start in order and at most `width` are in flight.
 *
 *   await inLanes(slices, 2, (s) => shards.lookup(s));
 */
export async function inLanes<T>(items: readonly T[], width: number, f: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) await f(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, lane));
}
