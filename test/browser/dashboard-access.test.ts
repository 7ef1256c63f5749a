import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { selfSignedCert } from '../tls-cert.ts';
import { tiers } from '../tiers.ts';
import { freePort, launchBrowser, SCREENSHOTS, startDaemon, type Browser, type RunningDaemon } from './harness.ts';

/**
 * How the dashboard is reached, in headless Chromium against a real kproxy
 * (--dry-run on deploy/examples/): with auth off on loopback, the page's own
 * actions work while a page of another site cannot act; over HTTPS on a
 * listener of its own, the page signs in and streams over wss, and a refused
 * sign-in is counted on the Overview and in /metrics. Screenshots land in
 * test-results/screenshots/dashboard-access-*.png.
 */
describe.skipIf(!tiers().browser.ok)('dashboard access in the browser', () => {
  describe('auth off, on loopback', () => {
    let daemon: RunningDaemon;
    let browser: Browser;
    let page: Page;
    let other: Server;
    let otherUrl: string;
    const errors: string[] = [];

    beforeAll(async () => {
      daemon = await startDaemon(['--source', 'file:deploy/examples/']);
      browser = await launchBrowser();
      page = await browser.context.newPage();
      page.on('pageerror', (e) => errors.push(e.message));
      // Another site: "localhost" is a different site from "127.0.0.1" to the browser, and a different origin.
      const port = await freePort();
      other = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(forgingPage(daemon.url)));
      await new Promise<void>((r) => other.listen(port, '127.0.0.1', r));
      otherUrl = `http://localhost:${port}/`;
    });

    afterAll(async () => {
      await browser?.close();
      await daemon?.stop();
      await new Promise((r) => other?.close(r));
    });

    const paused = async () => ((await (await fetch(`${daemon.url}api/v1/status`)).json()) as { overview: { paused: boolean } }).overview.paused;
    const audited = (action: string) =>
      daemon
        .logs()
        .split('\n')
        .filter((l) => l.includes(`dashboard action action=${action} `)).length;

    it("acts from the dashboard's own page: its writes carry JSON and the browser marks them same-origin", async () => {
      const sent: { url: string; headers: Record<string, string> }[] = [];
      page.on('request', async (r) => {
        if (r.url().includes('/api/v1/actions/')) sent.push({ url: r.url(), headers: await r.allHeaders() });
      });
      await page.goto(daemon.url);
      await page.getByRole('note').getByText('Authentication is off').waitFor();
      await page.getByTestId('connection').getByText('Live').waitFor();
      await page.getByRole('link', { name: 'Actions' }).click();
      await page.getByTestId('pause').click();
      await expect.poll(() => page.getByTestId('action-result').first().textContent()).toContain('syncs paused');
      expect(await paused()).toBe(true);
      await page.getByTestId('resume').click();
      await expect.poll(() => page.getByTestId('action-result').first().textContent()).toContain('syncs resumed');
      await page.getByTestId('resync').click();
      await expect.poll(() => page.getByTestId('action-result').first().textContent()).toContain('full sync requested');
      await page.screenshot({ path: join(SCREENSHOTS, 'dashboard-access-auth-off-actions.png'), fullPage: true });
      expect(await paused()).toBe(false);
      expect(sent.map((s) => s.url.replace(daemon.url, ''))).toEqual(['api/v1/actions/pause', 'api/v1/actions/resume', 'api/v1/actions/resync']);
      for (const s of sent) {
        expect(s.headers['content-type'], s.url).toBe('application/json');
        expect(s.headers['sec-fetch-site'], s.url).toBe('same-origin');
      }
    });

    it('refuses what a page of another site sends it: a form, a no-cors text/plain POST, a JSON POST (its preflight is never granted)', async () => {
      const before = audited('pause');
      const forger = await browser.context.newPage();
      const pauseUrl = `${daemon.url}api/v1/actions/pause`;
      try {
        await forger.goto(otherUrl);
        // The page cannot read a no-cors answer; the browser's network log has its status.
        const noCorsAnswer = forger.waitForResponse((r) => r.url() === pauseUrl && r.request().method() === 'POST');
        const thrown = await forger.evaluate(async (url) => {
          await fetch(url, { method: 'POST', mode: 'no-cors', body: '' });
          try {
            await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
            return 'sent';
          } catch (err) {
            return String(err);
          }
        }, pauseUrl);
        const noCors = await noCorsAnswer;
        expect(noCors.status()).toBe(403);
        // (its body stays opaque even to the network log: the form below shows the reason)
        // A JSON POST needs a CORS preflight first, which kproxy never grants: the browser does not send it.
        expect(thrown).toMatch(/TypeError: Failed to fetch/);
        await Promise.all([forger.waitForURL(pauseUrl), forger.evaluate(() => (document.getElementById('forge') as HTMLFormElement).submit())]);
        const body = JSON.parse((await forger.textContent('body')) ?? '{}') as { error: { code: string; message: string } };
        expect(body.error.code).toBe('KPROXY_ERR_ORIGIN_REJECTED');
        expect(body.error.message).toMatch(/Sec-Fetch-Site: cross-site/);
      } finally {
        await forger.close();
      }
      expect(await paused()).toBe(false);
      expect(audited('pause')).toBe(before);
    });

    it('ran without script errors in the page', () => {
      expect(errors).toEqual([]);
    });
  });

  describe('HTTPS on a listener of its own, with a token', () => {
    const TOKEN = 'e2e-https-dashboard-token-0123456789abcdef';
    let dir: string;
    let daemon: RunningDaemon;
    let browser: Browser;
    let page: Page;
    const errors: string[] = [];
    const sockets: string[] = [];

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'kpt-dashboard-https-'));
      const cert = selfSignedCert(dir, 'dashboard');
      writeFileSync(join(dir, 'token'), `${TOKEN}\n`);
      daemon = await startDaemon(['--source', 'file:deploy/examples/', '--dashboard-token-file', join(dir, 'token')], { tls: cert });
      browser = await launchBrowser({ trustCert: cert.cert });
      page = await browser.context.newPage();
      page.on('pageerror', (e) => errors.push(e.message));
      page.on('websocket', (ws) => sockets.push(ws.url()));
    });

    afterAll(async () => {
      await browser?.close();
      await daemon?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('signs in over HTTPS, streams over wss, and shows the refused sign-in before it on the Overview and in /metrics', async () => {
      expect(daemon.url).toMatch(/^https:\/\/localhost:\d+\/$/);
      await page.goto(daemon.url);
      await page.getByTestId('login').waitFor();
      await page.getByLabel('Token').fill('a-wrong-token-that-is-long-enough-0000');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await expect.poll(() => page.getByRole('alert').textContent()).toContain('not the dashboard token');
      await page.getByLabel('Token').fill(TOKEN);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByTestId('connection').getByText('Live').waitFor();
      expect(sockets.length).toBeGreaterThan(0);
      expect(sockets.every((u) => u.startsWith(`wss://localhost:${daemon.port}/ws`))).toBe(true);
      await expect.poll(() => page.getByTestId('dashboard-refusals').textContent()).toBe('1 refused sign-in · 0 refused dashboard requests');
      await page.screenshot({ path: join(SCREENSHOTS, 'dashboard-access-https-overview.png'), fullPage: true });
      // The metrics stay on the plain-HTTP metrics listener, and count the same refusal.
      const metrics = await (await fetch(`${daemon.metricsUrl}metrics`)).text();
      expect(metrics).toContain('kproxy_dashboard_auth_failures_total{reason="invalid"} 1\n');
      expect(daemon.logs()).toMatch(/dashboard sign-in refused: the bearer token is not the dashboard token reason=invalid from=127\.0\.0\.1/);
      expect(daemon.logs()).not.toContain('a-wrong-token');
    });

    it('ran without script errors in the page', () => {
      expect(errors).toEqual([]);
    });
  });
});

/** forgingPage is another site's page aimed at the dashboard at target: a form that posts text/plain to the pause action. */
function forgingPage(target: string): string {
  return `<!doctype html><title>elsewhere</title>
<form id="forge" method="POST" action="${target}api/v1/actions/pause" enctype="text/plain"><input name="x" value="y"></form>`;
}
