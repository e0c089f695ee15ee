/**
 * A string-keyed map that keeps its entries in a doubly-linked list, so the oldest entry is found, and any entry is
 * moved to the newest end or removed, in O(1).
 *
 * Why not a plain Map: V8 leaves a hole for every deleted entry until the table is rehashed, and iteration starts from
 * the first slot, so "peek at the oldest entry" after many deletions is O(holes) — a FIFO or LRU built on Map iteration
 * degrades to tens of µs per operation at 100k entries.
 */

interface Node<V> {
  key: string;
  value: V;
  prev: Node<V> | null;
  next: Node<V> | null;
}

export class LinkedMap<V> {
  private readonly nodes = new Map<string, Node<V>>();
  private head: Node<V> | null = null; // oldest
  private tail: Node<V> | null = null; // newest

  get size(): number {
    return this.nodes.size;
  }

  get(key: string): V | undefined {
    return this.nodes.get(key)?.value;
  }

  has(key: string): boolean {
    return this.nodes.has(key);
  }

  /** Sets the value and makes the entry the newest. */
  set(key: string, value: V): void {
    let node = this.nodes.get(key);
    if (node === undefined) {
      node = { key, value, prev: null, next: null };
      this.nodes.set(key, node);
    } else {
      node.value = value;
      this.unlink(node);
    }
    this.append(node);
  }

  /** Makes an existing entry the newest; returns false if absent. */
  touch(key: string): boolean {
    const node = this.nodes.get(key);
    if (node === undefined) return false;
    if (node !== this.tail) {
      this.unlink(node);
      this.append(node);
    }
    return true;
  }

  delete(key: string): boolean {
    const node = this.nodes.get(key);
    if (node === undefined) return false;
    this.nodes.delete(key);
    this.unlink(node);
    return true;
  }

  /** The oldest (least recently set or touched) entry. */
  oldest(): { key: string; value: V } | undefined {
    const h = this.head;
    return h === null ? undefined : { key: h.key, value: h.value };
  }

  /** Removes and returns the oldest entry. */
  shift(): { key: string; value: V } | undefined {
    const h = this.head;
    if (h === null) return undefined;
    this.delete(h.key);
    return { key: h.key, value: h.value };
  }

  private append(node: Node<V>): void {
    node.prev = this.tail;
    node.next = null;
    if (this.tail === null) this.head = node;
    else this.tail.next = node;
    this.tail = node;
  }

  private unlink(node: Node<V>): void {
    if (node.prev === null) this.head = node.next;
    else node.prev.next = node.next;
    if (node.next === null) this.tail = node.prev;
    else node.next.prev = node.prev;
    node.prev = node.next = null;
  }
}
