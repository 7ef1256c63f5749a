import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { RawFinding } from '../../server/dashboard/drift.ts';
import { tiers } from '../tiers.ts';

/**
 * The dashboard's drift check against real iptables (legacy and nft): the
 * kernel lists kproxy's rules in its own spelling, and that must not count as
 * drift; a deleted rule, a foreign rule in kproxy's chain, a chain in kproxy's
 * namespace and a lost jump must.
 */
const CHILD = join(import.meta.dirname, 'dashboard-drift.child.ts');

const namespaces: string[] = [];
afterEach(() => {
  for (const ns of namespaces.splice(0)) {
    try {
      execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
    } catch {
      // Already gone: nothing left to remove.
    }
  }
});

describe.skipIf(!tiers().kernel.ok)('dashboard drift against the real kernel', () => {
  for (const flavor of ['legacy', 'nft'] as const) {
    it(`iptables-${flavor}: no drift after syncs; tampering is found`, () => {
      const ns = `kpt-drift-${flavor}-${process.pid}`;
      execFileSync('ip', ['netns', 'add', ns]);
      namespaces.push(ns);
      const out = execFileSync('ip', ['netns', 'exec', ns, process.execPath, CHILD, flavor], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 90_000 });
      const r = JSON.parse(out) as { clean: RawFinding[]; tampered: RawFinding[]; svc: string; removed: string; intendedChains: number };
      expect(r.intendedChains).toBeGreaterThan(30);
      expect(r.clean).toEqual([]);
      const brief = r.tampered.map((f) => `${f.kind} ${f.table}/${f.chain}`);
      expect(brief).toEqual(
        expect.arrayContaining([`missing-rule nat/${r.svc}`, 'unexpected-rule nat/KUBE-MARK-MASQ', 'unexpected-chain nat/KUBE-SVC-ROGUEROGUEROGUE1', 'missing-jump filter/INPUT']),
      );
      expect(r.tampered).toHaveLength(4);
    });
  }
});
