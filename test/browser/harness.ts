import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash, createPublicKey } from 'node:crypto';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

/** ROOT is the repository (the daemon runs from dist/, the manifests from deploy/). */
export const ROOT = join(import.meta.dirname, '../..');
export const SCREENSHOTS = join(ROOT, 'test-results/screenshots');

/** freePort asks the kernel for a free loopback port (so parallel runs never collide). */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

export interface RunningDaemon {
  /** url: the dashboard (the metrics listener's, or https://localhost:PORT/ on a TLS listener of its own). */
  readonly url: string;
  readonly port: number;
  /** metricsUrl: the metrics listener (plain HTTP: /metrics, /healthz). */
  readonly metricsUrl: string;
  readonly pid: number;
  readonly logs: () => string;
  stop(): Promise<void>;
}

/** DashboardTls is a certificate pair for the dashboard's own HTTPS listener (--dashboard-bind-address). */
export interface DashboardTls {
  readonly certFile: string;
  readonly keyFile: string;
}

/**
 * startDaemon runs the built kproxy (dist/server/cli.js) with Node 24
 * (process.execPath: the machine's bare `node` may be older) in --dry-run, and
 * resolves once its metrics listener answers. With tls the dashboard gets an
 * HTTPS listener of its own on loopback.
 */
export async function startDaemon(args: string[], opts: { timeoutMs?: number; tls?: DashboardTls } = {}): Promise<RunningDaemon> {
  const metricsPort = await freePort();
  const healthz = await freePort();
  const port = opts.tls ? await freePort() : metricsPort;
  const tlsArgs = opts.tls ? ['--dashboard-bind-address', `127.0.0.1:${port}`, '--dashboard-tls-cert-file', opts.tls.certFile, '--dashboard-tls-private-key-file', opts.tls.keyFile] : [];
  const child: ChildProcess = spawn(
    process.execPath,
    ['dist/server/cli.js', '--dry-run', '--hostname-override', 'node-a', '--healthz-bind-address', `127.0.0.1:${healthz}`, '--metrics-bind-address', `127.0.0.1:${metricsPort}`, ...tlsArgs, ...args],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const metricsUrl = `http://127.0.0.1:${metricsPort}/`;
  const url = opts.tls ? `https://localhost:${port}/` : metricsUrl;
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`kproxy exited ${child.exitCode}:\n${out}`);
    try {
      if ((await fetch(`${metricsUrl}healthz`)).ok && /kproxy is running/.test(out)) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`kproxy did not start in time:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    port,
    metricsUrl,
    pid: child.pid!,
    logs: () => out,
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/** spkiHash is the base64 SHA-256 of a certificate's public key, the form Chromium pins certificates by. */
function spkiHash(certPem: string): string {
  return createHash('sha256')
    .update(createPublicKey(certPem).export({ type: 'spki', format: 'der' }))
    .digest('base64');
}

/** Browser is headless Debian Chromium with a fresh profile, removed on close. */
export interface Browser {
  readonly context: BrowserContext;
  close(): Promise<void>;
}

/**
 * launchBrowser starts /usr/bin/chromium through playwright-core with a fresh
 * --user-data-dir. trustCert: a PEM certificate whose key Chromium accepts
 * (the test's self-signed dashboard certificate, pinned by its public key;
 * every other certificate error still fails).
 */
export async function launchBrowser(opts: { trustCert?: string; netns?: string } = {}): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'kpt-chromium-'));
  const pin = opts.trustCert ? [`--ignore-certificate-errors-spki-list=${spkiHash(opts.trustCert)}`] : [];
  // netns: Chromium runs inside a test's network namespace (to reach a daemon listening on that namespace's loopback).
  let executablePath = '/usr/bin/chromium';
  if (opts.netns) {
    executablePath = join(profile, 'chromium-in-netns');
    writeFileSync(executablePath, `#!/bin/sh\nexec ip netns exec ${opts.netns} /usr/bin/chromium "$@"\n`, { mode: 0o755 });
  }
  const context = await chromium.launchPersistentContext(join(profile, 'data'), {
    executablePath,
    headless: true,
    viewport: { width: 1440, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic', '--no-first-run', '--disable-component-update', '--disable-sync', ...pin],
  });
  mkdirSync(SCREENSHOTS, { recursive: true });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** DashboardSession is a kproxy with a token-protected dashboard and one browser page, torn down by close(). */
export interface DashboardSession {
  readonly daemon: RunningDaemon;
  readonly browser: Browser;
  readonly page: Page;
  /** dir: a private folder holding the token file (and whatever prepare put there). */
  readonly dir: string;
  /** errors: script errors the page raised. */
  readonly errors: string[];
  close(): Promise<void>;
}

/**
 * openDashboard writes the token into a private folder, lets prepare fill it,
 * starts kproxy with args(dir) and --dashboard-token-file, and opens a page in
 * a fresh browser that records its script errors. Whatever started is removed
 * again when a later step fails.
 */
export async function openDashboard(opts: { token: string; args: (dir: string) => string[]; prepare?: (dir: string) => void }): Promise<DashboardSession> {
  const dir = mkdtempSync(join(tmpdir(), 'kpt-dashboard-e2e-'));
  let daemon: RunningDaemon | null = null;
  let browser: Browser | null = null;
  const close = async () => {
    await browser?.close();
    await daemon?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    writeFileSync(join(dir, 'token'), `${opts.token}\n`);
    opts.prepare?.(dir);
    daemon = await startDaemon([...opts.args(dir), '--dashboard-token-file', join(dir, 'token')]);
    browser = await launchBrowser();
    const page = await browser.context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    return { daemon, browser, page, dir, errors, close };
  } catch (err) {
    await close();
    throw err;
  }
}
