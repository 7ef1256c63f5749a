import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { silentLogger } from '../../log.ts';
import { cleanupSummary } from '../backend.ts';
import { cleanupIptables } from './cleanup.ts';

/** IPTABLES_MODE_NODE: what the iptables mode leaves on a node (its fixed and service chains, jumps and canaries), as iptables-save prints it. */
const IPTABLES_MODE_NODE = readFileSync(join(import.meta.dirname, 'testdata', 'iptables-mode-node.rules'), 'utf8');

async function programmed(kernel = new SimulatedIptables()): Promise<SimulatedIptables> {
  await kernel.restore(IPTABLES_MODE_NODE);
  return kernel;
}

/** Someone else's rules, which cleanup must leave alone. */
async function addForeignRules(k: SimulatedIptables): Promise<void> {
  await k.restore(
    '*filter\n:DOCKER-USER - [0:0]\n-A DOCKER-USER -j RETURN\n-A FORWARD -j DOCKER-USER\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n*nat\n:DOCKER - [0:0]\n-A PREROUTING -j DOCKER\nCOMMIT\n',
  );
}

function kubeChains(k: SimulatedIptables): string[] {
  return ['filter', 'nat', 'mangle'].flatMap((t) =>
    k
      .chains(t)
      .filter((c) => c.startsWith('KUBE-'))
      .map((c) => `${t}/${c}`),
  );
}

describe('cleanup (--cleanup)', () => {
  it('removes every KUBE- chain and the jumps into them, in every table, and nothing else', async () => {
    const k = await programmed();
    await addForeignRules(k);
    const result = await cleanupIptables({ runners: [k], logger: silentLogger });
    expect(result.errors).toEqual([]);
    expect(kubeChains(k)).toEqual([]);
    for (const t of ['filter', 'nat']) for (const c of k.chains(t)) for (const r of k.rules(t, c)) expect(r).not.toContain('KUBE-');
    expect(k.rules('filter', 'FORWARD')).toEqual(['-j DOCKER-USER']);
    expect(k.rules('filter', 'INPUT')).toEqual(['-p tcp --dport 22 -j ACCEPT']);
    expect(k.rules('nat', 'PREROUTING')).toEqual(['-j DOCKER']);
    expect(k.rules('filter', 'DOCKER-USER')).toEqual(['-j RETURN']);
    expect(Object.keys(result.removed).sort()).toEqual(['filter', 'mangle', 'nat']);
    expect(result.removed.mangle).toBe(1);
    expect(cleanupSummary(result)).toMatch(/^removed filter \d+, nat \d+, mangle 1$/);
  });

  it('is idempotent', async () => {
    const k = await programmed();
    await cleanupIptables({ runners: [k], logger: silentLogger });
    const again = await cleanupIptables({ runners: [k], logger: silentLogger });
    expect(again).toEqual({ removed: {}, errors: [] });
    expect(cleanupSummary(again)).toBe('nothing to remove');
  });

  it('leaves kubelet its own chains (and its KUBE-FIREWALL) while kubelet manages the node', async () => {
    const k = await programmed();
    await k.restore('*mangle\n:KUBE-KUBELET-CANARY - [0:0]\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n');
    await cleanupIptables({ runners: [k], logger: silentLogger });
    expect(kubeChains(k).sort()).toEqual(['filter/KUBE-FIREWALL', 'mangle/KUBE-IPTABLES-HINT', 'mangle/KUBE-KUBELET-CANARY']);
    expect(k.rules('filter', 'INPUT')).toEqual(['-j KUBE-FIREWALL']);
  });

  it('cleans every flavour and family it is given', async () => {
    const legacy = await programmed(new SimulatedIptables({ flavor: 'legacy' }));
    const nft6 = new SimulatedIptables({ flavor: 'nft', family: 'IPv6' });
    await nft6.restore('*nat\n:KUBE-SERVICES - [0:0]\n-A OUTPUT -j KUBE-SERVICES\nCOMMIT\n');
    await cleanupIptables({ runners: [legacy, nft6], logger: silentLogger });
    expect(kubeChains(legacy)).toEqual([]);
    expect(kubeChains(nft6)).toEqual([]);
  });

  it('reports a table it could not clean and carries on with the others', async () => {
    const k = await programmed();
    const restore = k.restore.bind(k);
    k.restore = async (input, opts) => {
      if (input.startsWith('*nat')) throw new Error('xtables lock held');
      return restore(input, opts);
    };
    const result = await cleanupIptables({ runners: [k], logger: silentLogger });
    expect(result.errors.map((e) => e.message)).toEqual([expect.stringMatching(/removing chains from table nat failed: xtables lock held/)]);
    expect(k.chains('filter').filter((c) => c.startsWith('KUBE-'))).toEqual([]);
    expect(result.removed.filter).toBeGreaterThan(0);
  });
});
