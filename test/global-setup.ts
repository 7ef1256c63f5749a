import type { TestProject } from 'vitest/node';
import { tiers } from './tiers.ts';

/**
 * Says once, at the start of `npm test`, which tiers run and which are skipped
 * and why. With KPROXY_REQUIRE_ALL_TIERS=1 (set by .ci/run) a tier that cannot
 * run fails the whole run instead of being skipped: in CI nothing is skipped.
 */
export default function setup(_project: TestProject): void {
  const t = tiers();
  const lines = [`unit, web, api: run`, ...Object.values(t).map((x) => `${x.name}: ${x.ok ? 'run' : x.reason}`)];
  process.stdout.write(`\nkproxy test tiers\n  ${lines.join('\n  ')}\n\n`);
  if (process.env.KPROXY_REQUIRE_ALL_TIERS === '1') {
    const skipped = Object.values(t).filter((x) => !x.ok);
    if (skipped.length) throw new Error(`KPROXY_REQUIRE_ALL_TIERS=1 but some tiers cannot run: ${skipped.map((x) => x.reason).join('; ')}`);
  }
}
