import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { KernelChain } from '../../server/dashboard/kernel-view.ts';
import type { RawFinding } from '../../server/dashboard/drift.ts';
import type { FlowEntry } from '../../server/dashboard/protocol.ts';
import { tiers } from '../tiers.ts';

/**
 * The dashboard's nftables view against real nft: the listing of the table
 * kproxy wrote (read as JSON by the proxier's own reader) holds no drift after
 * a full and a partial sync, shows the sets and maps with their elements and a
 * service port's flow through them, reads a hand-added counter's figures, and
 * finds a deleted element, a rule added to kproxy's chain and a foreign chain.
 */
const CHILD = join(import.meta.dirname, 'dashboard-nftables.child.ts');

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

describe.skipIf(!tiers().kernel.ok)('dashboard nftables view against the real kernel', () => {
  it("lists kproxy's table without drift, follows a port through its map elements, reads counters and finds tampering", () => {
    const ns = `kpt-nftview-${process.pid}`;
    execFileSync('ip', ['netns', 'add', ns]);
    namespaces.push(ns);
    const out = execFileSync('ip', ['netns', 'exec', ns, process.execPath, CHILD], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 90_000 });
    const r = JSON.parse(out) as {
      errors: string[];
      partial: { full: boolean };
      clean: RawFinding[];
      chains: string[];
      services: [string, string | null][];
      serviceIps: string[];
      flows: FlowEntry[];
      counted: KernelChain;
      tampered: RawFinding[];
      intendedChains: number;
      svc: string;
      clusterIP: string;
    };
    expect(r.errors).toEqual([]);
    expect(r.partial.full).toBe(false);
    expect(r.intendedChains).toBeGreaterThan(30);
    expect(r.clean).toEqual([]);
    expect(r.chains.slice(0, 3)).toEqual(['filter-forward', 'filter-input', 'filter-output']);
    expect(r.chains).toEqual(expect.arrayContaining(['services', '@service-ips', '@service-nodeports', '@firewall-ips', '@cluster-ips']));
    expect(r.services[0]).toEqual(['ip daddr . meta l4proto . th dport vmap @service-ips', '@service-ips']);
    expect(r.serviceIps).toContain(`${r.clusterIP} . tcp . 443 : goto ${r.svc}`);
    expect(r.flows.map((f) => [f.kind, f.path[0], f.outcome])).toEqual([
      ['clusterIP', '@service-ips', 'endpoints'],
      ['nodePort', '@service-nodeports', 'endpoints'],
      ['loadBalancerIP', '@firewall-ips', 'endpoints'],
    ]);
    expect(r.counted).toMatchObject({ packets: 12, bytes: 720 });
    expect(r.counted.rules[0]).toMatchObject({ spec: 'counter packets 12 bytes 720', packets: 12, bytes: 720 });
    expect(r.tampered.map((f) => `${f.kind} ${f.chain}`).sort()).toEqual(['missing-rule @cluster-ips', `unexpected-chain by-hand`, `unexpected-rule ${r.svc}`].sort());
  });
});
