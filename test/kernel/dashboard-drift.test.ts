import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { RawFinding } from '../../server/dashboard/drift.ts';
import { tiers } from '../tiers.ts';

/**
 * The dashboard's drift check against real iptables (legacy and nft): the
 * kernel lists kproxy's rules in its own spelling, and that must not count as
 * drift, nor must partial syncs that add and remove a service by editing the
 * shared chains in place; a deleted rule, a foreign rule in kproxy's chain, a
 * chain in kproxy's namespace and a lost jump must.
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
    it(`iptables-${flavor}: no drift after syncs, also after services added and removed in place; tampering is found`, () => {
      const ns = `kpt-drift-${flavor}-${process.pid}`;
      execFileSync('ip', ['netns', 'add', ns]);
      namespaces.push(ns);
      const out = execFileSync('ip', ['netns', 'exec', ns, process.execPath, CHILD, flavor], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 90_000 });
      const r = JSON.parse(out) as {
        clean: RawFinding[];
        afterAdd: RawFinding[];
        afterRemove: RawFinding[];
        edits: { added: { full: boolean; error: string | null; inserts: string[] }; removed: { full: boolean; error: string | null; deletes: string[] } };
        tampered: RawFinding[];
        svc: string;
        removed: string;
        intendedChains: number;
      };
      expect(r.intendedChains).toBeGreaterThan(30);
      expect(r.clean).toEqual([]);
      // The syncs that added and removed a service were partial and edited the shared chains in place.
      expect(r.edits.added).toMatchObject({ full: false, error: null });
      expect(r.edits.added.inserts).toEqual(expect.arrayContaining(['-I KUBE-SERVICES', '-I KUBE-NODEPORTS']));
      expect(r.edits.removed).toMatchObject({ full: false, error: null });
      expect(r.edits.removed.deletes).toEqual(expect.arrayContaining(['-D KUBE-SERVICES', '-D KUBE-NODEPORTS']));
      expect(r.afterAdd).toEqual([]);
      expect(r.afterRemove).toEqual([]);
      const brief = r.tampered.map((f) => `${f.kind} ${f.table}/${f.chain}`);
      expect(brief).toEqual(expect.arrayContaining([`missing-rule nat/${r.svc}`, 'unexpected-rule nat/KUBE-MARK-MASQ', 'unexpected-chain nat/KUBE-SVC-ROGUEROGUEROGUE1', 'missing-jump filter/INPUT']));
      expect(r.tampered).toHaveLength(4);
    });
  }
});
