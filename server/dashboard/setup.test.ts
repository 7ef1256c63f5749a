import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request as httpsRequest } from 'node:https';
import { createServer } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { afterAll, describe, expect, it } from 'vitest';
import { installPair, selfSignedCert } from '../../test/tls-cert.ts';
import { waitFor } from '../../test/wait.ts';
import { FakeClock } from '../clock-fake.ts';
import { DashboardAuth } from './auth/auth.ts';
import { ProxyHealth } from '../proxy/healthcheck/proxy-health.ts';
import { PROBE_REASONS, ProxyReadiness } from '../proxy/healthcheck/readiness.ts';
import { unknownNode } from '../proxy/node-info.ts';
import type { SyncRecord } from '../proxy/sync-loop.ts';
import { checkDashboardBind, checkDashboardBound, nodeHealth, readDashboardToken } from './setup.ts';

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
const TOKEN = 'k'.repeat(40);

describe('dashboard start-up checks', () => {
  it('reads the token file without surrounding whitespace, and refuses an empty, multi-word or short one', async () => {
    expect(await readDashboardToken(file('ok', `  ${TOKEN}\n`))).toBe(TOKEN);
    await expect(readDashboardToken(file('empty', '\n'))).rejects.toThrow(/--dashboard-token-file .*empty is empty/);
    await expect(readDashboardToken(file('two', 'a b'))).rejects.toThrow(/whitespace inside the token/);
    await expect(readDashboardToken(join(dir, 'missing'))).rejects.toThrow(/cannot read it/);
    await expect(readDashboardToken(file('short', 'x'.repeat(31)))).rejects.toThrow(/holds a token of 31 characters; it must have at least 32 \(make one with: head -c 32/);
    expect(await readDashboardToken(file('just', 'x'.repeat(32)))).toHaveLength(32);
  });

  it('refuses a network-reachable dashboard without auth or without TLS, and allows loopback', () => {
    const on = (address: string, tls: boolean, flag: '--metrics-bind-address' | '--dashboard-bind-address' = '--metrics-bind-address') => ({ address, tls, flag });
    for (const addr of ['0.0.0.0:10249', ':10249', '10.0.0.5:10249', '[::]:10249']) {
      expect(() => checkDashboardBind(on(addr, true), off), addr).toThrow(expect.objectContaining({ code: 'KPROXY_ERR_INSECURE_BIND' }));
      expect(() => checkDashboardBind(on(addr, false), token), addr).toThrow(expect.objectContaining({ code: 'KPROXY_ERR_INSECURE_BIND' }));
      expect(() => checkDashboardBind(on(addr, true), token), addr).not.toThrow();
    }
    for (const addr of ['127.0.0.1:10249', '[::1]:10249', 'localhost:10249', '']) expect(() => checkDashboardBind(on(addr, false), off), addr).not.toThrow();
    expect(() => checkDashboardBind(on('0.0.0.0:10249', false), off)).toThrow(
      '--metrics-bind-address 0.0.0.0:10249 is reachable from the network and the dashboard there has no auth and no TLS: give it --dashboard-token-file FILE ' +
        '(or run in a cluster, where callers are checked with TokenReview and SubjectAccessReview), and serve it over HTTPS with --dashboard-tls-cert-file and ' +
        '--dashboard-tls-private-key-file, or keep it on loopback with --dashboard-bind-address 127.0.0.1:PORT (the metrics stay where they are)',
    );
    expect(() => checkDashboardBind(on('10.0.0.5:10263', false, '--dashboard-bind-address'), token)).toThrow(
      '--dashboard-bind-address 10.0.0.5:10263 is reachable from the network and the dashboard there has no TLS: serve it over HTTPS with --dashboard-tls-cert-file and --dashboard-tls-private-key-file, or bind it to 127.0.0.1',
    );
  });

  it('judges a host name by the address it was bound to, never by its name: "foo.localhost" bound to a routable address is refused without auth', () => {
    const dash = (address: string, tls = false) => ({ address, tls, flag: '--dashboard-bind-address' as const });
    const at = (address: string, family: 'IPv4' | 'IPv6' = 'IPv4') => ({ address, family, port: 10263 });
    // Before listening a name says nothing: it passes to the check on the bound address.
    for (const name of ['foo.localhost:10263', 'localhost:10263', 'dash.example:10263']) expect(() => checkDashboardBind(dash(name), off), name).not.toThrow();
    // foo.localhost resolved (through /etc/hosts, say) to a routable address: refused, naming what it was bound to.
    expect(() => checkDashboardBound(dash('foo.localhost:10263'), off, [at('10.254.1.1')])).toThrow(
      '--dashboard-bind-address foo.localhost:10263 is bound to 10.254.1.1:10263, which is not loopback: it is reachable from the network and the dashboard there has no auth and no TLS: ' +
        'give it --dashboard-token-file FILE (or run in a cluster, where callers are checked with TokenReview and SubjectAccessReview), and serve it over HTTPS with --dashboard-tls-cert-file and ' +
        '--dashboard-tls-private-key-file, or bind it to 127.0.0.1',
    );
    expect(() => checkDashboardBound(dash('dash.example:10263'), off, [at('127.0.0.1'), at('fd00::7', 'IPv6')])).toThrow(/is bound to 127\.0\.0\.1:10263, \[fd00::7\]:10263, which is not loopback/);
    expect(() => checkDashboardBound(dash('dash.example:10263'), off, [])).toThrow(expect.objectContaining({ code: 'KPROXY_ERR_INSECURE_BIND' }));
    // With auth and TLS it may listen anywhere; on loopback it may listen without either.
    expect(() => checkDashboardBound(dash('foo.localhost:10263', true), token, [at('10.254.1.1')])).not.toThrow();
    expect(() => checkDashboardBound(dash('foo.localhost:10263'), off, [at('127.0.0.1')])).not.toThrow();
    expect(() => checkDashboardBound(dash('localhost:10263'), off, [at('127.0.0.1'), at('::1', 'IPv6')])).not.toThrow();
  });
});

describe("the Overview's health", () => {
  it('carries the detailed reason of a failed first sync, which /readyz on the open health port says only in fixed words', () => {
    const node = { ...unknownNode('node-a'), known: true };
    const health = new ProxyHealth({ clock, healthTimeoutMs: 60_000, node: () => node });
    const readiness = new ProxyReadiness({
      health,
      families: ['IPv4'],
      source: () => ({ kind: 'file', description: 'file:/m', synced: true, objects: 2, counters: {} }),
      node: () => node,
    });
    const error = { code: 'KPROXY_ERR_RESTORE_FAILED', message: 'iptables-restore: line 61 failed\n-A KUBE-SEP-X -m comment --comment shop/web:http -j DNAT --to-destination 10.244.0.5:8080' };
    readiness.observe({ seq: 1, family: 'IPv4', ok: false, finishedAt: 0, error } as SyncRecord);
    expect(nodeHealth(health, readiness)).toMatchObject({
      ready: false,
      readyReason: `the first sync failed and is retried: ${error.message} [KPROXY_ERR_RESTORE_FAILED]`,
    });
    expect(readiness.readiness().probeReason).toBe(PROBE_REASONS.firstSyncFailed);
  });
});

/** freePort asks the kernel for a free loopback port. */
async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as { port: number };
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** httpsGet asks over HTTPS, trusting ca, and says which certificate answered. */
function httpsGet(url: string, ca: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; fingerprint: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { ca, headers, agent: false }, (res) => {
      const fingerprint = (res.socket as TLSSocket).getPeerCertificate().fingerprint256;
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, fingerprint }));
    });
    req.on('error', reject);
    req.end();
  });
}

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
    expect(stderr).toMatch(/cannot start: --metrics-bind-address 0\.0\.0\.0:1 is reachable from the network and the dashboard there has no auth and no TLS: give it --dashboard-token-file FILE/);
    expect(stderr).toMatch(/code=KPROXY_ERR_INSECURE_BIND/);
  }, 30_000);

  it("in nftables mode starts with the dashboard on: its nftables view of the ip kube-proxy table, beside kube-proxy's routes", async () => {
    const port = await freePort();
    const child = spawn(process.execPath, ['server/cli.ts', ...common, '--proxy-mode', 'nftables', '--metrics-bind-address', `127.0.0.1:${port}`], {
      cwd: new URL('../..', import.meta.url).pathname,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    try {
      let mode = '';
      for (let i = 0; i < 300 && mode !== 'nftables' && child.exitCode === null; i++) {
        mode = await fetch(`http://127.0.0.1:${port}/proxyMode`).then(
          (r) => r.text(),
          () => '',
        );
        if (mode !== 'nftables') await new Promise((r) => setTimeout(r, 100));
      }
      expect(mode, stderr).toBe('nftables');
      expect(stderr).not.toMatch(/no view of the nftables mode/);
      expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(200);
      const status = await fetch(`http://127.0.0.1:${port}/api/v1/status`);
      expect(status.status).toBe(200);
      expect((await status.json()).overview).toMatchObject({ mode: 'nftables', kernel: { kind: 'nftables', simulated: true } });
      await waitFor(async () => ((await (await fetch(`http://127.0.0.1:${port}/api/v1/tables`)).json()) as { tables: { name: string }[] }).tables.some((t) => t.name === 'kube-proxy'), {
        what: `the kube-proxy table on the Rules page's API (${stderr})`,
        timeoutMs: 30_000,
      });
      expect(child.exitCode).toBeNull();
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  }, 60_000);

  it('exits 1 on an empty token file', async () => {
    const { code, stderr } = await kproxy([...common, '--metrics-bind-address', '0.0.0.0:1', '--dashboard-token-file', file('empty-cli', '')]);
    expect(code).toBe(1);
    expect(stderr).toMatch(/--dashboard-token-file .* is empty/);
  }, 30_000);

  it('exits 1 when the dashboard would serve a token in clear text off loopback', async () => {
    const { code, stderr } = await kproxy([...common, '--metrics-bind-address', '0.0.0.0:1', '--dashboard-token-file', file('token-cli', TOKEN)]);
    expect(code).toBe(1);
    expect(stderr).toMatch(/cannot start: --metrics-bind-address 0\.0\.0\.0:1 is reachable from the network and the dashboard there has no TLS: serve it over HTTPS/);
  }, 30_000);

  it('serves the dashboard over HTTPS on its own listener, keeps /metrics plain on its own, and takes a rotated certificate without a restart', async () => {
    const first = selfSignedCert(dir, 'cli-first');
    const second = selfSignedCert(dir, 'cli-second');
    const certFile = join(dir, 'cli.crt');
    const keyFile = join(dir, 'cli.key');
    installPair(first, certFile, keyFile);
    const [metrics, dashboard] = [await freePort(), await freePort()];
    const args = [...common, '--metrics-bind-address', `127.0.0.1:${metrics}`, '--dashboard-bind-address', `127.0.0.1:${dashboard}`];
    args.push('--dashboard-tls-cert-file', certFile, '--dashboard-tls-private-key-file', keyFile, '--dashboard-token-file', file('cli-token', TOKEN));
    const child = spawn(process.execPath, ['server/cli.ts', ...args], { cwd: new URL('../..', import.meta.url).pathname, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    try {
      const auth = { authorization: `Bearer ${TOKEN}` };
      const url = `https://localhost:${dashboard}/api/v1/whoami`;
      await waitFor(async () => (await httpsGet(url, first.cert, auth).catch(() => null))?.status === 200, { what: `the dashboard over HTTPS (${stderr})`, timeoutMs: 30_000 });
      const who = await httpsGet(url, first.cert, auth);
      expect(JSON.parse(who.body)).toEqual({ authMode: 'token', user: 'token', canAct: true });
      expect(who.fingerprint).toBe(first.fingerprint);
      expect(stderr).toMatch(/dashboard server listening address=127\.0\.0\.1:/);

      // kube-proxy's routes stay plain HTTP on the metrics listener; the dashboard is not there.
      expect((await fetch(`http://127.0.0.1:${metrics}/metrics`)).status).toBe(200);
      expect((await fetch(`http://127.0.0.1:${metrics}/api/v1/whoami`, { headers: auth })).status).toBe(404);
      // Plain HTTP to the dashboard's port gets no answer a browser would take.
      await expect(fetch(`http://127.0.0.1:${dashboard}/api/v1/whoami`, { headers: auth })).rejects.toThrow();

      installPair(second, certFile, keyFile);
      await waitFor(async () => (await httpsGet(url, second.cert, auth).catch(() => null))?.fingerprint === second.fingerprint, { what: 'the rotated certificate', timeoutMs: 30_000 });
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  }, 90_000);
});
