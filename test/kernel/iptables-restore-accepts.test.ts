import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseIptablesSave } from '../../server/kernel/iptables-save-parser.ts';
import { tiers } from '../tiers.ts';

/**
 * The restore input kproxy generates for deploy/examples/ is accepted by the
 * real iptables-restore, legacy and nft, inside a private network namespace:
 * full sync, partial sync, a sync the kernel refuses (which must leave the nat
 * table exactly as it was), recovery with a full sync, and cleanup.
 */
const CHILD = join(import.meta.dirname, 'iptables-restore-accepts.child.ts');

interface Report {
  full: { full: boolean; error: string | null; lines: number; batch: string };
  afterFull: string;
  partial: { full: boolean; error: string | null; lines: number; batch: string };
  afterPartial: string;
  sep: string;
  refused: { full: boolean; error: string | null };
  natBefore: string;
  natAfterRefused: string;
  recovered: { full: boolean; error: string | null };
  afterRecovered: string;
  cleanup: { removed: Record<string, number>; errors: string[] };
  cleanupAgain: { removed: Record<string, number>; errors: string[] };
  afterCleanup: string;
  logs: string[];
}

const withoutComments = (s: string) =>
  s
    .split('\n')
    .filter((l) => !l.startsWith('#'))
    .join('\n');

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

describe.skipIf(!tiers().kernel.ok)('real iptables-restore accepts kproxy input', () => {
  const cases = [
    { flavor: 'legacy', split: 0 },
    { flavor: 'nft', split: 0 },
    // The nft flavour splits big nat rewrites into several COMMITs; force it on the small example.
    { flavor: 'nft', split: 30 },
  ] as const;
  for (const { flavor, split } of cases) {
    it(`iptables-${flavor}${split ? ` (nat in commits of ${split} rules)` : ''}: full, partial, refused and recovered syncs, then cleanup`, () => {
      const ns = `kpt-ipt-${flavor}${split}-${process.pid}`;
      execFileSync('ip', ['netns', 'add', ns]);
      namespaces.push(ns);
      const args = [CHILD, flavor, ...(split ? [String(split)] : [])];
      const out = execFileSync('ip', ['netns', 'exec', ns, process.execPath, ...args], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 90_000 });
      const r = JSON.parse(out) as Report;

      expect(r.full.error).toBeNull();
      expect(r.full.full).toBe(true);
      expect(r.full.batch.split('\n').filter((l) => l === '*nat').length > 1).toBe(split > 0);
      const dump = parseIptablesSave(r.afterFull);
      const nat = dump.tables.get('nat')!;
      const natChains = [...nat.chains.keys()];
      for (const c of ['KUBE-SERVICES', 'KUBE-NODEPORTS', 'KUBE-POSTROUTING', 'KUBE-MARK-MASQ', 'KUBE-PROXY-CANARY']) expect(natChains).toContain(c);
      // Every chain the restore input declared is in the kernel, kube-proxy names included.
      for (const line of r.full.batch.split('\n')) if (line.startsWith(':')) expect(r.afterFull).toContain(`${line.split(' ')[0]} `);
      expect(natChains.filter((c) => /^KUBE-SVC-[A-Z2-7]{16}$/.test(c)).length).toBeGreaterThan(5);
      expect(natChains.filter((c) => /^KUBE-SEP-[A-Z2-7]{16}$/.test(c)).length).toBeGreaterThan(10);
      expect(
        dump.tables
          .get('nat')!
          .chains.get('PREROUTING')!
          .rules.map((x) => x.target),
      ).toContain('KUBE-SERVICES');
      expect(
        dump.tables
          .get('filter')!
          .chains.get('INPUT')!
          .rules.map((x) => x.target),
      ).toEqual(expect.arrayContaining(['KUBE-FIREWALL', 'KUBE-NODEPORTS', 'KUBE-EXTERNAL-SERVICES', 'KUBE-PROXY-FIREWALL']));
      expect(dump.tables.get('mangle')?.chains.has('KUBE-PROXY-CANARY')).toBe(true);
      // The kernel normalises rules, but the comments kproxy wrote are all there.
      const comments = new Set([...nat.chains.values()].flatMap((c) => c.rules.map((x) => x.comment)));
      expect(comments).toContain('shop/frontend:http cluster IP');
      expect(comments).toContain('kubernetes service nodeports; NOTE: this must be the last rule in this chain');

      expect(r.partial.error).toBeNull();
      expect(r.partial.full).toBe(false);
      expect(r.partial.lines).toBeLessThan(r.full.lines);
      expect(r.partial.batch).toMatch(/^-X KUBE-SEP-/m);
      expect(r.afterPartial).not.toContain('shop/api:http cluster IP"');
      expect(r.afterPartial).toContain('"shop/api:http has no endpoints"');

      // A refused restore names the offending line and leaves the nat table untouched.
      expect(r.refused.error).toMatch(new RegExp(`line \\d+`));
      expect(r.refused.error).toContain(`-X ${r.sep}`);
      expect(withoutComments(r.natAfterRefused)).toBe(withoutComments(r.natBefore));
      expect(r.recovered.error).toBeNull();
      expect(r.recovered.full).toBe(true);
      expect(r.afterRecovered).not.toContain(`:${r.sep} `);

      expect(r.cleanup.errors).toEqual([]);
      expect(r.afterCleanup).not.toMatch(/KUBE-/);
      expect(r.cleanupAgain).toEqual({ removed: {}, errors: [] });
    });
  }
});
