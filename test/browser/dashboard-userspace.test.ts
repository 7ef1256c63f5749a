import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeObject, ready, tcpPort, K8S_NAMESPACE, type ServiceSpec } from '../kernel/harness/manifests.ts';
import { NODE_A, NODE_B, PODS } from '../kernel/harness/plan.ts';
import { TestCluster } from '../kernel/harness/topology.ts';
import { tiers } from '../tiers.ts';
import { launchBrowser, SCREENSHOTS, type Browser } from './harness.ts';

/**
 * The dashboard in userspace mode, in headless Chromium, over live traffic: a
 * real kproxy relays connections in the kernel tier's namespaces (client,
 * node-a, pods on two nodes) and Chromium runs inside node-a's namespace to
 * reach its dashboard. The Overview counts what the relay carries, a
 * Service's page shows each endpoint's open connections and the balancing
 * distribution, and the Connections page lists the open connections, searched.
 * Screenshots: test-results/screenshots/dashboard-userspace-*.png.
 */
const TOKEN = 'e2e-userspace-dashboard-token-0123456789';
const { a0, a1, b0 } = PODS;
const web: ServiceSpec = { name: 'web', type: 'NodePort', clusterIP: '10.96.0.10', ports: tcpPort(80, 30080) };
const api: ServiceSpec = { name: 'api', clusterIP: '10.96.0.11', ports: tcpPort(80) };

describe.skipIf(!tiers().kernel.ok || !tiers().browser.ok)('dashboard in userspace mode in the browser, over live traffic', () => {
  let cluster: TestCluster | undefined;
  let browser: Browser | undefined;
  let page: Page;
  const dir = mkdtempSync(join(tmpdir(), 'kpt-userspace-e2e-'));
  const errors: string[] = [];
  const url = 'http://127.0.0.1:10249/';
  const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `dashboard-userspace-${name}.png`), fullPage: true });

  beforeAll(async () => {
    writeFileSync(join(dir, 'token'), `${TOKEN}\n`);
    cluster = await TestCluster.create();
    const m = cluster.manifests;
    m.write('nodes', [nodeObject(NODE_A.name, NODE_A.ip, NODE_A.podCIDR), nodeObject(NODE_B.name, NODE_B.ip, NODE_B.podCIDR)]);
    m.writeService(web, ready(a0, a1, b0));
    m.writeService(api, ready(a1));
    await cluster.startKproxy('nft', ['--proxy-mode', 'userspace', '--dashboard-token-file', join(dir, 'token')]);
    browser = await launchBrowser({ netns: cluster.ns.nodeA });
    page = await browser.context.newPage();
    page.on('pageerror', (e) => errors.push(e.message));
  });

  afterAll(async () => {
    await browser?.close();
    await cluster?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  it('counts the connections the relay carries on the Overview', async () => {
    const c = cluster!;
    // 30 short connections (round robin: 10 per endpoint), then 4 kept open: a0, a1, b0, a0.
    expect((await c.client().tcp({ host: web.clusterIP, port: 80 }, 30)).outcomes).toEqual({ ok: 30 });
    for (let i = 0; i < 4; i++) await c.client().open({ host: web.clusterIP, port: 80 });
    await c.client('a2').open({ host: api.clusterIP, port: 80 });

    await page.goto(url);
    await page.getByLabel('Token').fill(TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('connection').getByText('Live').waitFor();
    expect(await page.locator('header .mode').textContent()).toBe('userspace');
    await expect.poll(() => page.locator('main').textContent(), { timeout: 15_000 }).toContain('5 TCP connections');
    expect(await page.getByRole('navigation', { name: 'Pages' }).textContent()).toContain('Connections');
    await shot('overview');
  });

  it("shows each endpoint's open connections and the balancing distribution on the Service's page", async () => {
    await page.goto(`${url}#/services/${K8S_NAMESPACE}/web`);
    await page.getByRole('heading', { name: `${K8S_NAMESPACE}/web` }).waitFor();
    const endpoints = page.getByTestId('relay-endpoints');
    await endpoints.waitFor();
    const row = (ip: string) => endpoints.locator('tbody tr', { hasText: ip });
    const figures = async () => Promise.all([a0, a1, b0].map(async (p) => (await row(p.ip).locator('td').allTextContents()).slice(1, 3)));
    // Open and relayed per endpoint: 30 connections in round robin over three endpoints (10 each), then 4 kept
    // open (the rotation's start is shuffled, as upstream's: one endpoint gets two of them).
    await expect.poll(async () => (await figures()).map((f) => f.join('/')).sort(), { timeout: 15_000 }).toEqual(['1/11', '1/11', '2/12']);
    const busiest = [a0, a1, b0][(await figures()).findIndex((f) => f[0] === '2')];
    expect(await row(busiest.ip).textContent()).toContain('35.3 %');
    expect(await page.getByTestId('relay-sockets').textContent()).toContain(`${a1.ip}:8080`);
    // The portals are the port's rules: its KUBE-PORTALS rules are listed with it.
    expect(await page.locator('main').textContent()).toContain('KUBE-PORTALS-CONTAINER');
    await shot('service');
  });

  it('lists the open connections, client to endpoint, and finds them by search', async () => {
    await page.goto(`${url}#/connections`);
    await expect.poll(() => page.getByTestId('connections-count').textContent(), { timeout: 10_000 }).toContain('5 open');
    const rows = page.getByTestId('connection-row');
    expect(await rows.count()).toBe(5);
    const texts = await rows.allTextContents();
    expect(texts.filter((t) => t.includes(`${K8S_NAMESPACE}/web`) && t.includes('10.0.0.2:'))).toHaveLength(4);
    // a1 serves web and api: the search finds its connections of both, and only those.
    const ofA1 = texts.filter((t) => t.includes(a1.ip)).length;
    expect(ofA1).toBeGreaterThanOrEqual(2);
    await page.getByLabel('Search connections').fill(a1.ip);
    await expect.poll(() => page.getByTestId('connections-count').textContent(), { timeout: 10_000 }).toContain(`${ofA1} of 5 match`);
    expect((await rows.allTextContents()).every((t) => t.includes(a1.ip))).toBe(true);
    await shot('connections');
    expect(errors).toEqual([]);
  });
});
