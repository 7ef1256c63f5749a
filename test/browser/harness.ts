import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  readonly logs: () => string;
  stop(): Promise<void>;
}

/**
 * startDaemon runs the built kproxy (dist/server/cli.js) with Node 24
 * (process.execPath: the machine's bare `node` may be older) in --dry-run, and
 * resolves once its metrics listener answers.
 */
export async function startDaemon(args: string[], opts: { timeoutMs?: number } = {}): Promise<RunningDaemon> {
  const port = await freePort();
  const healthz = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    ['dist/server/cli.js', '--dry-run', '--hostname-override', 'node-a', '--healthz-bind-address', `127.0.0.1:${healthz}`, '--metrics-bind-address', `127.0.0.1:${port}`, ...args],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const url = `http://127.0.0.1:${port}/`;
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`kproxy exited ${child.exitCode}:\n${out}`);
    try {
      if ((await fetch(`${url}healthz`)).ok && /kproxy is running/.test(out)) break;
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
    pid: child.pid!,
    logs: () => out,
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/** Browser is headless Debian Chromium with a fresh profile, removed on close. */
export interface Browser {
  readonly context: BrowserContext;
  close(): Promise<void>;
}

/** launchBrowser starts /usr/bin/chromium through playwright-core with a fresh --user-data-dir. */
export async function launchBrowser(): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'kpt-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1440, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic', '--no-first-run', '--disable-component-update', '--disable-sync'],
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
