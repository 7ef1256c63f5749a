import { loadConfiguration } from './config/load.ts';
import { findDrift } from './dashboard/drift.ts';
import type { KernelKind, TraceDrift, TraceResult, TraceStep } from './dashboard/protocol.ts';
import { yieldToEventLoop } from './dashboard/yield.ts';
import { errorMessage, isKproxyError, TraceInputError } from './errors.ts';
import { hostInterfaces } from './kernel/netif.ts';
import { createLogger } from './log.ts';
import { readHost, readRecentList } from './trace/host.ts';
import { parseTraceQuery, type RawTraceQuery } from './trace/packet.ts';
import { serviceNames } from './trace/service-index.ts';
import { traceKernel, traceWithRecent } from './trace/tracer.ts';

/**
 * `kproxy trace`: one packet through the rules of the network namespace it
 * runs in (or, with --dry-run, through the simulated kernel kproxy programs
 * from its source, compared with what it wrote). Exit 0 when it traced, 1
 * when the packet, a flag or the configuration is wrong (the message names
 * the field) or the rules cannot be read.
 */

export const TRACE_USAGE = `Usage: kproxy trace --proto tcp|udp|sctp --src IP[:PORT] --dst IP:PORT [--from pod|external|node] [--json] [flags]

Traces one new connection's first packet through the rules this network
namespace holds now, and says what happens to it and why: DNAT to endpoints
(with their probabilities), reject, drop, accept, or not a Service packet.

  --proto P        tcp, udp or sctp
  --src IP[:PORT]  the client's address
  --dst IP:PORT    where it connects to ([IPv6]:PORT)
  --from WHERE     pod (a pod on this node), external (another node or outside), node (this node);
                   default: node when --src is one of this node's addresses, else external
  --json           the answer as JSON (verdict, endpoints, masquerade, path, reason, ...)

kproxy's flags apply: --proxy-mode (default: found from the rules present), --iptables-flavor,
--config; with --dry-run the rules are the simulated kernel kproxy programs from --source
(default: the example cluster), and drift against what kproxy wrote is checked.
`;

const TRACE_FLAGS = new Set(['proto', 'src', 'dst', 'from']);

/** splitTraceArgs takes the trace's own flags out of argv; the rest are kproxy's flags. */
export function splitTraceArgs(argv: readonly string[]): { raw: RawTraceQuery; json: boolean; help: boolean; rest: string[] } {
  const raw: Record<string, string> = {};
  const rest: string[] = [];
  let json = false;
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(a);
    if (a === '--json') json = true;
    else if (a === '--help' || a === '-h') help = true;
    else if (m && TRACE_FLAGS.has(m[1])) {
      const value = m[2] ?? argv[++i];
      if (value === undefined) throw new TraceInputError(`${m[1]}: --${m[1]} needs a value`);
      raw[m[1]] = value;
    } else rest.push(a);
  }
  return { raw, json, help, rest };
}

function explicitMode(rest: readonly string[]): boolean {
  return rest.some((a) => a === '--proxy-mode' || a.startsWith('--proxy-mode=') || a === '--config' || a.startsWith('--config='));
}

export interface TraceIO {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
}

/** runTrace runs `kproxy trace ARGS` and returns the exit code. */
export async function runTrace(argv: readonly string[], io: TraceIO): Promise<number> {
  let args: ReturnType<typeof splitTraceArgs>;
  try {
    args = splitTraceArgs(argv);
  } catch (err) {
    io.err(`kproxy trace: ${errorMessage(err)}\n`);
    return 1;
  }
  if (args.help) {
    io.out(TRACE_USAGE);
    return 0;
  }
  try {
    const asked = parseTraceQuery(args.raw);
    const dryRun = args.rest.includes('--dry-run');
    const loaded = await loadConfiguration(args.rest, {}, { readsNoServices: !dryRun });
    const result = dryRun ? await traceDryRun(loaded, asked) : await traceHost(loaded.config.mode, explicitMode(args.rest), loaded.run.iptablesFlavor, asked);
    io.out(args.json ? JSON.stringify(result.trace, null, 2) + '\n' : formatTrace(result.trace, result.how));
    return 0;
  } catch (err) {
    io.err(`kproxy trace: ${isKproxyError(err) ? `${err.message} [${err.code}]` : errorMessage(err)}\n`);
    return 1;
  }
}

async function traceHost(
  mode: KernelKind,
  explicit: boolean,
  flavor: Parameters<typeof readHost>[0]['flavor'],
  asked: ReturnType<typeof parseTraceQuery>,
): Promise<{ trace: TraceResult; how: string }> {
  const host = await readHost({ mode: explicit ? mode : null, flavor });
  const read = { mode: host.mode, read: host.read, readAt: Date.now(), simulated: false, facts: { localAddresses: host.localAddresses, nodeIPs: host.nodeIPs }, drift: null };
  const trace = await traceWithRecent(read, asked, (name) => readRecentList(name));
  return { trace: { ...trace, notes: [...host.notes, ...trace.notes] }, how: host.how };
}

/**
 * traceDryRun programs the simulated kernel as `--dry-run --once` would, reads
 * it as the dashboard does, and compares it with what kproxy wrote (so a
 * trace shows drift the way the dashboard's would; in a simulated kernel there is none).
 */
async function traceDryRun(loaded: Awaited<ReturnType<typeof loadConfiguration>>, asked: ReturnType<typeof parseTraceQuery>): Promise<{ trace: TraceResult; how: string }> {
  const logger = createLogger({ level: 'warn' });
  // The daemon's wiring (Kubernetes client, fastify…) loads only for --dry-run: a trace on a node stays quick to start.
  const { assembleDaemon } = await import('./assemble.ts');
  const a = await assembleDaemon({ ...loaded, run: { ...loaded.run, once: true } }, logger);
  try {
    const recs = await a.daemon.once();
    const failed = recs.find((r) => !r.ok);
    if (failed) throw new Error(`the simulated sync failed: ${failed.error?.message ?? 'unknown error'}`);
    const view = a.kernelView(logger);
    const read = await view.read();
    const intended = await view.intended();
    const drift: TraceDrift[] = intended ? (await findDrift(intended, read, view, yieldToEventLoop)).map((f) => ({ table: f.table, chain: f.chain, kind: f.kind, detail: f.detail })) : [];
    const states = a.daemon.proxy.proxiers.map((p) => p.state);
    // The simulated node's own addresses (its Node object's) are local, besides this host's.
    const host = await hostInterfaces()
      .addresses()
      .catch(() => []);
    const nodeIPs = states.flatMap((s) => s.node.addresses);
    const local = new Set([...host.map((x) => x.address), ...nodeIPs]);
    const trace = traceKernel(
      { mode: view.kind, read, readAt: Date.now(), simulated: true, facts: { localAddresses: local, nodeIPs }, drift, names: serviceNames(states.flatMap((s) => [...s.services.values()])) },
      asked,
    );
    return { trace, how: `${a.backendDescription}, node ${loaded.nodeName}` };
  } finally {
    await a.daemon.stop();
  }
}

const VERDICT: Record<TraceResult['verdict'], string> = { dnat: 'DNAT', reject: 'REJECT', drop: 'DROP', accept: 'ACCEPT', none: 'not a Service packet' };

function stepLine(s: TraceStep): string {
  const where = `${s.table} ${s.chain}`;
  const at = s.index === null ? '' : ` #${s.index + 1}`;
  const rule = s.rule === null ? '(end of chain)' : s.rule;
  const drift = s.drift ? `  [drift: ${s.drift}]` : '';
  const note = s.note ? `  (${s.note})` : '';
  return `  ${where}${at}: ${rule} → ${s.verdict}  [${s.packets} pkts]${note}${drift}`;
}

/** formatTrace is the text answer: verdict and reason first, then the path, the endpoints, notes and drift. */
export function formatTrace(t: TraceResult, how: string): string {
  const q = t.query;
  const lines = [
    `kproxy trace: ${q.proto} ${q.src}${q.srcPort !== null ? `:${q.srcPort}` : ''} → ${q.dst.includes(':') ? `[${q.dst}]` : q.dst}:${q.dstPort} from ${q.from} (${t.mode} mode, ${t.family}; read: ${how})`,
    `verdict: ${VERDICT[t.verdict]}${t.masquerade ? ' (masqueraded)' : ''}`,
    `reason: ${t.reason}`,
    '',
    'path:',
    ...t.path.map(stepLine),
  ];
  if (t.endpoints.length) {
    lines.push('', `endpoints (${t.endpoints.length}):`);
    for (const e of t.endpoints) {
      lines.push(`  ${(Math.round(e.probability * 1000) / 10).toFixed(1).padStart(5)}%  ${e.address}${e.masquerade ? '  masqueraded' : ''}${e.sticky ? `  (${e.sticky})` : ''}`);
      for (const s of e.path) lines.push('    ' + stepLine(s).trimStart());
    }
  }
  if (t.notes.length) lines.push('', 'notes:', ...t.notes.map((n) => `  - ${n}`));
  lines.push('', t.drift === null ? "drift: not checked (no record of what kproxy wrote here; the dashboard's trace checks it)" : t.drift.length === 0 ? 'drift: none on this path' : 'drift:');
  if (t.drift) for (const d of t.drift) lines.push(`  ${d.table} ${d.chain}: ${d.kind}: ${d.detail}`);
  return lines.join('\n') + '\n';
}
