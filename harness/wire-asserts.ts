/**
 * Assertions shared by the volunteer channel's unit tests (test/unit/volunteer-wire*.test.ts): a decoder or encoder
 * call must throw VolunteerWireError with exactly this close code, since the code is what the receiver closes with.
 */
import assert from 'node:assert/strict';
import { CLOSE_CODES, type CloseName, VolunteerWireError } from '../protocol/channel/index.ts';

/** Asserts `fn` throws VolunteerWireError `name` with its catalogue close code; `label` names the case on failure. */
export function throwsCode(fn: () => unknown, name: CloseName, label: string): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof VolunteerWireError, `${label}: threw ${String(e)}`);
    assert.equal(e.code, name, `${label}: ${e.message}`);
    assert.equal(e.closeCode, CLOSE_CODES[name].code);
    return true;
  });
}
