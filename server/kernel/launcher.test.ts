import { spawnSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { CommandTimeoutError } from '../errors.ts';
import type { ExecFn } from './exec.ts';
import { createLauncher } from './launcher.ts';

/** The launcher over a real /bin/sh: quoting, framing and process handling are sh's and the kernel's behaviour. */

const launchers: { close(): void }[] = [];
afterEach(() => {
  for (const l of launchers.splice(0)) l.close();
});

function launcher(opts: Parameters<typeof createLauncher>[0] = {}) {
  const l = createLauncher(opts);
  launchers.push(l);
  return l;
}

/** recording is a fallback that records what it was asked to run. */
function recording(): { calls: string[][]; exec: ExecFn } {
  const calls: string[][] = [];
  return { calls, exec: async (file, args) => (calls.push([file, ...args]), { code: 7, stdout: '', stderr: 'fallback' }) };
}

describe('createLauncher', () => {
  it('answers each command’s exit code and stderr, in order, from one shell', async () => {
    const run = launcher();
    const results = await Promise.all([run('/bin/sh', ['-c', 'echo out; echo "bad thing" >&2; exit 3']), run('/bin/true', []), run('/bin/sh', ['-c', 'printf "héllo\\nwörld" >&2; exit 1'])]);
    expect(results).toEqual([
      { code: 3, stderr: 'bad thing' },
      { code: 0, stderr: '' },
      { code: 1, stderr: 'héllo\nwörld' },
    ]);
  });

  it('passes every argument as one word, interpreting nothing in it', async () => {
    const run = launcher();
    const tricky = [`it's`, '$HOME', '`id`', '$(id)', 'a b', '"q"', '\\', ';', '*', ''];
    const r = await run('/bin/sh', ['-c', 'for a in "$@"; do printf "[%s]" "$a" >&2; done', 'sh', ...tricky]);
    expect(r.stderr).toBe(tricky.map((a) => `[${a}]`).join(''));
  });

  it('runs a command whose argument holds a newline directly (the line protocol cannot carry it)', async () => {
    const fb = recording();
    const run = launcher({ fallback: fb.exec });
    expect(await run('/bin/echo', ['a\nb'])).toMatchObject({ code: 7, stderr: 'fallback' });
    expect(fb.calls).toEqual([['/bin/echo', 'a\nb']]);
  });

  it('ends a command that outlives its timeout, with the shell, and runs the next one in a new shell', async () => {
    const run = launcher();
    const slow = run('/bin/sleep', ['30'], { timeoutMs: 200 });
    const after = run('/bin/sh', ['-c', 'exit 4']);
    await expect(slow).rejects.toBeInstanceOf(CommandTimeoutError);
    expect(await after).toEqual({ code: 4, stderr: '' });
    // The sleep went with the shell's process group.
    expect(spawnSync('pgrep', ['-f', '^/bin/sleep 30$']).status).toBe(1);
  });

  it('spawns commands directly when there is no shell', async () => {
    const fb = recording();
    const run = launcher({ shell: '/nonexistent/sh', fallback: fb.exec });
    const rs = await Promise.all([run('/bin/true', []), run('/bin/false', ['x'])]);
    expect(rs.map((r) => r.stderr)).toEqual(['fallback', 'fallback']);
    expect(fb.calls).toEqual([['/bin/true'], ['/bin/false', 'x']]);
  });

  it('does not keep a process alive when idle, and does while a command runs', () => {
    const script = `
      import { createLauncher } from ${JSON.stringify(new URL('./launcher.ts', import.meta.url).pathname)};
      const run = createLauncher();
      const r = await run('/bin/sh', ['-c', 'sleep 0.3; echo done >&2']);
      console.log(JSON.stringify(r));`;
    const t0 = Date.now();
    const out = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
    expect(out.stdout.trim()).toBe(JSON.stringify({ code: 0, stderr: 'done' }));
    // It exited by itself once the answer came (well before the spawnSync timeout).
    expect(out.status).toBe(0);
    expect(Date.now() - t0).toBeLessThan(15_000);
  });
});
