import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { openDashboard, ROOT, SCREENSHOTS, type DashboardSession, type RunningDaemon } from './harness.ts';

/**
 * The Trace page in headless Chromium against a real kproxy (--dry-run over
 * deploy/examples/, iptables mode, token auth): a Service page's "Trace a
 * packet" link fills the form, the trace of an allowed and of a blocked
 * source is drawn step by step, and a step's link opens its rule on the
 * Rules page. Screenshots: test-results/screenshots/dashboard-trace-*.png.
 */
const TOKEN = 'e2e-trace-dashboard-token-0123456789abcd';

describe.skipIf(!tiers().browser.ok)('the Trace page in the browser', () => {
  let session: DashboardSession;
  let daemon: RunningDaemon;
  let page: Page;

  beforeAll(async () => {
    session = await openDashboard({ token: TOKEN, args: () => ['--source', `file:${join(ROOT, 'deploy/examples')}/`] });
    ({ daemon, page } = session);
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.goto(daemon.url);
    await page.getByLabel('Token').fill(TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('connection').getByText('Live').waitFor();
  });

  afterAll(async () => {
    await session?.close();
  });

  const shot = async (name: string) => {
    // From the top: the sticky header would otherwise sit over the middle of a full-page picture.
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: join(SCREENSHOTS, `dashboard-trace-${name}.png`), fullPage: true });
  };

  it("opens from a Service page's link with the load balancer address filled in, and traces an allowed source to the endpoints", async () => {
    await page.goto(`${daemon.url}#/services/shop/web`);
    await page.getByRole('heading', { name: 'shop/web' }).waitFor();
    await page.getByTestId('trace-links').first().getByRole('link', { name: '192.0.2.10:443/TCP' }).click();
    await page.getByRole('heading', { name: 'Trace a packet' }).waitFor();
    expect(await page.getByLabel('Destination').inputValue()).toBe('192.0.2.10:443');
    expect(await page.getByLabel('Protocol').inputValue()).toBe('tcp');
    expect(await page.getByRole('link', { name: 'Trace' }).getAttribute('aria-current')).toBe('page');

    await page.getByLabel('Source').fill('203.0.113.7');
    await page.getByRole('button', { name: 'Trace', exact: true }).click();
    await expect.poll(() => page.getByTestId('trace-verdict').textContent()).toBe('DNAT');
    expect(await page.getByTestId('trace-reason').textContent()).toMatch(/^shop\/web:https: a new connection to load balancer IP 192\.0\.2\.10:443\/tcp is DNATed to one of 2 endpoints \(50% each\)/);
    expect(page.url()).toContain('#/trace?proto=tcp&src=203.0.113.7&dst=192.0.2.10%3A443');
    const steps = page.getByTestId('trace-path').getByTestId('trace-step');
    const chains = await steps.locator('.where a strong').allTextContents();
    expect(chains.slice(0, 3)).toEqual(['PREROUTING', 'KUBE-SERVICES', expect.stringMatching(/^KUBE-FW-/)]);
    expect(await page.getByTestId('trace-endpoints').locator('summary code').allTextContents()).toHaveLength(2);
    // Open one endpoint's own way: its DNAT, then filter and postrouting.
    await page.getByTestId('trace-endpoints').locator('summary').first().click();
    await expect
      .poll(() =>
        page
          .getByTestId('trace-endpoints')
          .getByText(/^DNAT to /)
          .count(),
      )
      .toBeGreaterThan(0);
    await shot('allowed');
  });

  it('says why a source outside loadBalancerSourceRanges is dropped', async () => {
    await page.getByLabel('Source').fill('198.51.100.200');
    await page.getByRole('button', { name: 'Trace', exact: true }).click();
    await expect.poll(() => page.getByTestId('trace-verdict').textContent()).toBe('DROP');
    expect(await page.getByTestId('trace-reason').textContent()).toMatch(/^source 198\.51\.100\.200 is outside loadBalancerSourceRanges of shop\/web:https: dropped/);
    const last = page.getByTestId('trace-path').getByTestId('trace-step').last();
    expect(await last.locator('.verdict').textContent()).toBe('DROP');
    expect(await last.locator('.where a').textContent()).toMatch(/^filter KUBE-PROXY-FIREWALL #\d+$/);
    await shot('blocked');
  });

  it('links a step to its rule on the Rules page, where that rule is highlighted', async () => {
    const last = page.getByTestId('trace-path').getByTestId('trace-step').last();
    const rule = (await last.locator('code.rule').textContent())!;
    await last.locator('.where a').click();
    await expect.poll(() => page.getByRole('tab', { selected: true }).textContent()).toMatch(/^filter/);
    const linked = page.getByTestId('linked-rule');
    await expect.poll(() => linked.count()).toBe(1);
    expect(await linked.locator('.spec').getAttribute('title')).toBe(rule);
    expect(await page.locator('.r.rule.hl').count()).toBe(1);
    await shot('rule');
  });

  it('shows a bad field as the server names it', async () => {
    await page.goto(`${daemon.url}#/trace?proto=tcp&src=10.0.0.2&dst=10.96.10.10`);
    await expect.poll(() => page.getByTestId('trace-error').textContent()).toContain('dst: "10.96.10.10" has no port');
  });

  it('ran without script errors in the page', () => {
    expect(session.errors).toEqual([]);
  });
});
