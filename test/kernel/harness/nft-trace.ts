import { nsRun } from './netns.ts';
import type { NsProcess, ProcessTracker } from './processes.ts';

/**
 * The kernel's own packet tracing, for comparing with kproxy's tracer:
 * `meta nftrace set 1` on one connection's first packet (a table of this
 * harness, `ip kpt-trace`, at priority -180: after conntrack, before every
 * NAT and filter chain), and `nft monitor trace` in the same namespace, which
 * reports every chain the packet passes, nftables' own and iptables-nft's.
 */

export const TRACE_TABLE = 'kpt-trace';

/** TracedChain is one chain the kernel reported a traced packet in. */
export interface TracedChain {
  readonly table: string;
  readonly chain: string;
}

export class NftTraceMonitor {
  readonly #ns: string;
  readonly #proc: NsProcess;
  readonly #lines: string[] = [];

  private constructor(ns: string, proc: NsProcess) {
    this.#ns = ns;
    this.#proc = proc;
    proc.log.onLine((line) => this.#lines.push(line));
  }

  /** start creates the trace table (empty) and runs `nft monitor trace` in ns. */
  static async start(ns: string, tracker: ProcessTracker): Promise<NftTraceMonitor> {
    await nsRun(ns, ['nft', '-f', '-'], {
      stdin: [
        `table ip ${TRACE_TABLE} {`,
        '  chain pre { type filter hook prerouting priority -180; policy accept; }',
        '  chain out { type filter hook output priority -180; policy accept; }',
        '}',
      ].join('\n'),
    });
    const m = new NftTraceMonitor(ns, tracker.start(`nft monitor trace in ${ns}`, ns, ['nft', 'monitor', 'trace']));
    // nft subscribes before it prints anything; give it a moment to be listening.
    await new Promise((r) => setTimeout(r, 300));
    return m;
  }

  /** watch traces new connections from src to dst:port (proto) from now on, replacing the previous watch. */
  async watch(proto: string, src: string, dst: string, port: number): Promise<number> {
    const rule = `ip saddr ${src} ip daddr ${dst} meta l4proto ${proto} th dport ${port} ct state new meta nftrace set 1`;
    await nsRun(this.#ns, ['nft', '-f', '-'], {
      stdin: [`flush chain ip ${TRACE_TABLE} pre`, `flush chain ip ${TRACE_TABLE} out`, `add rule ip ${TRACE_TABLE} pre ${rule}`, `add rule ip ${TRACE_TABLE} out ${rule}`].join('\n'),
    });
    return this.#lines.length;
  }

  /** stop tracing (the table stays, empty, until the namespace goes). */
  async unwatch(): Promise<void> {
    await nsRun(this.#ns, ['nft', '-f', '-'], { stdin: `flush chain ip ${TRACE_TABLE} pre\nflush chain ip ${TRACE_TABLE} out\n` });
  }

  /**
   * firstTrace waits for the first trace the kernel reported after `since`
   * (a watch's mark) to settle, and returns its lines. The first packet of the
   * connection is the first trace id: retransmissions get ids of their own.
   */
  async firstTrace(since: number, settleMs = 400, timeoutMs = 3000): Promise<string[]> {
    const t0 = Date.now();
    let id: string | null = null;
    let count = -1;
    for (;;) {
      const lines = this.#lines.slice(since);
      id ??= /^trace id (\S+) /.exec(lines.find((l) => l.startsWith('trace id ')) ?? '')?.[1] ?? null;
      const mine = id ? lines.filter((l) => l.startsWith(`trace id ${id} `)) : [];
      if (id && mine.length === count) return mine;
      if (Date.now() - t0 > timeoutMs) {
        if (id) return mine;
        throw new Error(`the kernel reported no trace within ${timeoutMs} ms (nft monitor trace: ${this.#proc.log.tail(5)})`);
      }
      count = mine.length;
      await new Promise((r) => setTimeout(r, id ? settleMs : 100));
    }
  }
}

/** tracedChains reads the chains of a trace's lines in order ("trace id X ip nat KUBE-SERVICES rule …"), repeats folded. */
export function tracedChains(lines: readonly string[]): TracedChain[] {
  const out: TracedChain[] = [];
  for (const line of lines) {
    const m = /^trace id \S+ (?:ip6?|inet) (\S+) (\S+) /.exec(line);
    if (!m || m[1] === TRACE_TABLE) continue;
    const last = out.at(-1);
    if (last?.table === m[1] && last.chain === m[2]) continue;
    out.push({ table: m[1], chain: m[2] });
  }
  return out;
}
