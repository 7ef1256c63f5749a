import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseIptablesSave } from '../../server/kernel/iptables-save-parser.ts';
import { tiers } from '../tiers.ts';

/**
 * Partial syncs edit the shared chains (KUBE-SERVICES, KUBE-NODEPORTS, the
 * filter chains) in place with -D/-I when few of their rules change. The real
 * iptables-restore, legacy and nft, must accept those edits and end in the
 * kernel state a full sync writes, the order of service rules within the
 * shared chains aside, with the KUBE-NODEPORTS jump still last.
 */
const CHILD = join(import.meta.dirname, 'iptables-partial-edits.child.ts');
const SHARED = new Set(['KUBE-SERVICES', 'KUBE-NODEPORTS', 'KUBE-EXTERNAL-SERVICES', 'KUBE-PROXY-FIREWALL']);

interface Report {
  first: { full: boolean; error: string | null };
  steps: { what: string; full: boolean; error: string | null; batch: string }[];
  afterPartial: string;
  full: { full: boolean; error: string | null };
  afterFull: string;
  logs: string[];
}

/** shape lists kproxy's chains: shared ones as sorted rule lists, the others in order. */
function shape(save: string): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [tn, t] of parseIptablesSave(save).tables) {
    for (const [cn, c] of t.chains) {
      if (!cn.startsWith('KUBE-')) continue;
      const specs = c.rules.map((r) => r.spec);
      out[`${tn}/${cn}`] = SHARED.has(cn) ? specs.sort() : specs;
    }
  }
  return out;
}

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

describe.skipIf(!tiers().kernel.ok)('real iptables-restore takes in-place edits of the shared chains', () => {
  for (const flavor of ['legacy', 'nft'] as const) {
    it(`iptables-${flavor}: adds, removals and endpoint changes end where a full sync ends`, () => {
      const ns = `kpt-edits-${flavor}-${process.pid}`;
      execFileSync('ip', ['netns', 'add', ns]);
      namespaces.push(ns);
      const out = execFileSync('ip', ['netns', 'exec', ns, process.execPath, CHILD, flavor], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 90_000 });
      const r = JSON.parse(out) as Report;
      expect(r.first.error).toBeNull();
      for (const s of r.steps) {
        expect(s.error, s.what).toBeNull();
        expect(s.full, s.what).toBe(false);
      }
      const batch = (what: string) => r.steps.find((s) => s.what.startsWith(what))!.batch;
      expect(batch('add a service')).toMatch(/^-I KUBE-SERVICES 1 .*ns\/s121:http cluster IP/m);
      expect(batch('add a service')).not.toMatch(/^:KUBE-SERVICES /m);
      expect(batch('remove a service')).toMatch(/^-D KUBE-SERVICES .*ns\/s7:http cluster IP/m);
      expect(batch('remove a node port')).toMatch(/^-D KUBE-NODEPORTS /m);
      // Small filter chains (12 rules here) are rewritten rather than edited.
      expect(batch('a Local load balancer')).toMatch(/^\*filter\n(:KUBE-[A-Z-]+ - \[0:0\]\n)+/);
      expect(r.afterPartial).toMatch(/ns\/s40:http has no endpoints.* -j REJECT/);
      expect(batch('an endpoint moves')).not.toMatch(/^(-[DI] |:KUBE-SERVICES )/m);

      const nat = parseIptablesSave(r.afterPartial).tables.get('nat')!;
      expect(nat.chains.get('KUBE-SERVICES')!.rules.at(-1)!.comment).toBe('kubernetes service nodeports; NOTE: this must be the last rule in this chain');
      expect(r.full.error).toBeNull();
      expect(shape(r.afterPartial)).toEqual(shape(r.afterFull));
    });
  }
});
