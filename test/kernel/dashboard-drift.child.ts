/**
 * Runs inside a test network namespace (ip netns exec NS node this-file FLAVOR):
 * programs deploy/examples/ (plus 30 small services, so that adding or
 * removing one edits KUBE-SERVICES in place) with the real iptables runner, a
 * full then partial syncs (an endpoint change; a service added; a service
 * removed), and asks the dashboard's iptables view for drift against the real
 * kernel: after each partial sync untouched, then after someone deleted a
 * rule, added one, and created a chain in kproxy's namespace. Prints one JSON
 * report.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { realClock } from '../../server/clock.ts';
import { findDrift } from '../../server/dashboard/drift.ts';
import { IptablesView } from '../../server/dashboard/iptables/view.ts';
import { noYield } from '../../server/dashboard/yield.ts';
import { createIptablesRunner, type IptablesFlavor } from '../../server/kernel/iptables.ts';
import { hostInterfaces } from '../../server/kernel/netif.ts';
import { procSysctl } from '../../server/kernel/sysctl.ts';
import { createLogger } from '../../server/log.ts';
import type { BackendSyncResult } from '../../server/proxy/backend.ts';
import { createIptablesBackend } from '../../server/proxy/iptables/proxier.ts';
import { testConfig } from '../../server/proxy/iptables/testing.ts';
import type { EndpointSlice, Service } from '../../server/proxy/kube-objects.ts';
import type { SyncRecord } from '../../server/proxy/sync-loop.ts';
import { ep, makeService, makeSlice, objectsFromYaml, stateFromObjects } from '../../server/proxy/testing.ts';

const flavor = process.argv[2] as IptablesFlavor;
const examples = join(import.meta.dirname, '../../deploy/examples');
const objects = readdirSync(examples)
  .filter((f) => /\.ya?ml$/.test(f))
  .sort()
  .flatMap((f) => objectsFromYaml(f, readFileSync(join(examples, f), 'utf8')));
const extraService = (i: number): Service =>
  makeService('bulk', `b${i}`, {
    clusterIP: `10.96.200.${i + 1}`,
    ...(i % 2 ? { type: 'NodePort' } : {}),
    ports: [{ name: 'http', port: 80, protocol: 'TCP', ...(i % 2 ? { nodePort: 31000 + i } : {}) }],
  });
const extraSlice = (i: number): EndpointSlice => makeSlice('bulk', `b${i}`, `b${i}-1`, [ep(`10.244.200.${i + 1}`, { nodeName: 'node-b' })], [{ name: 'http', port: 8080, protocol: 'TCP' }]);
for (let i = 0; i < 30; i++) objects.push(extraService(i), extraSlice(i));
const state = stateFromObjects('node-a', objects);
const runner = await createIptablesRunner({ family: 'IPv4', flavor });
const backend = createIptablesBackend({
  config: testConfig({ clusterCIDRs: ['10.244.0.0/16'], iptables: { masqueradeAll: false, masqueradeBit: 14, localhostNodePorts: true, syncPeriodMs: 30_000, minSyncPeriodMs: 1_000 } }),
  nodeName: 'node-a',
  family: 'IPv4',
  runner,
  netif: hostInterfaces(),
  sysctl: procSysctl(),
  clock: realClock,
  logger: createLogger({ write: () => {} }),
});
await backend.init!();
const view = new IptablesView({ runner, simulated: false, pause: noYield });
let seq = 0;
const note = (r: BackendSyncResult) => view.noteSync({ seq: ++seq, ok: !r.error, finishedAt: Date.now() } as SyncRecord, r);

note(await backend.sync({ state: state.checkout(), forceFull: true }));
const slice = objects.find((o) => o.kind === 'EndpointSlice' && o.metadata?.name?.startsWith('api-')) as EndpointSlice;
state.onEndpointSlice(slice, null);
note(await backend.sync({ state: state.checkout(), forceFull: false }));

const drift = async () => findDrift((await view.intended())!, await view.read(), view, noYield);
const clean = await drift();

// Services come and go through partial syncs that edit the shared chains in place (-I / -D).
state.onService(null, extraService(31));
state.onEndpointSlice(null, extraSlice(31));
const added = await backend.sync({ state: state.checkout(), forceFull: false });
note(added);
const afterAdd = await drift();
state.onService(extraService(3), null);
state.onEndpointSlice(extraSlice(3), null);
state.onService(extraService(31), null);
state.onEndpointSlice(extraSlice(31), null);
const removed = await backend.sync({ state: state.checkout(), forceFull: false });
note(removed);
const afterRemove = await drift();
const edits = {
  added: { full: added.full, error: added.error?.message ?? null, inserts: (added.batch ?? '').match(/^-I \S+/gm) ?? [] },
  removed: { full: removed.full, error: removed.error?.message ?? null, deletes: (removed.batch ?? '').match(/^-D \S+/gm) ?? [] },
};

const tables = await view.read();
const svc = [...tables.tables.get('nat')!.chains.values()].find((c) => c.name.startsWith('KUBE-SVC-') && c.rules.length >= 2)!;
const ipt = (...args: string[]) => execFileSync(`iptables-${flavor}`, args);
ipt('-t', 'nat', '-D', svc.name, '1');
ipt('-t', 'nat', '-A', 'KUBE-MARK-MASQ', '-j', 'LOG');
ipt('-t', 'nat', '-N', 'KUBE-SVC-ROGUEROGUEROGUE1');
ipt('-t', 'filter', '-D', 'INPUT', '-j', 'KUBE-FIREWALL');
const tampered = await drift();

process.stdout.write(JSON.stringify({ clean, afterAdd, afterRemove, edits, tampered, svc: svc.name, removed: svc.rules[0].spec, intendedChains: (await view.intended())!.chainCount }));
