import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

describe('running a command when the process has no file descriptors left', () => {
  // The userspace mode holds two descriptors per relayed connection; at RLIMIT_NOFILE a spawn fails with
  // EMFILE before its pipes exist. That must be a failed command (counted, retried by the sync loop), not an
  // unheard 'error' event that ends the daemon — which it was, under 10,000 relayed connections.
  it('is a failed command (KPROXY_ERR_COMMAND_FAILED) naming EMFILE, the process lives on, and commands work again once descriptors are free', () => {
    const out = execFileSync(process.execPath, [join(import.meta.dirname, 'spawn-without-fds.child.ts')], { encoding: 'utf8', timeout: 60_000 });
    const r = JSON.parse(out) as Record<string, { ok: boolean; code?: string; message?: string }> & { held: number };
    expect(r.held).toBeGreaterThan(0);
    expect(r.exec).toEqual({ ok: false, code: 'KPROXY_ERR_COMMAND_FAILED', message: expect.stringMatching(/^running true failed: spawn true EMFILE/) });
    expect(r.stream).toEqual({ ok: false, code: 'KPROXY_ERR_COMMAND_FAILED', message: expect.stringMatching(/^running true failed: spawn true EMFILE/) });
    expect(r.after).toEqual({ ok: true });
  });
});
