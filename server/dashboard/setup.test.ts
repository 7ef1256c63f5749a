import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { DashboardAuth } from './auth/auth.ts';
import { checkDashboardBind, readDashboardToken } from './setup.ts';

const dir = mkdtempSync(join(tmpdir(), 'kpt-dash-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

const clock = new FakeClock();
const off = new DashboardAuth({ token: null, reviewer: null, nodeName: 'n', clock });
const token = new DashboardAuth({ token: 't', reviewer: null, nodeName: 'n', clock });

describe('dashboard start-up checks', () => {
  it('reads the token file without surrounding whitespace, and refuses an empty or multi-word one', async () => {
    expect(await readDashboardToken(file('ok', '  s3cret\n'))).toBe('s3cret');
    await expect(readDashboardToken(file('empty', '\n'))).rejects.toThrow(/--dashboard-token-file .*empty is empty/);
    await expect(readDashboardToken(file('two', 'a b'))).rejects.toThrow(/whitespace inside the token/);
    await expect(readDashboardToken(join(dir, 'missing'))).rejects.toThrow(/cannot read it/);
  });

  it('refuses a network-reachable dashboard without auth, and allows loopback or auth', () => {
    for (const addr of ['0.0.0.0:10249', ':10249', '10.0.0.5:10249', '[::]:10249']) {
      expect(() => checkDashboardBind(addr, off), addr).toThrow(expect.objectContaining({ code: 'KPROXY_ERR_INSECURE_BIND' }));
    }
    for (const addr of ['127.0.0.1:10249', '[::1]:10249', 'localhost:10249', '']) expect(() => checkDashboardBind(addr, off), addr).not.toThrow();
    expect(() => checkDashboardBind('0.0.0.0:10249', token)).not.toThrow();
  });
});

/** kproxy runs the CLI from source (Node 24 strips the types) and collects its exit code and stderr. */
function kproxy(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['server/cli.ts', ...args], { cwd: new URL('../..', import.meta.url).pathname, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.on('exit', (code) => resolve({ code, stderr }));
  });
}

describe('kproxy CLI with the dashboard', () => {
  const common = ['--dry-run', '--source', 'file:deploy/examples/', '--hostname-override', 'node-a', '--healthz-bind-address', '127.0.0.1:1'];

  it('exits 1 with a clear message when the metrics listener would expose the dashboard without auth', async () => {
    const { code, stderr } = await kproxy([...common, '--metrics-bind-address', '0.0.0.0:1']);
    expect(code).toBe(1);
    expect(stderr).toMatch(/cannot start: --metrics-bind-address 0\.0\.0\.0:1 is reachable from the network and the dashboard there has no auth: give it --dashboard-token-file FILE/);
    expect(stderr).toMatch(/code=KPROXY_ERR_INSECURE_BIND/);
  }, 30_000);

  it('exits 1 on an empty token file', async () => {
    const { code, stderr } = await kproxy([...common, '--metrics-bind-address', '0.0.0.0:1', '--dashboard-token-file', file('empty-cli', '')]);
    expect(code).toBe(1);
    expect(stderr).toMatch(/--dashboard-token-file .* is empty/);
  }, 30_000);
});
