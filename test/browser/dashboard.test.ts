import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { openDashboard, SCREENSHOTS, type Browser, type DashboardSession, type RunningDaemon } from './harness.ts';

/**
 * The dashboard in headless Chromium against a real kproxy process (--dry-run
 * on deploy/examples/, token auth): log in, find a Service, read where its
 * packets go, resync and watch the sync arrive, and be refused without the
 * token. Screenshots land in test-results/screenshots/.
 */
const TOKEN = 'e2e-dashboard-token-0123456789abcdef';

describe.skipIf(!tiers().browser.ok)('dashboard in the browser', () => {
  let session: DashboardSession;
  let daemon: RunningDaemon;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    session = await openDashboard({ token: TOKEN, args: () => ['--source', 'file:deploy/examples/'] });
    ({ daemon, browser, page } = session);
  });

  afterAll(async () => {
    await session?.close();
  });

  const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `dashboard-${name}.png`), fullPage: true });

  it('asks for the token, refuses a wrong one, and shows the overview after a good one', async () => {
    await page.goto(daemon.url);
    await page.getByTestId('login').waitFor();
    await page.getByLabel('Token').fill('not-the-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toContain('not the dashboard token');
    await shot('login-refused');

    await page.getByLabel('Token').fill(TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('connection').getByText('Live').waitFor();
    await page.getByText('Healthy').waitFor();
    expect(await page.locator('header').textContent()).toContain('node-a');
    // kproxy's own memory beside the cluster's size, as its /metrics reports it.
    expect(await page.getByTestId('memory').textContent()).toMatch(/^resident · heap \d+(\.\d)? MiB used of \d+(\.\d)? MiB$/);
    await shot('overview');
  });

  it('finds a service by search and shows its endpoints, chains and packet flow', async () => {
    await page.getByRole('link', { name: 'Services' }).click();
    await page.getByTestId('service-search').fill('frontend');
    await expect.poll(() => page.getByTestId('service-row').count()).toBe(1);
    await shot('services-search');
    await page.getByTestId('service-row').click();
    await page.getByRole('heading', { name: 'shop/frontend' }).waitFor();
    const endpoints = page.getByTestId('endpoints').locator('tbody tr');
    await expect.poll(() => endpoints.count()).toBe(5);
    expect(await endpoints.first().textContent()).toContain('10.244.0.11:8080');
    const chains = await page.getByTestId('chain').locator('.name').allTextContents();
    expect(chains[0]).toBe('KUBE-SERVICES');
    expect(chains.filter((c) => c.startsWith('KUBE-SVC-'))).toHaveLength(1);
    expect(chains.filter((c) => c.startsWith('KUBE-SEP-'))).toHaveLength(3);
    const flow = page.getByTestId('flow');
    expect(await flow.locator('g.node.entry').count()).toBe(1);
    expect(await flow.locator('g.node.endpoint').count()).toBe(3);
    expect(await flow.textContent()).toContain('33.3 %');
    await shot('service');
  });

  it("counts a service's conntrack entries on request (the dry run's simulated table holds none)", async () => {
    await page.getByRole('button', { name: 'Count conntrack entries' }).click();
    const rows = page.getByTestId('conntrack-counts').locator('tbody tr');
    await expect.poll(() => rows.count()).toBe(1);
    const cells = (await rows.first().locator('td').allTextContents()).map((c) => c.trim());
    expect(cells).toEqual(['10.96.10.10:80/TCP', 'cluster IP · http', '0', 'just now']);
    expect(await page.getByTestId('conntrack').textContent()).toContain("--dry-run: the table is kproxy's simulated one");
    expect(await page.getByTestId('conntrack').getByRole('alert').count()).toBe(0);
    await shot('service-conntrack');
  });

  it("shows a LoadBalancer's health check node port as simulated: --dry-run binds nothing on the host", async () => {
    await page.goto(`${daemon.url}#/services/shop/ingress`);
    await page.getByRole('heading', { name: 'shop/ingress' }).waitFor();
    const hc = page.getByTestId('health-check');
    await hc.waitFor();
    expect((await hc.textContent())?.replace(/\s+/g, ' ').trim()).toBe('Health check node port 32100: simulated (--dry-run binds nothing on the host), would answer 200 (1 local endpoint)');
    await shot('service-health-check');
  });

  it('resyncs from the Actions page and the new sync arrives live on the Syncs page', async () => {
    await page.getByRole('link', { name: 'Syncs' }).click();
    const rows = page.getByTestId('syncs').locator('tbody tr');
    await rows.first().waitFor();
    const before = await rows.count();
    await page.getByRole('link', { name: 'Actions' }).click();
    await page.getByTestId('resync').click();
    await expect.poll(() => page.getByTestId('action-result').first().textContent()).toContain('full sync requested');
    await shot('actions');
    await page.getByRole('link', { name: 'Syncs' }).click();
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBeGreaterThan(before);
    // A dual-stack node resyncs each family: the newest row is one of them, labelled with its family.
    expect(await rows.first().textContent()).toMatch(/resync\s*full\s*IPv[46]\s*ok/);
    await shot('syncs');
  });

  it('pages through the rules and jumps to a chain', async () => {
    await page.getByRole('link', { name: 'Rules' }).click();
    await page.getByTestId('chain-row').first().waitFor();
    await page.getByTestId('rule-search').fill('10.96.10.10');
    await expect.poll(() => page.getByTestId('chain-row').first().textContent()).toContain('KUBE-SERVICES');
    await page
      .locator('button.link', { hasText: /^KUBE-SVC-/ })
      .first()
      .click();
    await expect.poll(() => page.locator('.chain.hl').first().textContent()).toMatch(/KUBE-SVC-/);
    await shot('rules');
  });

  it('refuses an action without the token', async () => {
    const anonymous = await browser.context.newPage();
    try {
      await anonymous.addInitScript(() => sessionStorage.clear());
      await anonymous.goto(daemon.url);
      await anonymous.getByTestId('login').waitFor();
      const status = await anonymous.evaluate(async () => (await fetch('api/v1/actions/resync', { method: 'POST' })).status);
      expect(status).toBe(401);
      const forged = await anonymous.evaluate(async () => (await fetch('api/v1/actions/cleanup', { method: 'POST', headers: { authorization: 'Bearer guess' } })).json());
      expect(forged.error.code).toBe('KPROXY_ERR_AUTH_FAILED');
    } finally {
      await anonymous.close();
    }
    expect(daemon.logs()).not.toMatch(/DashboardCleanup/);
  });

  it('ran without script errors in the page', () => {
    expect(session.errors).toEqual([]);
  });
});
