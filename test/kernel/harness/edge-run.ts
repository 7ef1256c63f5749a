import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { familyTable } from '../../../server/dashboard/family-view.ts';
import { iptablesRuleKey } from '../../../server/dashboard/iptables/rule-key.ts';
import { readSaveOutput } from '../../../server/dashboard/iptables/tables.ts';
import { kernelTables, type KernelTable, type KernelTables } from '../../../server/dashboard/kernel-view.ts';
import type { KernelKind, TraceResult } from '../../../server/dashboard/protocol.ts';
import { parseIptablesSave } from '../../../server/kernel/iptables-save-parser.ts';
import type { ProxyConfig } from '../../../server/config/types.ts';
import { execFile } from '../../../server/kernel/exec.ts';
import type { IPFamily } from '../../../server/net/ip.ts';
import type { ServiceNames } from '../../../server/trace/mode.ts';
import { traceKernel } from '../../../server/trace/tracer.ts';
import { userspaceConfig } from '../../../server/proxy/userspace/testing.ts';
import {
  clusterCIDRs,
  edgeSeeds,
  endpointsEdgeCase,
  expectations,
  fixedEdgeCase,
  limitEdgeCases,
  nodeIPs,
  randomEdgeCase,
  type EdgeCase,
  type EdgeDestination,
  type EdgeExpectation,
} from './edge-cluster.ts';
import { addNamespace, deleteNamespace, HARNESS_PREFIX } from './netns.ts';

/**
 * edge-run: what the edge-case tests of every mode share: naming a case so a
 * child process can rebuild it ("fixed:NAME", "seed:N"), running a child in a
 * fresh network namespace, iptables listings reduced to what the kernel keeps
 * (so flavours and the simulated kernel compare), and checking a kernel read
 * against a case's expectations with the packet tracer.
 */

/**
 * edgeCaseById rebuilds a case from its id: "fixed:NAME", "seed:N",
 * "limit:NAME" (limitEdgeCases) or "endpoints:N" ("endpoints:N:dual"), one
 * Service with N endpoints, for probing sizes past the fixed ones.
 */
export function edgeCaseById(id: string): EdgeCase {
  const n = /^endpoints:(\d+)(:dual)?$/.exec(id);
  if (n) return endpointsEdgeCase(Number(n[1]), n[2] ? ['IPv4', 'IPv6'] : ['IPv4']);
  const m = /^(fixed|seed|limit):(.+)$/.exec(id);
  if (!m) throw new Error(`edge case id ${JSON.stringify(id)} is not "fixed:NAME", "seed:N", "limit:NAME" or "endpoints:N"`);
  if (m[1] === 'limit') {
    const c = limitEdgeCases().find((x) => x.name === m[2]);
    if (!c) throw new Error(`no limit edge case ${JSON.stringify(m[2])}`);
    return c;
  }
  return m[1] === 'fixed' ? fixedEdgeCase(m[2]) : randomEdgeCase(Number(m[2]));
}

/** edgeLinks: a case's node as SimulatedNetlink's links: loopback, and eth0 with the node's InternalIPs (node ports answer there). */
export function edgeLinks(c: EdgeCase): Record<string, string[]> {
  return { lo: ['127.0.0.1/8', '::1/128'], eth0: nodeIPs(c).map((ip) => `${ip}/${ip.includes(':') ? 64 : 24}`) };
}

/**
 * userspaceEdgeConfig: userspace mode for a case, its proxy sockets on ports
 * 40000-59999 (above every node port), so the real run and the simulated one
 * (both with random = 0) give each service port the same proxy port.
 */
export function userspaceEdgeConfig(c: EdgeCase): ProxyConfig {
  return userspaceConfig({ portRange: { base: 40000, size: 20000 } }, { clusterCIDRs: clusterCIDRs(c) });
}

/** UserspaceRun is what the userspace child reports: a FamilyRun and the proxy sockets it opened. */
export interface UserspaceRun extends FamilyRun {
  readonly sockets: readonly { id: string; pool: string; port: number; endpoints: readonly string[] }[];
  readonly bindFailures: Readonly<Record<string, number>>;
}

/** FamilyRun is what a child reports for one IP family's backend. */
export interface FamilyRun {
  readonly family: IPFamily;
  readonly error: string | null;
  /** skipped: service ports the backend left out, with why. */
  readonly skipped: Record<string, string>;
  /** invalid: objects kproxy's model refused, with why. */
  readonly invalid: Record<string, string>;
  /** ms: the sync's wall time; applyMs: its time in the kernel's programs. */
  readonly ms: number;
  readonly applyMs: number;
  readonly lines: number;
  readonly bytes: number;
  /** save: what iptables-save lists afterwards (the mode's own reads for other runners). */
  readonly save: string;
}

let seq = 0;

/**
 * runChildInNamespace runs `node CHILD ...args OUT` inside a fresh network
 * namespace (kpt-<pid>-edge-…), reads the JSON it wrote to OUT, and removes
 * the namespace and the file whatever happens. The child is ended after
 * timeoutMs (default 240 s, within the tests' 300 s), so a hung writer fails
 * its test without outliving it.
 */
export async function runChildInNamespace<T>(child: string, args: readonly string[], opts: { timeoutMs?: number; env?: Record<string, string> } = {}): Promise<T> {
  const ns = `${HARNESS_PREFIX}edge-${seq++}`;
  const dir = mkdtempSync(join(tmpdir(), `kpt-${process.pid}-edge-`));
  const out = join(dir, 'report.json');
  await addNamespace(ns);
  try {
    const env = Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`);
    const r = await execFile('ip', ['netns', 'exec', ns, 'env', ...env, process.execPath, child, ...args, out], { timeoutMs: opts.timeoutMs ?? 240_000 });
    if (r.code !== 0) throw new Error(`${child} ${args.join(' ')} exited ${r.code}: ${(r.stderr || r.stdout).slice(-4000)}`);
    return JSON.parse(readFileSync(out, 'utf8')) as T;
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await deleteNamespace(ns);
  }
}

/**
 * iptablesShape reduces an iptables-save listing to what the kernel keeps of
 * it, comparable across flavours and with the simulated kernel: tables in
 * order, chains by name (the flavours list them in different orders; kproxy
 * fixes none), built-in chains that hold nothing and accept left out (a
 * flavour lists the base chains of every table it touched), counters
 * dropped, each rule as iptablesRuleKey (the kernel's own spelling and match
 * order), rules kept in chain order (which decides what a packet meets).
 */
export function iptablesShape(save: string, tables: readonly string[] = ['filter', 'nat', 'mangle']): string {
  const dump = parseIptablesSave(save);
  const out: string[] = [];
  for (const name of tables) {
    const t = dump.tables.get(name);
    if (!t) continue;
    const chains = [...t.chains.values()].filter((c) => !(c.builtin && c.rules.length === 0 && (c.policy ?? 'ACCEPT') === 'ACCEPT'));
    if (chains.length === 0) continue;
    out.push(`*${name}`);
    for (const c of chains.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      out.push(`:${c.name} ${c.builtin ? (c.policy ?? 'ACCEPT') : '-'}`);
      for (const r of c.rules) out.push(`-A ${c.name} ${iptablesRuleKey(r.spec)}`);
    }
  }
  return out.join('\n') + '\n';
}

/** firstDifference names the first line where two shapes differ, with a few lines around it. */
export function firstDifference(a: string, b: string, context = 3): string | null {
  if (a === b) return null;
  const x = a.split('\n');
  const y = b.split('\n');
  let i = 0;
  while (i < x.length && i < y.length && x[i] === y[i]) i++;
  const show = (lines: string[]) => lines.slice(Math.max(0, i - context), i + context).join('\n    ');
  return `first difference at line ${i + 1} of ${x.length} / ${y.length}:\n  one:\n    ${show(x)}\n  other:\n    ${show(y)}`;
}

/** iptablesRead turns each family's iptables-save listing into the tracer's kernel read (IPv6 tables named "ip6-nat"…). */
export async function iptablesRead(saves: ReadonlyMap<IPFamily, string>): Promise<KernelTables> {
  const tables = new Map<string, KernelTable>();
  for (const [family, text] of saves) {
    for (const [name, t] of (await readSaveOutput(text, async () => {})).tables) {
      const shown = familyTable(name, family);
      tables.set(shown, { ...t, name: shown });
    }
  }
  return kernelTables(tables);
}

/** TraceCheckOptions: how a mode's read answers (what differs from iptables mode). */
export interface TraceCheckOptions {
  readonly mode: KernelKind;
  readonly names?: ServiceNames | null;
  /** expected: the endpoints a destination must reach in this mode (default: the destination's own). */
  readonly expected?: (d: EdgeDestination, e: EdgeExpectation) => readonly string[];
  /** uniform: every endpoint of a destination gets the same chance (iptables' probabilities, IPVS round robin), checked within 1%. */
  readonly uniform?: boolean;
  /** deniedVerdicts: what a source outside the ranges gets (default drop). */
  readonly deniedVerdicts?: readonly string[];
  /** sources: false leaves allowed and denied sources out (a mode without a source-range firewall). */
  readonly sources?: boolean;
  /** check: more to say about a result (a mode's own part of "exactly"); returns a failure or null. */
  readonly check?: (r: TraceResult, d: EdgeDestination, e: EdgeExpectation, expected: readonly string[]) => string | null;
}

export interface TraceCheck {
  /** traces: packets traced. */
  readonly traces: number;
  readonly ms: number;
  /** failures: one line per destination or source that did not go where it must (the first 30). */
  readonly failures: readonly string[];
  readonly failureCount: number;
}

/**
 * checkTraces traces, through a kernel read, a new connection to every
 * destination of every expectation (and, for load balancer IPs with source
 * ranges, from each sampled allowed and denied source) and compares where it
 * goes with where it must: exactly the expected endpoints (each with its
 * share when uniform), or no DNAT at all when none is expected; a denied
 * source dropped.
 */
export function checkTraces(c: EdgeCase, read: KernelTables, exps: readonly EdgeExpectation[], o: TraceCheckOptions): TraceCheck {
  const t0 = performance.now();
  const local = new Set(nodeIPs(c));
  const facts = { localAddresses: local, nodeIPs: [...local] };
  const failures: string[] = [];
  let count = 0;
  let traces = 0;
  const fail = (msg: string) => {
    count++;
    if (failures.length < 30) failures.push(msg);
  };
  const trace = (d: EdgeDestination, src: string, family: IPFamily) => {
    traces++;
    return traceKernel(
      { mode: o.mode, read, readAt: null, simulated: false, facts, drift: null, names: o.names ?? null },
      { proto: d.proto, src, srcPort: null, dst: d.ip, dstPort: d.port, from: d.from, family },
    );
  };
  const where = (e: EdgeExpectation, d: EdgeDestination, src: string) => `${e.servicePort} (${e.family} ${e.protocol}) ${d.kind} ${d.ip}:${d.port} from ${d.from} ${src}`;
  const expect = (e: EdgeExpectation, d: EdgeDestination, src: string) => {
    const want = [...(o.expected?.(d, e) ?? d.endpoints)].sort();
    let r: TraceResult;
    try {
      r = trace(d, src, e.family);
    } catch (err) {
      return fail(`${where(e, d, src)}: the tracer failed: ${(err as Error).message}`);
    }
    const got = [...new Set(r.endpoints.map((x) => x.address))].sort();
    if (want.length === 0) {
      if (r.verdict === 'dnat' || got.length > 0) fail(`${where(e, d, src)}: must reach no endpoint, got ${r.verdict} to ${got.length} (${got.slice(0, 3).join(' ')}): ${r.reason}`);
    } else if (r.verdict !== 'dnat') {
      fail(`${where(e, d, src)}: must reach ${want.length} endpoints, got ${r.verdict}: ${r.reason}`);
    } else if (got.join(' ') !== want.join(' ')) {
      const missing = want.filter((x) => !got.includes(x));
      const extra = got.filter((x) => !want.includes(x));
      fail(
        `${where(e, d, src)}: reaches ${got.length} endpoints, must reach ${want.length}: missing ${missing.length} (${missing.slice(0, 3).join(' ')}), extra ${extra.length} (${extra.slice(0, 3).join(' ')})`,
      );
    } else if (o.uniform) {
      const chance = 1 / want.length;
      const total = r.endpoints.reduce((a, x) => a + x.probability, 0);
      const off = r.endpoints.find((x) => Math.abs(x.probability - chance) > chance * 0.01);
      if (Math.abs(total - 1) > 1e-6 || off) fail(`${where(e, d, src)}: chances do not share evenly: total ${total}, ${off?.address} has ${off?.probability} (want ${chance})`);
    }
    const more = o.check?.(r, d, e, want) ?? null;
    if (more) fail(`${where(e, d, src)}: ${more}`);
  };
  for (const e of exps) {
    for (const d of e.destinations) {
      expect(e, d, d.src);
      if (d.kind !== 'load balancer IP' || e.sourceRanges.length === 0 || o.sources === false) continue;
      for (const src of e.allowedSources.slice(1)) expect(e, d, src);
      for (const src of e.deniedSources) {
        let r: TraceResult;
        try {
          r = trace(d, src, e.family);
        } catch (err) {
          fail(`${where(e, d, src)}: the tracer failed: ${(err as Error).message}`);
          continue;
        }
        // Without an endpoint to reach, the port refuses or drops every source alike (no firewall chain
        // then), or, left out by its mode, takes no packet at all: no source may reach anything.
        const open = (o.expected?.(d, e) ?? d.endpoints).length > 0;
        const verdicts = open ? (o.deniedVerdicts ?? ['drop']) : ['drop', 'reject', 'none'];
        if (!verdicts.includes(r.verdict)) fail(`${where(e, d, src)}: a source outside loadBalancerSourceRanges must be ${verdicts.join(' or ')}, got ${r.verdict}: ${r.reason}`);
      }
    }
  }
  return { traces, ms: performance.now() - t0, failures, failureCount: count };
}

/** caseExpectations: the expectations of a case (re-exported for the tests' one import). */
export { expectations };

/**
 * edgeCaseIds: the cases a test file runs. By default the fixed cases (but
 * those in `ciSkip`, covered by a bigger one) and the random clusters of
 * edgeSeeds() (CI_SEEDS, or KPROXY_EDGE_SEEDS). KPROXY_EDGE_CASES=a,b runs
 * only those fixed cases (and seeds only when KPROXY_EDGE_SEEDS is set too);
 * KPROXY_EDGE_FULL=1 runs every fixed case, ciSkip included.
 */
export function edgeCaseIds(all: readonly string[], ciSkip: readonly string[] = [], env: NodeJS.ProcessEnv = process.env): string[] {
  const named = env.KPROXY_EDGE_CASES?.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const n of named ?? []) if (!all.includes(n)) throw new Error(`KPROXY_EDGE_CASES: no fixed edge case ${JSON.stringify(n)} (${all.join(', ')})`);
  const fixed = named ?? all.filter((n) => env.KPROXY_EDGE_FULL === '1' || !ciSkip.includes(n));
  const seeds = named && !env.KPROXY_EDGE_SEEDS ? [] : edgeSeeds(env.KPROXY_EDGE_SEEDS);
  return [...fixed.map((n) => `fixed:${n}`), ...seeds.map((s) => `seed:${s}`)];
}

/**
 * inTurnOrTogether runs independent jobs (one namespace each) side by side,
 * or one after the other with KPROXY_EDGE_FULL=1: that run measures, and on a
 * 2-core machine two restores at once would blur each other's times.
 */
export function inTurnOrTogether<T>(jobs: readonly (() => Promise<T>)[], env: NodeJS.ProcessEnv = process.env): Promise<T[]> {
  if (env.KPROXY_EDGE_FULL !== '1') return Promise.all(jobs.map((j) => j()));
  return jobs.reduce<Promise<T[]>>(async (acc, j) => [...(await acc), await j()], Promise.resolve([]));
}

/** replayHint: the command that runs one case again (a failing random seed is printed with it). */
export function replayHint(id: string, file: string): string {
  const [kind, value] = id.split(':');
  const env = kind === 'seed' ? `KPROXY_EDGE_SEEDS=${value}` : `KPROXY_EDGE_CASES=${value}`;
  return `replay: ${env} npx vitest run --project kernel ${file}`;
}

/** EdgeTimings collects, per case and writer, the sizes and times a run measured, written to test-results/edge-<mode>.json (the limits table's data). */
export class EdgeTimings {
  readonly #rows: Record<string, unknown>[] = [];
  readonly #file: string;

  constructor(mode: string) {
    this.#file = join(import.meta.dirname, '../../../test-results', `edge-${mode}.json`);
  }

  add(row: Record<string, unknown>): void {
    this.#rows.push(row);
  }

  write(): void {
    if (this.#rows.length === 0) return;
    mkdirSync(dirname(this.#file), { recursive: true });
    writeFileSync(this.#file, JSON.stringify({ at: new Date().toISOString(), rows: this.#rows }, null, 1) + '\n');
  }
}
