import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { openDashboard, ROOT, SCREENSHOTS, type DashboardSession, type RunningDaemon } from './harness.ts';

/**
 * The dashboard's IPVS view in headless Chromium against a real kproxy in
 * IPVS mode (--dry-run --proxy-mode ipvs on a copy of deploy/examples/, token
 * auth): a Service page shows its virtual server, real servers and flow; an
 * endpoint that starts terminating turns into a draining real server live; the
 * Rules page lists the ipvs and ipsets tables. Screenshots land in
 * test-results/screenshots/dashboard-ipvs-*.png.
 */
const TOKEN = 'e2e-ipvs-dashboard-token-0123456789';

describe.skipIf(!tiers().browser.ok)('dashboard in IPVS mode in the browser', () => {
  let session: DashboardSession;
  let daemon: RunningDaemon;
  let page: Page;
  let dir: string;

  beforeAll(async () => {
    session = await openDashboard({
      token: TOKEN,
      // A copy of the example cluster: the test edits it to make an endpoint terminate.
      prepare: (d) => cpSync(join(ROOT, 'deploy/examples'), join(d, 'examples'), { recursive: true }),
      args: (d) => ['--proxy-mode', 'ipvs', '--source', `file:${join(d, 'examples')}/`],
    });
    ({ daemon, page, dir } = session);
  });

  afterAll(async () => {
    await session?.close();
  });

  const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `dashboard-ipvs-${name}.png`), fullPage: true });

  it('signs in and shows the IPVS mode on the overview', async () => {
    await page.goto(daemon.url);
    await page.getByLabel('Token').fill(TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('connection').getByText('Live').waitFor();
    expect(await page.locator('header .mode').textContent()).toBe('ipvs');
    await page.getByText('Kernel objects').waitFor();
    expect(daemon.logs()).not.toMatch(/no view of the ipvs mode/);
    await shot('overview');
  });

  it("shows a Service's virtual server with its real servers, weight shares and flow", async () => {
    await page.goto(`${daemon.url}#/services/shop/frontend`);
    await page.getByRole('heading', { name: 'shop/frontend' }).waitFor();
    const vs = page.getByTestId('virtual-server');
    await expect.poll(() => vs.count()).toBe(1);
    expect(await vs.locator('.name').textContent()).toBe('TCP 10.96.10.10:80');
    expect(await vs.textContent()).toContain('round robin (rr)');
    const reals = vs.getByTestId('real-server');
    expect(await reals.locator('td:first-child').allTextContents()).toEqual(['10.244.0.11:8080 Masq', '10.244.1.12:8080 Masq', '10.244.1.13:8080 Masq']);
    expect(await reals.locator('td:nth-child(4)').allTextContents()).toEqual(['33.3 %', '33.3 %', '33.3 %']);
    expect(await page.getByTestId('ipset').locator('.name').allTextContents()).toEqual(['KUBE-LOOP-BACK', 'KUBE-CLUSTER-IP']);
    const flow = page.getByTestId('flow');
    expect(await flow.locator('g.node.entry').count()).toBe(1);
    expect(await flow.locator('g.node.chain').allTextContents()).toEqual(expect.arrayContaining([expect.stringContaining('KUBE-CLUSTER-IP'), expect.stringContaining('TCP 10.96.10.10:80')]));
    expect(await flow.locator('g.node.endpoint').count()).toBe(3);
    await shot('service');
  });

  it('turns a terminating endpoint into a draining real server at weight 0, live', async () => {
    const file = join(dir, 'examples', 'shop.yaml');
    const before = readFileSync(file, 'utf8');
    const ready = 'addresses: [10.244.1.13]\n    conditions: { ready: true, serving: true, terminating: false }';
    expect(before).toContain(ready);
    writeFileSync(file, before.replace(ready, 'addresses: [10.244.1.13]\n    conditions: { ready: false, serving: true, terminating: true }'));
    const vs = page.getByTestId('virtual-server');
    const draining = vs.getByTestId('real-server').filter({ hasText: '10.244.1.13:8080' });
    await expect.poll(() => draining.textContent(), { timeout: 15_000 }).toContain('draining');
    expect(await draining.locator('td:nth-child(3)').textContent()).toBe('0');
    expect(await vs.getByTestId('real-server').locator('td:nth-child(4)').allTextContents()).toEqual(['50.0 %', '50.0 %', '0 %']);
    await expect.poll(() => page.getByTestId('flow').textContent()).toContain('draining');
    await shot('draining');
    // The docs' picture (docs/img/dashboard-ipvs.png): the port from its flow down to its virtual server.
    const port = (await page.getByTestId('port').first().boundingBox())!;
    const card = (await vs.boundingBox())!;
    await page.screenshot({ path: join(SCREENSHOTS, 'dashboard-ipvs-port.png'), fullPage: true, clip: { x: port.x, y: port.y, width: port.width, height: card.y + card.height + 12 - port.y } });
  });

  it('draws a load balancer port through its set match, glue and source-range firewall to one virtual server per address', async () => {
    await page.goto(`${daemon.url}#/services/shop/web`);
    await page.getByRole('heading', { name: 'shop/web' }).waitFor();
    const names = page.getByTestId('virtual-server').locator('.name');
    await expect.poll(() => names.allTextContents()).toEqual(expect.arrayContaining(['TCP 10.96.10.30:443', 'TCP 192.0.2.10:443']));
    // One node port virtual server per node address (the host's, in a dry run).
    expect((await names.allTextContents()).length).toBeGreaterThanOrEqual(3);
    const flow = page.getByTestId('flow');
    expect(await flow.locator('g.node.entry').count()).toBe((await names.allTextContents()).length);
    expect(await flow.textContent()).toContain('KUBE-SOURCE-RANGES-FIREWALL');
    expect(await page.locator('.note').allTextContents()).toEqual(expect.arrayContaining([expect.stringContaining('only from 203.0.113.0/24')]));
    await shot('loadbalancer');
    await flow.screenshot({ path: join(SCREENSHOTS, 'dashboard-ipvs-loadbalancer-flow.png') });
  });

  it("opens the Rules page's IPVS table and finds a virtual server, then the sets", async () => {
    await page.getByRole('link', { name: 'Rules' }).click();
    await page.getByRole('tab', { name: /^ipvs/ }).click();
    await page.getByTestId('chain-row').first().waitFor();
    expect(await page.locator('.rhead').textContent()).toContain('Virtual server / real server');
    await page.getByTestId('rule-search').fill('10.96.10.10');
    await expect.poll(() => page.getByTestId('chain-row').first().textContent()).toContain('TCP 10.96.10.10:80');
    const rows = page.getByTestId('real-server-row');
    await expect.poll(() => rows.count()).toBe(3);
    expect(await rows.filter({ hasText: '10.244.1.13:8080' }).textContent()).toContain('draining');
    await shot('rules');

    await page.getByRole('tab', { name: /^ipsets/ }).click();
    await expect
      .poll(() => page.getByTestId('chain-row').allTextContents())
      .toEqual([expect.stringContaining('KUBE-CLUSTER-IP hash:ip,port family inet'), expect.stringContaining('KUBE-IPVS-IPS hash:ip family inet')]);
    await shot('ipsets');
  });

  it('ran without script errors in the page', () => {
    expect(session.errors).toEqual([]);
  });
});
