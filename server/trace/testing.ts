import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { kernelTables, type KernelTable, type KernelTables } from '../dashboard/kernel-view.ts';
import { readSaveOutput } from '../dashboard/iptables/tables.ts';
import { nftKernelTable } from '../dashboard/nftables/tables.ts';
import type { KernelKind, TraceDrift } from '../dashboard/protocol.ts';
import { parseNftTableJson } from '../kernel/nft-listing.ts';
import { FakeClock } from '../clock-fake.ts';
import { IpvsView } from '../dashboard/ipvs/view.ts';
import { runGoldenCase } from '../proxy/golden.ts';
import { ipvsGolden } from '../proxy/ipvs/golden.ts';
import type { ServiceNames } from './mode.ts';
import { serviceNames } from './service-index.ts';
import type { NodeFacts } from './packet.ts';
import type { TraceRead } from './tracer.ts';
import { objectsFromYaml, stateFromObjects } from '../proxy/testing.ts';

/**
 * Test helpers: a recorded kernel read (testdata/<case>/) as the tracer's
 * input. A case holds what the dashboard would read: iptables-save.txt
 * (`iptables-save -c`, IPv4; ip6tables-save.txt for IPv6), nft-list.json
 * (`nft -j list table ip kube-proxy`), or input.yaml (manifests IPVS mode's
 * simulated kernel is programmed with, as an IPVS golden case: proxy/ipvs/golden.ts); addresses.json (the node's addresses); packets.yaml (what
 * to trace); optional facts.yaml ({ mode, nodeIPs: [...], recent: { LIST: [sources] }, drift: [...] }).
 */

export interface TraceCase {
  readonly name: string;
  readonly read: TraceRead;
  readonly packets: readonly { name: string; proto: string; src: string; dst: string; from?: string }[];
}

const pause = async () => {};

export async function loadCase(dir: string, extra?: Partial<TraceRead>): Promise<TraceCase> {
  const file = (f: string) => join(dir, f);
  const tables = new Map<string, KernelTable>();
  let mode: KernelKind = 'iptables';
  if (existsSync(file('iptables-save.txt'))) {
    for (const [name, t] of (await readSaveOutput(readFileSync(file('iptables-save.txt'), 'utf8'), pause)).tables) tables.set(name, t);
  }
  if (existsSync(file('ip6tables-save.txt'))) {
    for (const [name, t] of (await readSaveOutput(readFileSync(file('ip6tables-save.txt'), 'utf8'), pause)).tables) tables.set(`ip6-${name}`, { ...t, name: `ip6-${name}` });
  }
  if (existsSync(file('nft-list.json'))) {
    mode = 'nftables';
    const listed = parseNftTableJson(readFileSync(file('nft-list.json'), 'utf8'), 'ip', 'kube-proxy');
    tables.set('kube-proxy', await nftKernelTable('kube-proxy', listed, { pause }));
  }
  let names: ServiceNames | null = null;
  if (existsSync(file('input.yaml'))) {
    // IPVS mode: the manifests programmed into the mode's simulated kernel, read as the dashboard reads it.
    mode = 'ipvs';
    const run = await runGoldenCase(ipvsGolden, file('input.yaml'));
    const view = new IpvsView({ backend: run.harness.backend, simulated: true, clock: new FakeClock(), pause });
    for (const [name, t] of (await view.read()).tables) tables.set(name, t);
    // IPVS objects carry no names: the model the daemon would hold names them.
    const text = readFileSync(file('input.yaml'), 'utf8');
    names = serviceNames(
      stateFromObjects('node-a', objectsFromYaml(file('input.yaml'), text))
        .checkout()
        .services.values(),
    );
  }
  const facts = existsSync(file('facts.yaml'))
    ? (parse(readFileSync(file('facts.yaml'), 'utf8')) as { recent?: Record<string, string[]>; drift?: TraceDrift[]; mode?: KernelKind; nodeIPs?: string[] })
    : {};
  if (facts.mode) mode = facts.mode;
  const addresses = JSON.parse(readFileSync(file('addresses.json'), 'utf8')) as string[];
  const nodeFacts: NodeFacts = {
    localAddresses: new Set(addresses),
    ...(facts.nodeIPs ? { nodeIPs: facts.nodeIPs } : {}),
    ...(facts.recent ? { recentEntries: (list: string) => (facts.recent![list] ? new Set(facts.recent![list]) : new Set<string>()) } : {}),
  };
  const read: TraceRead = { mode, read: kernelTables(tables) as KernelTables, readAt: null, simulated: false, facts: nodeFacts, drift: facts.drift ?? null, names, ...extra };
  const packets = parse(readFileSync(file('packets.yaml'), 'utf8')) as TraceCase['packets'];
  return { name: dir, read, packets };
}
