/**
 * Runs inside a test network namespace (ip netns exec NS node this-file MODE
 * FLAVOR): programs a small cluster with the real iptables of FLAVOR (and,
 * in IPVS mode, the real ipset; IPVS itself and kube-ipvs0 simulated: this
 * kernel may have neither), verifies the full sync, then writes it again,
 * changes the kernel behind kproxy's back the way an operator or a broken
 * writer would, and verifies again. Prints one JSON report. Other programs'
 * rules (a Docker-like chain, rules in the built-in chains) are in the
 * namespace throughout; they must never count.
 */
import { execFileSync } from 'node:child_process';
import { FakeClock } from '../../server/clock-fake.ts';
import { chainCounts } from '../../server/kernel/iptables-counts.ts';
import { createIptablesRunner, type IptablesFlavor, type IptablesRunner } from '../../server/kernel/iptables.ts';
import { SimulatedIptables } from '../../server/kernel/iptables-simulated.ts';
import { createIpsetRunner } from '../../server/kernel/ipset.ts';
import { SimulatedIpset } from '../../server/kernel/ipset-simulated.ts';
import { SimulatedIpvs } from '../../server/kernel/ipvs-simulated.ts';
import { FakeNetInterfaces } from '../../server/kernel/netif-fake.ts';
import { SimulatedNetlink } from '../../server/kernel/netlink-simulated.ts';
import { SimulatedSockets } from '../../server/kernel/sockets-simulated.ts';
import { SimulatedSysctl } from '../../server/kernel/sysctl-simulated.ts';
import { silentLogger } from '../../server/log.ts';
import type { Backend } from '../../server/proxy/backend.ts';
import { createIptablesBackend } from '../../server/proxy/iptables/proxier.ts';
import { testConfig } from '../../server/proxy/iptables/testing.ts';
import { createIpvsBackend } from '../../server/proxy/ipvs/proxier.ts';
import { ipvsConfig } from '../../server/proxy/ipvs/testing.ts';
import type { EndpointSlice, Service } from '../../server/proxy/kube-objects.ts';
import type { SyncVerification } from '../../server/proxy/sync-verify.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../../server/proxy/testing.ts';
import { createUserspaceBackend } from '../../server/proxy/userspace/proxier.ts';
import { userspaceConfig } from '../../server/proxy/userspace/testing.ts';

const mode = process.argv[2] as 'iptables' | 'ipvs' | 'userspace';
const flavor = process.argv[3] as IptablesFlavor;
const iptables = (args: string[]) => execFileSync(`iptables-${flavor}`, args, { encoding: 'utf8' });

/** OTHERS: another program's rules (Docker-like); OTHERS_INTO_KPROXY: a chain of another program jumping into one of kproxy's, once it exists. */
const OTHERS = [
  '*filter',
  ':DOCKER-USER - [0:0]',
  '-A DOCKER-USER -j RETURN',
  '-A FORWARD -j DOCKER-USER',
  '-A INPUT -s 192.0.2.1/32 -j DROP',
  'COMMIT',
  '*nat',
  ':DOCKER - [0:0]',
  '-A DOCKER -i docker0 -j RETURN',
  '-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER',
  'COMMIT',
  '',
].join('\n');
const INTO = mode === 'userspace' ? 'KUBE-PORTALS-CONTAINER' : 'KUBE-MARK-MASQ';
const OTHERS_INTO_KPROXY = ['*nat', ':CNI-HOSTPORT - [0:0]', `-A CNI-HOSTPORT -m mark --mark 0x2000/0x2000 -j ${INTO}`, '-A PREROUTING -j CNI-HOSTPORT', 'COMMIT', ''].join('\n');

const objects: (Service | EndpointSlice)[] = [];
for (let i = 1; i <= 30; i++) {
  const nodePort = i % 3 === 0;
  const ports = [{ name: 'http', port: 80, protocol: i % 5 === 0 ? 'UDP' : 'TCP', ...(nodePort ? { nodePort: 30000 + i } : {}) }];
  objects.push(makeService('shop', `s${i}`, { clusterIP: `10.96.1.${i}`, ports, ...(nodePort ? { type: 'NodePort' } : {}), ...(i % 7 === 0 ? { sessionAffinity: 'ClientIP' } : {}) }));
  const eps = Array.from({ length: 1 + (i % 4) }, (_, e) => ep(`10.244.${i}.${e + 1}`, { nodeName: e === 0 ? 'node-a' : 'node-b' }));
  objects.push(makeSlice('shop', `s${i}`, `s${i}-1`, eps, [{ name: 'http', port: 8080, protocol: ports[0].protocol }]));
}
const clock = new FakeClock();

function backendFor(runner: IptablesRunner, sim: { ipset?: SimulatedIpset } = {}): { backend: Backend; ipvs?: SimulatedIpvs } {
  if (mode === 'iptables') {
    const netif = new FakeNetInterfaces();
    return {
      backend: createIptablesBackend({
        config: testConfig({ clusterCIDRs: ['10.244.0.0/16'] }),
        nodeName: 'node-a',
        family: 'IPv4',
        runner,
        netif,
        sysctl: new SimulatedSysctl({}),
        clock,
        logger: silentLogger,
      }),
    };
  }
  if (mode === 'ipvs') {
    const ipvs = new SimulatedIpvs();
    const backend = createIpvsBackend({
      config: ipvsConfig({ clusterCIDRs: ['10.244.0.0/16'] }),
      nodeName: 'node-a',
      family: 'IPv4',
      ipvs,
      ipset: sim.ipset ?? createIpsetRunner(),
      netlink: new SimulatedNetlink(),
      iptables: runner,
      sysctl: new SimulatedSysctl({}),
      clock,
      logger: silentLogger,
      cleanup: async () => ({ removed: {}, errors: [] }),
    });
    return { backend, ipvs };
  }
  const backend = createUserspaceBackend({
    config: userspaceConfig(),
    nodeName: 'node-a',
    family: 'IPv4',
    iptables: runner,
    sockets: new SimulatedSockets({ nodeAddress: '10.0.0.10' }),
    netif: new FakeNetInterfaces(),
    clock,
    logger: silentLogger,
    random: () => 0,
    cleanup: async () => ({ removed: {}, errors: [] }),
  });
  return { backend };
}

const brief = (v: SyncVerification) => ({ objects: v.objects, mismatchCount: v.mismatchCount, mismatches: v.mismatches, skipped: v.skipped ?? null });

const real = await createIptablesRunner({ family: 'IPv4', flavor });
await real.restore(OTHERS);
const { backend, ipvs } = backendFor(real);
const state = stateFromObjects('node-a', objects, clock);
const first = await backend.sync({ state: state.checkout(), forceFull: true });
// Another program's chain jumping into one of kproxy's, made after kproxy's chains exist.
await real.restore(OTHERS_INTO_KPROXY);
const second = await backend.sync({ state: state.checkout(), forceFull: true });
const clean = await backend.verify!();

// The same counts from the simulated kernel of this flavour, fed the same (the simulation is held to the kernel).
const twinKernel = new SimulatedIptables({ flavor });
await twinKernel.restore(OTHERS);
const twinIpset = new SimulatedIpset();
const twin = backendFor(twinKernel, { ipset: twinIpset });
await twin.backend.sync({ state: stateFromObjects('node-a', objects, new FakeClock()).checkout(), forceFull: true });
await twinKernel.restore(OTHERS_INTO_KPROXY);
await twin.backend.sync({ state: stateFromObjects('node-a', objects, new FakeClock()).checkout(), forceFull: true });
const ask = { tables: ['mangle', 'nat', 'filter'], own: (_t: string, c: string) => (c.startsWith('KUBE-') ? c : undefined) };
const kube = (c: Map<string, number>) => Object.fromEntries([...c].filter(([n]) => n.startsWith('KUBE-')).sort());
const countsOf = async (r: IptablesRunner) => {
  const c = await r.countChains!(ask);
  return { kind: c.kind, source: c.source, tables: Object.fromEntries([...c.tables].map(([t, counts]) => [t, kube(chainCounts(counts))])) };
};
const counts = { real: await countsOf(real), simulated: await countsOf(twinKernel) };
// Tables in the reader's order: sorted, so the two compare as data.
for (const c of [counts.real, counts.simulated]) c.tables = Object.fromEntries(Object.entries(c.tables).sort());
const sets =
  mode === 'ipvs' ? { real: Object.fromEntries([...(await createIpsetRunner().countEntries!())].sort()), simulated: Object.fromEntries([...(await twinIpset.countEntries())].sort()) } : null;

// Written once more, then changed behind kproxy's back before the verification.
const third = await backend.sync({ state: state.checkout(), forceFull: true });
const tampered: string[] = [];
if (mode === 'iptables') {
  const sep = iptables(['-t', 'nat', '-S']).match(/^-N (KUBE-SEP-\S+)$/m)![1];
  iptables(['-t', 'nat', '-D', sep, '1']);
  iptables(['-t', 'nat', '-D', 'PREROUTING', '-m', 'comment', '--comment', 'kubernetes service portals', '-j', 'KUBE-SERVICES']);
  iptables(['-t', 'nat', '-N', 'KUBE-SVC-TAMPEREDAAAAAAAAA']);
  tampered.push(sep);
} else if (mode === 'ipvs') {
  execFileSync('ipset', ['del', 'KUBE-CLUSTER-IP', '10.96.1.1,tcp:80']);
  iptables(['-t', 'filter', '-F', 'KUBE-IPVS-FILTER']);
  await ipvs!.restore('-d -t 10.96.1.2:80 -r 10.244.2.1:8080\n');
} else {
  iptables(['-t', 'nat', '-F', 'KUBE-PORTALS-CONTAINER']);
  iptables(['-t', 'filter', '-D', 'INPUT', '-m', 'comment', '--comment', 'Ensure that non-local NodePort traffic can flow', '-j', 'KUBE-NODEPORT-NON-LOCAL']);
}
const after = await backend.verify!();

const error = (r: { error?: { message: string } }) => r.error?.message ?? null;
process.stdout.write(JSON.stringify({ errors: [error(first), error(second), error(third)], clean: brief(clean), counts, sets, tampered, after: brief(after) }));
