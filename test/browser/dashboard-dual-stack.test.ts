import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { openDashboard, SCREENSHOTS, type DashboardSession } from './harness.ts';

/**
 * The dashboard of a dual-stack node in headless Chromium, against a real
 * kproxy (--dry-run on deploy/examples/, whose node-a has an IPv4 and an IPv6
 * address and which holds a dual-stack and an IPv6-only Service): the family
 * filter, a dual-stack Service's IPv4 and IPv6 ports with IPv6 addresses in the
 * flow picture, the ip6tables tables on the Rules page, and in IPVS mode the
 * IPv6 virtual servers. Screenshots: test-results/screenshots/dashboard-dual-stack-*.png.
 */
const TOKEN = 'e2e-dual-stack-token-0123456789abcdef';

async function signIn(session: DashboardSession): Promise<Page> {
  const { page, daemon } = session;
  await page.goto(daemon.url);
  await page.getByLabel('Token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByTestId('connection').getByText('Live').waitFor();
  return page;
}

describe.skipIf(!tiers().browser.ok)('a dual-stack node on the dashboard', () => {
  let session: DashboardSession | undefined;
  afterAll(async () => {
    await session?.close();
  });
  const shot = (page: Page, name: string) => page.screenshot({ path: join(SCREENSHOTS, `dashboard-dual-stack-${name}.png`), fullPage: true });

  it('filters Services by IP family; a dual-stack Service is in both', async () => {
    session = await openDashboard({ token: TOKEN, args: () => ['--source', 'file:deploy/examples/'] });
    const page = await signIn(session);
    await page.getByRole('link', { name: 'Services' }).click();
    const rows = page.getByTestId('service-row');
    await expect.poll(() => rows.count()).toBeGreaterThan(5);
    const family = page.getByTestId('family-filter');
    await family.getByRole('button', { name: /^IPv6/ }).click();
    await expect.poll(() => rows.count()).toBe(2);
    const names = (await rows.locator('.name').allTextContents()).map((t) => t.trim());
    expect(names).toEqual(['shop/catalog', 'shop/search']);
    expect(await rows.first().textContent()).toContain('fd00:10:96::80');
    await shot(page, 'services-ipv6');
    await family.getByRole('button', { name: /^IPv4/ }).click();
    await expect.poll(async () => (await rows.locator('.name').allTextContents()).map((t) => t.trim())).toContain('shop/catalog');
    expect((await rows.locator('.name').allTextContents()).map((t) => t.trim())).not.toContain('shop/search');
    expect(session.errors).toEqual([]);
  });

  it("shows a dual-stack Service's IPv4 and IPv6 ports, the IPv6 one with its ip6tables chains and IPv6 flow", async () => {
    const page = session!.page;
    await page.goto(`${session!.daemon.url}#/services/shop/catalog`);
    await page.getByRole('heading', { name: 'shop/catalog' }).waitFor();
    const ports = page.getByTestId('port');
    await expect.poll(() => ports.count()).toBe(2);
    expect(await ports.nth(0).getByTestId('port-family').textContent()).toContain('IPv4 10.96.10.80');
    const v6 = ports.nth(1);
    expect(await v6.getByTestId('port-family').textContent()).toContain('IPv6 fd00:10:96::80');
    const endpoints = (await v6.getByTestId('endpoints').locator('tbody tr').allTextContents()).join(' ');
    expect(endpoints).toContain('[fd00:10:244::80]:8080');
    expect(endpoints).toContain('[fd00:10:244:1::80]:8080');
    const chains = await v6.getByTestId('chain').locator('.name').allTextContents();
    expect(chains.filter((c) => c.startsWith('KUBE-SEP-'))).toHaveLength(2);
    const flow = v6.getByTestId('flow');
    expect(await flow.textContent()).toContain('[fd00:10:96::80]:80/TCP');
    expect(await flow.textContent()).toContain('[fd00:10:244::80]:8080');
    expect(await flow.textContent()).toContain('50.0 %');
    await shot(page, 'service');
  });

  it('lists the ip6tables tables on the Rules page beside the iptables ones', async () => {
    const page = session!.page;
    await page.goto(`${session!.daemon.url}#/rules/ip6-nat`);
    const tabs = page.getByRole('tab');
    await expect.poll(async () => (await tabs.allTextContents()).join(' ')).toMatch(/ip6-nat/);
    const names = (await tabs.allTextContents()).map((t) => t.trim().split(/\s/)[0]);
    expect(names).toEqual(expect.arrayContaining(['nat', 'filter', 'ip6-nat', 'ip6-filter']));
    await page.getByText('KUBE-SERVICES').first().waitFor();
    const text = await page.locator('main').textContent();
    expect(text).toContain('fd00:10:96::80');
    expect(text).not.toContain('10.96.10.80/32');
    await shot(page, 'rules-ip6-nat');
    expect(session!.errors).toEqual([]);
    await session!.close();
    session = undefined;
  });

  it('shows the IPv6 virtual servers in IPVS mode', async () => {
    session = await openDashboard({ token: TOKEN, args: () => ['--proxy-mode', 'ipvs', '--source', 'file:deploy/examples/'] });
    const page = await signIn(session);
    await page.goto(`${session.daemon.url}#/services/shop/search`);
    await page.getByRole('heading', { name: 'shop/search' }).waitFor();
    const vs = page.getByTestId('virtual-server');
    await expect.poll(async () => (await vs.locator('.name').allTextContents()).join(' ')).toContain('TCP [fd00:10:96::90]:80');
    const reals = (await vs.first().getByTestId('real-server').locator('td:first-child').allTextContents()).join(' ');
    expect(reals).toContain('[fd00:10:244::90]:8080');
    await shot(page, 'ipvs-service');
    // The Rules page's list is virtual: search for the IPv6 cluster IP to bring its virtual server into view.
    await page.goto(`${session.daemon.url}#/rules/ipvs?q=fd00:10:96::80`);
    await expect.poll(async () => (await page.locator('main').textContent()) ?? '').toContain('TCP [fd00:10:96::80]:80');
    expect((await page.locator('main').textContent()) ?? '').toContain('[fd00:10:244:1::80]:8080');
    await shot(page, 'ipvs-rules');
    expect(session.errors).toEqual([]);
  });
});
