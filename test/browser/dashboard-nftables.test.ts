import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { openDashboard, ROOT, SCREENSHOTS, type DashboardSession, type RunningDaemon } from './harness.ts';

/**
 * The dashboard's nftables view in headless Chromium against a real kproxy in
 * nftables mode (--dry-run --proxy-mode nftables over deploy/examples/, token
 * auth; the examples are dual-stack, so both the ip and the ip6 kube-proxy
 * tables are programmed): the Services list, a Service's flow through its map
 * elements to its chains and endpoints, the Rules page with the table and a
 * search, and the last transaction downloaded from the Syncs page.
 * Screenshots land in test-results/screenshots/dashboard-nftables-*.png.
 */
const TOKEN = 'e2e-nftables-dashboard-token-0123456789';

describe.skipIf(!tiers().browser.ok)('dashboard in nftables mode in the browser', () => {
  let session: DashboardSession;
  let daemon: RunningDaemon;
  let page: Page;

  beforeAll(async () => {
    session = await openDashboard({
      token: TOKEN,
      args: () => ['--proxy-mode', 'nftables', '--source', `file:${join(ROOT, 'deploy/examples')}/`],
    });
    ({ daemon, page } = session);
  });

  afterAll(async () => {
    await session?.close();
  });

  const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `dashboard-nftables-${name}.png`), fullPage: true });

  it('signs in, shows the nftables mode on the overview and lists the Services', async () => {
    await page.goto(daemon.url);
    await page.getByLabel('Token').fill(TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('connection').getByText('Live').waitFor();
    expect(await page.locator('header .mode').textContent()).toBe('nftables');
    await expect.poll(() => page.locator('main').textContent()).toContain('chains, sets and maps');
    expect(daemon.logs()).not.toMatch(/no view of the nftables mode/);
    await shot('overview');
    await page.getByRole('link', { name: 'Services' }).click();
    const list = page.locator('main');
    await expect.poll(() => list.textContent()).toContain('shop/web');
    expect(await list.textContent()).toContain('kube-system/kube-dns');
    await shot('services');
  });

  it('draws a load balancer port from its map elements through the firewall, external and service chains to its endpoints', async () => {
    await page.goto(`${daemon.url}#/services/shop/web`);
    await page.getByRole('heading', { name: 'shop/web' }).waitFor();
    const flow = page.getByTestId('flow').first();
    await expect.poll(() => flow.locator('g.node.endpoint').count()).toBe(2);
    const boxes = await flow.locator('g.node.chain').allTextContents();
    for (const want of ['@service-ips', '@service-nodeports', '@firewall-ips', 'firewall-', 'external-', 'service-'])
      expect(
        boxes.some((b) => b.startsWith(want)),
        `${want} in ${boxes.join(' | ')}`,
      ).toBe(true);
    expect(boxes.find((b) => b.startsWith('service-'))).toContain('numgen mod 2');
    expect(await flow.locator('g.node.entry').count()).toBe(3);
    expect(await page.locator('.note').allTextContents()).toEqual(expect.arrayContaining([expect.stringContaining('only from 203.0.113.0/24, 198.51.100.0/25')]));
    // The port's own elements of the shared maps, and its chains (each endpoint's, too).
    const cards = page.getByTestId('chain');
    const names = await cards.locator('.name').allTextContents();
    expect(names).toEqual(expect.arrayContaining(['@service-ips', '@service-nodeports', '@firewall-ips']));
    expect(names.filter((n) => n.startsWith('endpoint-'))).toHaveLength(2);
    expect(await cards.filter({ hasText: '@service-ips' }).locator('td.spec').allTextContents()).toEqual([
      expect.stringMatching(/^10\.96\.10\.30 \. tcp \. 443 : goto service-/),
      expect.stringMatching(/^192\.0\.2\.10 \. tcp \. 443 : goto external-/),
    ]);
    await shot('service');
    await flow.screenshot({ path: join(SCREENSHOTS, 'dashboard-nftables-flow.png') });
    // The docs' picture (docs/img/dashboard-nftables.png): the port from its flow down to its first map elements.
    const port = (await page.getByTestId('port').first().boundingBox())!;
    const card = (await cards.filter({ hasText: '@service-nodeports' }).first().boundingBox())!;
    await page.screenshot({ path: join(SCREENSHOTS, 'dashboard-nftables-port.png'), fullPage: true, clip: { x: port.x, y: port.y, width: port.width, height: card.y + card.height + 12 - port.y } });
  });

  it('opens the Rules page on the kube-proxy table, follows a map to a chain, and searches', async () => {
    await page.getByRole('link', { name: 'Rules' }).click();
    // "#/rules" asks for nat, which this mode has not: the page shows the first table it has.
    await expect.poll(() => page.getByRole('tab', { selected: true }).textContent()).toMatch(/^kube-proxy/);
    expect(await page.getByRole('tab').allTextContents()).toEqual([expect.stringMatching(/^kube-proxy/), expect.stringMatching(/^ip6-kube-proxy/)]);
    await page.getByTestId('chain-row').first().waitFor();
    expect(await page.getByTestId('chain-row').first().textContent()).toContain('filter hook forward priority 0');
    await shot('rules');

    await page.getByTestId('rule-search').fill('10.96.10.30');
    // The cluster IP is an element of cluster-ips and a key of service-ips; no chain or other map names it.
    await expect
      .poll(() => page.getByTestId('chain-row').allTextContents())
      .toEqual([expect.stringMatching(/^@cluster-ips set ipv4_addr · \d+ elements/), expect.stringMatching(/^@service-ips map ipv4_addr \. inet_proto \. inet_service : verdict · \d+ elements/)]);
    const element = page.locator('.r.rule').filter({ hasText: '10.96.10.30 . tcp . 443 : goto service-' });
    await expect.poll(() => element.count()).toBe(1);
    await shot('rules-search');
    // An element's verdict leads to its chain.
    await element.getByRole('button').click();
    await expect.poll(() => page.locator('.r.chain.hl').first().textContent()).toMatch(/service-[A-Z2-7]{8}-shop\/web\/tcp\/https/);
    await shot('rules-follow');
  });

  it('downloads the last transaction from the Syncs page as nft -f input', async () => {
    await page.getByRole('link', { name: 'Syncs' }).click();
    await page.getByRole('heading', { name: 'Transactions' }).waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download the last accepted transaction' }).click()]);
    expect(download.suggestedFilename()).toMatch(/^kproxy-node-a-sync-\d+\.nft$/);
    const text = readFileSync((await download.path())!, 'utf8');
    expect(text).toMatch(/^add table ip6? kube-proxy/);
    // The first (full) sync of each family was verified against the simulated kernel's counts.
    const verified = page.getByTestId('sync-verify');
    await verified.first().waitFor();
    expect(await verified.first().textContent()).toMatch(/^verified \d+$/);
    await shot('syncs');
    // Clean verifications raise no alert on the Overview.
    await page.getByRole('link', { name: 'Overview' }).click();
    await page.getByTestId('not-ready').or(page.getByText('Last sync')).first().waitFor();
    expect(await page.getByTestId('verify-mismatch').count()).toBe(0);
  });

  it('ran without script errors in the page', () => {
    expect(session.errors).toEqual([]);
  });
});
