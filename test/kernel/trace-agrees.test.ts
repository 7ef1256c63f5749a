import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readSaveOutput } from '../../server/dashboard/iptables/tables.ts';
import type { TraceResult, TraceStep } from '../../server/dashboard/protocol.ts';
import { parseNftTableJson } from '../../server/kernel/nft-listing.ts';
import { tiers } from '../tiers.ts';
import { diagnosed } from './harness/diagnostics.ts';
import { curlIn } from './harness/kproxy.ts';
import { serviceCIDRObject } from './harness/manifests.ts';
import { nsRun } from './harness/netns.ts';
import { NftTraceMonitor, tracedChains, type TracedChain } from './harness/nft-trace.ts';
import { PODS, POD_TCP_PORT, POD_UDP_PORT, type PodName } from './harness/plan.ts';
import { TestCluster } from './harness/topology.ts';
import { MATRIX_ROWS, MATRIX_SERVICES, SERVICE_CIDR, type MatrixRow } from './harness/trace-matrix.ts';

/**
 * The packet tracer agrees with the kernel. For every row of the behaviour
 * matrix (trace-matrix.ts) on a live node-a, in iptables mode (nft flavour)
 * and nftables mode: `kproxy trace --json` run inside node-a says what will
 * happen; then the packet is sent for real with the kernel's own tracing on
 * (nftrace + nft monitor trace, which sees iptables-nft's chains too), and
 * - the chains the kernel reports are the tracer's path (with the steps of the
 *   endpoint that answered, for a DNAT), and
 * - the packet's fate is the verdict: answered by one of the tracer's
 *   endpoints (dnat), refused at once (reject), no answer (drop), or answered
 *   by no backend (none; accept: the node's own health check server).
 * Empty built-in chains are left out on both sides: they decide nothing.
 */

/** DROP_WAIT_MS: a dropped connection attempt is given this long (a SYN is retransmitted after 1 s). */
const DROP_WAIT_MS = 900;

const MODES = [
  { mode: 'iptables', table: (t: string) => t === 'nat' || t === 'filter', kproxy: [] as string[] },
  { mode: 'nftables', table: (t: string) => t === 'kube-proxy', kproxy: ['--proxy-mode', 'nftables'] },
] as const;

const PORT_OF: Record<string, number> = { tcp: POD_TCP_PORT, udp: POD_UDP_PORT };
const podOf = (name: string | undefined) => (name ? PODS[name as PodName] : undefined);

/** emptyBuiltins lists the base chains without rules in node-a's read of a mode. */
async function emptyBuiltins(c: TestCluster, mode: string): Promise<Set<string>> {
  const out = new Set<string>();
  if (mode === 'iptables') {
    const read = await readSaveOutput(await nsRun(c.ns.nodeA, ['iptables-nft-save']), async () => {});
    for (const t of read.tables.values()) for (const ch of t.chains.values()) if (ch.builtin && ch.rules.length === 0) out.add(`${t.name}/${ch.name}`);
  } else {
    const t = parseNftTableJson(await nsRun(c.ns.nodeA, ['nft', '-j', 'list', 'table', 'ip', 'kube-proxy']), 'ip', 'kube-proxy');
    for (const ch of t.chains.values()) if (ch.base && ch.rules.length === 0) out.add(`kube-proxy/${ch.name}`);
  }
  return out;
}

/**
 * tracerChains is the tracer's way for one outcome as the kernel's trace
 * reports it: the kernel names a chain when one of its rules matched (with
 * any verdict, continue included) and a base chain whose policy applied; it
 * says nothing of a regular chain the packet left by its end. Chains in order,
 * repeats folded, map elements (the tracer's own steps) left out.
 */
function tracerChains(steps: readonly TraceStep[]): TracedChain[] {
  const out: TracedChain[] = [];
  for (const s of steps) {
    if (s.chain.startsWith('@') || (s.rule === null && !s.verdict.startsWith('policy'))) continue;
    const last = out.at(-1);
    if (last?.table === s.table && last.chain === s.chain) continue;
    out.push({ table: s.table, chain: s.chain });
  }
  return out;
}

interface Fate {
  outcome: string;
  backend?: string;
  http?: number;
}

describe.skipIf(!tiers().kernel.ok).each(MODES)('the packet tracer agrees with the kernel ($mode mode)', ({ mode, table, kproxy }) => {
  let cluster: TestCluster | undefined;
  let monitor: NftTraceMonitor;
  let empty: Set<string>;
  const spec = (body: (c: TestCluster) => Promise<void>) => () => diagnosed(cluster, () => body(cluster!));

  beforeAll(async () => {
    cluster = await TestCluster.create();
    cluster.manifests.write('service-cidr', [serviceCIDRObject('kubernetes', [SERVICE_CIDR])]);
    for (const s of MATRIX_SERVICES) cluster.manifests.writeService(s.spec, s.endpoints);
    await cluster.startKproxy('nft', kproxy);
    monitor = await NftTraceMonitor.start(cluster.ns.nodeA, cluster.processes);
    empty = await emptyBuiltins(cluster, mode);
  });

  afterAll(async () => {
    await cluster?.destroy();
  });

  /** traceCli runs `kproxy trace --json` inside node-a (the mode found from the rules it holds). */
  async function traceCli(c: TestCluster, r: MatrixRow): Promise<TraceResult> {
    const res = await c.kproxy.command(['trace', '--proto', r.proto, '--src', r.sender.ip, '--dst', `${r.dst}:${r.port}`, '--from', r.from, '--json']);
    if (res.code !== 0) throw new Error(`kproxy trace exited ${res.code}: ${res.stderr}`);
    return JSON.parse(res.stdout) as TraceResult;
  }

  /** send sends the row's packet for real and returns its fate and the chains the kernel traced it through. */
  async function send(c: TestCluster, r: MatrixRow, expectAnswer: boolean): Promise<{ fate: Fate; chains: TracedChain[] }> {
    const since = await monitor.watch(r.proto, r.sender.ip, r.dst, r.port);
    const client = c.client(r.sender.ns);
    const target = { host: r.dst, port: r.port, ...(r.sender.ns === 'client' ? { from: r.sender.ip } : {}), timeoutMs: expectAnswer ? 2000 : DROP_WAIT_MS };
    let fate: Fate;
    if (r.name === 'health-check-node-port') {
      const a = await curlIn(c.ns.client, `http://${r.dst}:${r.port}/`);
      fate = { outcome: a.status ? 'http' : 'none', http: a.status };
    } else {
      const t = r.proto === 'udp' ? await client.udp(target) : await client.tcp(target);
      fate = { outcome: t.attempts[0].outcome, backend: t.attempts[0].name };
    }
    const lines = await monitor.firstTrace(since);
    await monitor.unwatch();
    const chains = tracedChains(lines).filter((x) => table(x.table) && !empty.has(`${x.table}/${x.chain}`));
    return { fate, chains };
  }

  /** agree checks one trace against one real packet. */
  function agree(r: MatrixRow, t: TraceResult, fate: Fate, chains: TracedChain[]): void {
    const verdict = r.verdict[mode];
    expect(t.verdict, `${r.name}: ${t.reason}`).toBe(verdict);
    let steps: readonly TraceStep[] = t.path;
    switch (verdict) {
      case 'dnat': {
        expect(fate.outcome, r.name).toBe('ok');
        const pod = podOf(fate.backend)!;
        expect(r.backends, r.name).toContain(fate.backend);
        const ep = t.endpoints.find((e) => e.address === `${pod.ip}:${PORT_OF[r.proto]}`);
        expect(ep, `${r.name}: ${fate.backend} answered; the tracer's endpoints are ${t.endpoints.map((e) => e.address).join(', ')}`).toBeDefined();
        steps = [...t.path, ...ep!.path];
        break;
      }
      case 'reject':
        expect(fate.outcome, r.name).toBe('refused');
        break;
      case 'drop':
        expect(fate.outcome, r.name).toBe('timeout');
        break;
      case 'accept':
      case 'none':
        // Not DNATed: no backend answers. The health check port is the node's own server.
        expect(fate.backend, r.name).toBeUndefined();
        if (r.name === 'health-check-node-port') expect(fate.http, r.name).toBeGreaterThan(0);
        break;
    }
    const mine = tracerChains(steps).filter((x) => !empty.has(`${x.table}/${x.chain}`));
    expect(chains, `${r.name}: the chains the kernel reported, against the tracer's`).toEqual(mine);
  }

  for (const r of MATRIX_ROWS) {
    it(
      `${r.name}: ${r.proto} ${r.sender.ip} → ${r.dst}:${r.port} from ${r.from} is ${r.verdict[mode]}`,
      spec(async (c) => {
        const t = await traceCli(c, r);
        expect(t.mode).toBe(mode);
        const { fate, chains } = await send(c, r, r.verdict[mode] === 'dnat');
        agree(r, t, fate, chains);
        if (r.name !== 'affinity') return;
        // The kernel now remembers the client: the tracer reads that (xt_recent lists, the affinity set's
        // elements) and follows it to the endpoint that answered, and so does the next connection.
        const again = await traceCli(c, r);
        const pod = podOf(fate.backend)!;
        expect(again.endpoints.map((e) => [e.address, e.probability])).toEqual([[`${pod.ip}:${POD_TCP_PORT}`, 1]]);
        const next = await send(c, r, true);
        expect(next.fate.backend).toBe(fate.backend);
        agree(r, again, next.fate, next.chains);
      }),
    );
  }

  it(
    'reads the mode and its rules through the real runners, and the JSON carries the contract fields',
    spec(async (c) => {
      const t = await traceCli(c, MATRIX_ROWS[0]);
      expect(Object.keys(t)).toEqual(expect.arrayContaining(['verdict', 'endpoints', 'masquerade', 'path', 'reason']));
      expect(t.simulated).toBe(false);
      expect(t.drift).toBeNull();
      expect(t.path.every((s) => s.table && s.chain && 'rule' in s && typeof s.packets === 'number')).toBe(true);
      // Counters are the kernel's (iptables keeps them per rule; kproxy's nftables rules have none, as kube-proxy's):
      // the earlier rows' packets went through nat PREROUTING's jump.
      if (mode === 'iptables') expect(t.path[0]).toMatchObject({ table: 'nat', chain: 'PREROUTING', packets: expect.any(Number) });
      if (mode === 'iptables') expect(t.path[0].packets).toBeGreaterThan(0);
    }),
  );
});
