/**
 * iptables-build measures kproxy's own share of an iptables sync (building the
 * restore text, no kernel): a full sync of N services x M endpoints, then a
 * partial sync after one service changed. Run: node test/bench/iptables-build.ts [N] [M]
 * The kernel runner here accepts any input instantly, so the numbers are build time only.
 * CPU: the main thread's CPU time (process.threadCpuUsage), steadier than the
 * wall clock on a busy machine (V8's helper threads, which run concurrent
 * marking, left out).
 */
import { realClock } from '../../server/clock.ts';
import type { IptablesRunner } from '../../server/kernel/iptables.ts';
import { FakeNetInterfaces } from '../../server/kernel/netif-fake.ts';
import { SimulatedSysctl } from '../../server/kernel/sysctl-simulated.ts';
import { silentLogger } from '../../server/log.ts';
import { createIptablesBackend } from '../../server/proxy/iptables/proxier.ts';
import { testConfig } from '../../server/proxy/iptables/testing.ts';
import { ProxyState } from '../../server/proxy/proxy-state.ts';
import { ep, makeService, makeSlice } from '../../server/proxy/testing.ts';

const N = Number(process.argv[2] ?? 10_000);
const M = Number(process.argv[3] ?? 10);

const nullRunner: IptablesRunner = {
  family: 'IPv4',
  flavor: 'nft',
  hasRandomFully: true,
  async restore() {},
  async save() {
    return '';
  },
  async ensureChain() {
    return true;
  },
  async chainExists() {
    return true;
  },
  async checkRule() {
    return true;
  },
  async insertRule() {},
  async deleteRule() {
    return true;
  },
  async flushChain() {},
  async deleteChain() {},
};

const ipOf = (i: number) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
const slice = (s: number, gen: number) =>
  makeSlice(
    `ns${s % 100}`,
    `svc${s}`,
    `svc${s}-1`,
    Array.from({ length: M }, (_, e) => ep(ipOf(1 + s * M + e + gen), { nodeName: e === 0 ? 'node-a' : 'node-b' })),
    [{ name: 'http', port: 8080, protocol: 'TCP' }],
  );

const t0 = performance.now();
const state = new ProxyState({ family: 'IPv4', nodeName: 'node-a', clock: realClock });
for (let s = 0; s < N; s++) {
  state.onService(null, makeService(`ns${s % 100}`, `svc${s}`, { clusterIP: `172.${16 + ((s >> 16) & 15)}.${(s >> 8) & 255}.${s & 255}`, ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
  state.onEndpointSlice(null, slice(s, 0));
}
state.onSynced('Service');
state.onSynced('EndpointSlice');
const checkout = state.checkout();
const modelMs = performance.now() - t0;

const backend = createIptablesBackend({
  config: testConfig({ clusterCIDRs: ['10.0.0.0/8'] }),
  nodeName: 'node-a',
  family: 'IPv4',
  runner: nullRunner,
  netif: new FakeNetInterfaces(),
  sysctl: new SimulatedSysctl({ 'net/ipv4/conf/all/route_localnet': '1' }),
  clock: realClock,
  logger: silentLogger,
});

/** cpuMs: the main thread's CPU time so far. */
const cpuMs = () => {
  const u = process.threadCpuUsage();
  return (u.user + u.system) / 1000;
};
const heap0 = process.memoryUsage().heapUsed;
let c0 = cpuMs();
const full = await backend.sync({ state: checkout, forceFull: true });
const fullCpu = cpuMs() - c0;
const heap1 = process.memoryUsage().heapUsed;
c0 = cpuMs();
const full2 = await backend.sync({ state: state.checkout(), forceFull: true });
const full2Cpu = cpuMs() - c0;
state.onEndpointSlice(null, slice(7, 1));
const partial = await backend.sync({ state: state.checkout(), forceFull: false });
const partials: number[] = [];
const partialCpus: number[] = [];
for (let i = 0; i < 20; i++) {
  state.onEndpointSlice(null, slice(100 + i, 1));
  c0 = cpuMs();
  partials.push((await backend.sync({ state: state.checkout(), forceFull: false })).buildMs);
  partialCpus.push(cpuMs() - c0);
}
partials.sort((a, b) => a - b);
partialCpus.sort((a, b) => a - b);

const mb = (n: number) => (n / 1024 / 1024).toFixed(1);
console.log(`services=${N} endpoints/service=${M} (model set-up ${modelMs.toFixed(0)} ms, not kproxy-iptables' share)`);
console.log(`full sync (cold):  build ${full.buildMs.toFixed(0)} ms (CPU ${fullCpu.toFixed(0)} ms), ${full.linesWritten} lines, ${mb(full.bytesWritten)} MiB, heap +${mb(heap1 - heap0)} MiB`);
console.log(`full sync (warm):  build ${full2.buildMs.toFixed(0)} ms (CPU ${full2Cpu.toFixed(0)} ms)`);
console.log(
  `partial sync:      build ${partial.buildMs.toFixed(1)} ms, ${partial.linesWritten} lines, ${mb(partial.bytesWritten)} MiB; median of 20: ${partials[10].toFixed(1)} ms (CPU ${partialCpus[10].toFixed(1)} ms), max ${partials[19].toFixed(1)} ms`,
);
if (full.error || partial.error) throw full.error ?? partial.error;
