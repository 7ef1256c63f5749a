import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tiers } from '../tiers.ts';
import { openDashboard, SCREENSHOTS, type DashboardSession } from './harness.ts';

const TOKEN = 'e2e-not-ready-token-0123456789abcdef';

/**
 * A node whose manifests do not parse at start: the dashboard says it is not
 * ready and why (the file, line and error, which /readyz on the open health
 * port says only in fixed words), while nothing is programmed.
 */
describe.skipIf(!tiers().browser.ok)('dashboard of a node that has not synced', () => {
  let session: DashboardSession;

  beforeAll(async () => {
    session = await openDashboard({
      token: TOKEN,
      prepare: (d) => {
        mkdirSync(join(d, 'manifests'));
        writeFileSync(join(d, 'manifests', 'services.yaml'), 'apiVersion: v1\nkind: Service\nmetadata: { name: web\n');
      },
      args: (d) => ['--source', `file:${join(d, 'manifests')}`],
    });
  });

  afterAll(async () => {
    await session?.close();
  });

  it('shows Not ready with the file, line and error, and no sync', async () => {
    const { page, daemon } = session;
    await page.goto(daemon.url);
    await page.getByLabel('Token').fill(TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    const banner = page.getByTestId('not-ready');
    await banner.waitFor();
    expect(await banner.textContent()).toMatch(/Not ready: nothing synced yet, waiting for file:.*manifests to sync: .*services\.yaml:4:1: invalid YAML: /);
    expect(await page.getByTestId('source-error').textContent()).toMatch(/services\.yaml:4:1: invalid YAML: .*nothing is synced until it can be read/);
    await page.getByText('none yet').waitFor();
    expect(session.errors).toEqual([]);
    await page.screenshot({ path: join(SCREENSHOTS, 'dashboard-not-ready.png'), fullPage: true });
  });
});
