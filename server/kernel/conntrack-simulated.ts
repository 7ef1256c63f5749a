import { CommandNotFoundError } from '../errors.ts';
import { canonicalIP, type IPFamily } from '../net/ip.ts';
import type { ConntrackRunner, ConntrackTuple, StreamOptions, StreamResult } from './conntrack.ts';
import type { ExecResult } from './exec.ts';

/** SimulatedFlow is one tracked flow of the simulated table. */
export interface SimulatedFlow {
  readonly family: IPFamily;
  readonly protocol: 'tcp' | 'udp' | 'sctp';
  readonly orig: ConntrackTuple;
  readonly reply: ConntrackTuple;
  /** unreplied: no packet came back yet (conntrack prints [UNREPLIED]). */
  readonly unreplied?: boolean;
}

/** natFlow is the entry a DNATed packet leaves: client -> vip:port, answered by endpoint:targetPort. */
export function natFlow(o: { protocol?: 'udp' | 'tcp' | 'sctp'; client: string; clientPort: number; vip: string; port: number; endpoint: string; targetPort?: number }): SimulatedFlow {
  const family: IPFamily = o.client.includes(':') ? 'IPv6' : 'IPv4';
  return {
    family,
    protocol: o.protocol ?? 'udp',
    orig: { src: o.client, dst: o.vip, sport: o.clientPort, dport: o.port },
    reply: { src: o.endpoint, dst: o.client, sport: o.targetPort ?? o.port, dport: o.clientPort },
  };
}

/** plainFlow is an entry without NAT (the reply comes from the address the client sent to). */
export function plainFlow(o: { protocol?: 'udp' | 'tcp' | 'sctp'; client: string; clientPort: number; dst: string; port: number }): SimulatedFlow {
  return natFlow({ ...o, vip: o.dst, endpoint: o.dst });
}

const VERSION = 'conntrack v1.4.7 (conntrack-tools)';
type Command = 'L' | 'D' | 'C';
const COMMANDS: Record<string, Command> = { '-L': 'L', '--dump': 'L', '-D': 'D', '--delete': 'D', '-C': 'C', '--count': 'C' };
/** Options that take a value, by every spelling conntrack accepts, mapped to one name. */
const OPTIONS: Record<string, string> = {
  '-f': 'family',
  '--family': 'family',
  '-p': 'proto',
  '--proto': 'proto',
  '--protonum': 'proto',
  '-s': 'origSrc',
  '--src': 'origSrc',
  '--orig-src': 'origSrc',
  '-d': 'origDst',
  '--dst': 'origDst',
  '--orig-dst': 'origDst',
  '-r': 'replySrc',
  '--reply-src': 'replySrc',
  '-q': 'replyDst',
  '--reply-dst': 'replyDst',
  '--sport': 'origSport',
  '--orig-port-src': 'origSport',
  '--dport': 'origDport',
  '--orig-port-dst': 'origDport',
  '--reply-port-src': 'replySport',
  '--reply-port-dst': 'replyDport',
  '-o': 'output',
  '--output': 'output',
};
const PORT_OPTIONS = new Set(['origSport', 'origDport', 'replySport', 'replyDport']);

/**
 * SimulatedConntrack is an in-memory conntrack table behind ConntrackRunner. It
 * takes the argument arrays the real runner is given and answers as
 * conntrack 1.4.7 does: the same line format, the summary on stderr, exit 1
 * when -D matched nothing, exit 2 for an option the command refuses (-C takes
 * no option at all) or a port option before -p; the family defaults to ipv4.
 */
export class SimulatedConntrack implements ConntrackRunner {
  #flows: SimulatedFlow[] = [];
  /** calls: every argument array, in order. */
  readonly calls: string[][] = [];
  /** missing: behave as if the binary were not installed. */
  missing = false;
  /** onCall runs before each command (tests advance a FakeClock here, or throw to fail it). */
  onCall: ((args: readonly string[]) => void) | null = null;

  constructor(flows: SimulatedFlow[] = []) {
    this.#flows = [...flows];
  }

  add(...flows: SimulatedFlow[]): void {
    this.#flows.push(...flows);
  }

  /** flows returns the table (a copy). */
  flows(): SimulatedFlow[] {
    return [...this.#flows];
  }

  /** deletions: the argument arrays of the -D commands. */
  get deletions(): string[][] {
    return this.calls.filter((c) => c[0] === '-D');
  }

  async run(args: readonly string[]): Promise<ExecResult> {
    let out = '';
    const res = this.#execute(args, (line) => {
      out += line + '\n';
    });
    return { code: res.code, stdout: out, stderr: res.stderr };
  }

  async stream(args: readonly string[], onLine: (line: string) => boolean | void, _opts?: StreamOptions): Promise<StreamResult> {
    let lines = 0;
    let stopped = false;
    const res = this.#execute(args, (line) => {
      if (stopped) return;
      lines++;
      if (onLine(line) === false) stopped = true;
    });
    return { code: stopped ? 143 : res.code, stderr: stopped ? '' : res.stderr, lines, oversized: 0, stopped };
  }

  #execute(args: readonly string[], print: (line: string) => void): { code: number; stderr: string } {
    if (this.missing) throw new CommandNotFoundError('conntrack is not installed or not on PATH');
    this.calls.push([...args]);
    this.onCall?.(args);
    const command = COMMANDS[args[0] ?? ''];
    if (!command) return { code: 2, stderr: `${VERSION}: Invalid command ${JSON.stringify(args[0] ?? '')}\n` };
    const opts: Record<string, string> = {};
    for (let i = 1; i < args.length; i++) {
      const name = OPTIONS[args[i]];
      if (!name || args[i + 1] === undefined) return { code: 2, stderr: `${VERSION}: Illegal option \`${args[i]}'\n` };
      if (command === 'C') return { code: 2, stderr: `${VERSION}: Illegal option \`${args[i]}' with this command\n` };
      // Port options belong to the protocol extension: without -p before them conntrack does not know them.
      if (PORT_OPTIONS.has(name) && !opts.proto) return { code: 2, stderr: `${VERSION}: unknown option \`${args[i]}'\n` };
      opts[name] = args[++i];
    }
    const family: IPFamily = opts.family === 'ipv6' ? 'IPv6' : 'IPv4';
    if (command === 'C') {
      // conntrack -C counts the whole table of every family (it reads nf_conntrack_count).
      print(String(this.#flows.length));
      return { code: 0, stderr: '' };
    }
    const match = (f: SimulatedFlow) =>
      f.family === family &&
      (!opts.proto || opts.proto === f.protocol) &&
      ipIs(opts.origSrc, f.orig.src) &&
      ipIs(opts.origDst, f.orig.dst) &&
      ipIs(opts.replySrc, f.reply.src) &&
      ipIs(opts.replyDst, f.reply.dst) &&
      portIs(opts.origSport, f.orig.sport) &&
      portIs(opts.origDport, f.orig.dport) &&
      portIs(opts.replySport, f.reply.sport) &&
      portIs(opts.replyDport, f.reply.dport);
    if (command === 'D') {
      // conntrack prints each flow it deleted, as -L would.
      const kept = this.#flows.filter((f) => !match(f));
      for (const f of this.#flows) if (match(f)) print(formatFlow(f, opts.output === 'extended'));
      const n = this.#flows.length - kept.length;
      this.#flows = kept;
      return { code: n === 0 ? 1 : 0, stderr: `${VERSION}: ${n} flow entries have been deleted.\n` };
    }
    const shown = this.#flows.filter(match);
    for (const f of shown) print(formatFlow(f, opts.output === 'extended'));
    return { code: 0, stderr: `${VERSION}: ${shown.length} flow entries have been shown.\n` };
  }
}

function ipIs(want: string | undefined, have: string): boolean {
  return want === undefined || canonicalIP(want) === have;
}

function portIs(want: string | undefined, have: number): boolean {
  return want === undefined || Number(want) === have;
}

const PROTO_NUMBERS = { tcp: 6, udp: 17, sctp: 132 };

/** formatFlow prints a flow as conntrack -L does (with -o extended, family first). */
export function formatFlow(f: SimulatedFlow, extended: boolean): string {
  const t = (x: ConntrackTuple) => `src=${x.src} dst=${x.dst} sport=${x.sport} dport=${x.dport}`;
  const state = f.protocol === 'tcp' ? ' ESTABLISHED' : f.protocol === 'sctp' ? ' ESTABLISHED' : '';
  const body = `${f.protocol.padEnd(8)} ${PROTO_NUMBERS[f.protocol]} 29${state} ${t(f.orig)}${f.unreplied ? ' [UNREPLIED]' : ''} ${t(f.reply)} mark=0 use=1`;
  if (!extended) return body;
  return `${f.family === 'IPv6' ? 'ipv6     10' : 'ipv4     2'} ${body}`;
}
