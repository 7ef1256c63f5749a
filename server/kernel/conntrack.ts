import { spawn } from 'node:child_process';
import { CommandFailedError, CommandNotFoundError, CommandTimeoutError, ConntrackError } from '../errors.ts';
import { canonicalIP, ipFamilyOf, type IPFamily } from '../net/ip.ts';
import { execFile, type ExecFn, type ExecResult } from './exec.ts';

/**
 * The conntrack table through the `conntrack` command (conntrack-tools 1.4.7):
 * targeted deletions (`conntrack -D` with filters), streamed listings
 * (`conntrack -L`), and the parser of its flow lines. One process takes one
 * filter, so callers batch by choosing few, precise filters; listings are read
 * line by line and never held whole, because a node may track millions of flows.
 */

export type ConntrackProtocol = 'tcp' | 'udp' | 'sctp';

/**
 * ConntrackFilter selects flows the way conntrack's options do: every field
 * given must match. origDst/origDstPort are the address the client sent to (a
 * service VIP or a node address and port), replySrc the address that answers
 * (the endpoint a flow was DNATed to).
 */
export interface ConntrackFilter {
  readonly family: IPFamily;
  readonly protocol: ConntrackProtocol;
  readonly origDst?: string;
  readonly origDstPort?: number;
  readonly replySrc?: string;
}

/** ConntrackTuple is one direction of a flow. Ports are 0 for protocols without ports. */
export interface ConntrackTuple {
  readonly src: string;
  readonly dst: string;
  readonly sport: number;
  readonly dport: number;
}

/** ConntrackFlow is one parsed line of `conntrack -L`. */
export interface ConntrackFlow {
  readonly family: IPFamily;
  readonly protocol: string;
  readonly orig: ConntrackTuple;
  readonly reply: ConntrackTuple;
}

/** StreamResult is how a streamed command ended. */
export interface StreamResult {
  readonly code: number;
  readonly stderr: string;
  /** lines: complete stdout lines handed to onLine. */
  readonly lines: number;
  /** oversized: lines longer than the limit, skipped without being buffered. */
  readonly oversized: number;
  /** stopped: onLine asked to stop and the process was ended early. */
  readonly stopped: boolean;
}

export interface StreamOptions {
  timeoutMs?: number;
  /** maxLineBytes: longer lines are skipped (a flow line is ~250 bytes); default 4096. */
  maxLineBytes?: number;
}

/**
 * ConntrackRunner runs `conntrack` with an argument array. The real one spawns
 * the program; SimulatedConntrack (conntrack-simulated.ts) parses the same arrays against
 * an in-memory table.
 */
export interface ConntrackRunner {
  run(args: readonly string[], opts?: { timeoutMs?: number }): Promise<ExecResult>;
  /** stream hands each stdout line to onLine as it arrives; onLine returning false ends the process early. */
  stream(args: readonly string[], onLine: (line: string) => boolean | void, opts?: StreamOptions): Promise<StreamResult>;
}

const PROTOCOLS: readonly ConntrackProtocol[] = ['tcp', 'udp', 'sctp'];

function checkIP(what: string, ip: string | undefined, family: IPFamily): string | undefined {
  if (ip === undefined) return undefined;
  const c = canonicalIP(ip);
  if (!c || ipFamilyOf(c) !== family) throw new ConntrackError(`conntrack filter: ${what} ${JSON.stringify(ip)} is not an ${family} address`);
  return c;
}

/**
 * filterArgs renders a filter as conntrack options. Every value is validated
 * first (canonical IP of the filter's family, port 1-65535), so nothing from
 * an API object reaches the command line unchecked.
 */
export function filterArgs(f: ConntrackFilter): string[] {
  if (!PROTOCOLS.includes(f.protocol)) throw new ConntrackError(`conntrack filter: unknown protocol ${JSON.stringify(f.protocol)}`);
  const args = ['-f', f.family === 'IPv6' ? 'ipv6' : 'ipv4', '-p', f.protocol];
  const dst = checkIP('orig-dst', f.origDst, f.family);
  if (dst) args.push('--orig-dst', dst);
  if (f.origDstPort !== undefined) {
    if (!Number.isInteger(f.origDstPort) || f.origDstPort < 1 || f.origDstPort > 65535) throw new ConntrackError(`conntrack filter: port ${JSON.stringify(f.origDstPort)} is out of range`);
    args.push('--orig-port-dst', String(f.origDstPort));
  }
  const src = checkIP('reply-src', f.replySrc, f.family);
  if (src) args.push('--reply-src', src);
  return args;
}

/** filterKey identifies a filter (deduplication of queued deletions). */
export function filterKey(f: ConntrackFilter): string {
  return `${f.family} ${f.protocol} ${f.origDst ?? '*'} ${f.origDstPort ?? '*'} ${f.replySrc ?? '*'}`;
}

/** describeFilter is a filter as an operator reads it in a log line. */
export function describeFilter(f: ConntrackFilter): string {
  const dst = f.origDst ? (f.origDst.includes(':') ? `[${f.origDst}]` : f.origDst) : '*';
  return `${f.protocol} to ${dst}:${f.origDstPort ?? '*'}${f.replySrc ? ` answered by ${f.replySrc}` : ''}`;
}

const SUMMARY = /(\d+) flow entries have been (deleted|shown)/;

/** parseSummary reads conntrack's "N flow entries have been deleted|shown." line (stderr); null when absent. */
export function parseSummary(stderr: string): number | null {
  const m = SUMMARY.exec(stderr);
  return m ? Number(m[1]) : null;
}

/**
 * FLOW matches a `conntrack -L` line: optional "ipv4 2" (with -o extended),
 * protocol name, number and timeout, then the original tuple and, after
 * whatever state words and flags, the reply tuple. One regular expression is
 * an order of magnitude faster than splitting words, which matters at a
 * million lines.
 */
const FLOW = /^\s*(?:(ipv[46])\s+\d+\s+)?([a-z0-9-]+)\s+\d+\s+\d+\s.*?src=(\S+) dst=(\S+)(?: sport=(\d+) dport=(\d+))?.*? src=(\S+) dst=(\S+)(?: sport=(\d+) dport=(\d+))?/;
const IPV4 = /^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;

/** address checks an address conntrack printed; IPv6 is canonicalised (IPv4 already is). */
function address(text: string): string | null {
  if (IPV4.test(text)) return text;
  return text.includes(':') ? canonicalIP(text) : null;
}

/**
 * parseFlowLine reads one line of `conntrack -L` (plain or `-o extended`):
 * the first src/dst/sport/dport group is the original direction, the second
 * the reply. Returns null for anything else (blank lines, summaries).
 */
export function parseFlowLine(line: string): ConntrackFlow | null {
  const m = FLOW.exec(line);
  if (!m) return null;
  const [, fam, protocol, os, od, osp, odp, rs, rd, rsp, rdp] = m;
  const origSrc = address(os);
  const origDst = address(od);
  const replySrc = address(rs);
  const replyDst = address(rd);
  if (!origSrc || !origDst || !replySrc || !replyDst) return null;
  const family: IPFamily = fam === 'ipv6' || (!fam && origSrc.includes(':')) ? 'IPv6' : 'IPv4';
  return {
    family,
    protocol,
    orig: { src: origSrc, dst: origDst, sport: Number(osp ?? 0), dport: Number(odp ?? 0) },
    reply: { src: replySrc, dst: replyDst, sport: Number(rsp ?? 0), dport: Number(rdp ?? 0) },
  };
}

/**
 * Conntrack is the client the cleaner and the counters use: deletions and
 * counts by filter over a runner, with conntrack's exit codes interpreted
 * (`-D` exits 1 when it matched nothing, which is not a failure).
 */
export class Conntrack {
  readonly runner: ConntrackRunner;
  readonly #timeoutMs: number;

  constructor(runner: ConntrackRunner, opts: { timeoutMs?: number } = {}) {
    this.runner = runner;
    this.#timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /**
   * delete removes the flows matching f and returns how many the kernel
   * deleted. conntrack prints every deleted flow, which for a broad filter on
   * a big table is a lot of output: it is streamed and counted, never kept.
   */
  async delete(f: ConntrackFilter): Promise<number> {
    let lines = 0;
    const res = await this.runner.stream(
      ['-D', ...filterArgs(f)],
      (line) => {
        if (line.trim() !== '') lines++;
      },
      { timeoutMs: this.#timeoutMs },
    );
    const n = parseSummary(res.stderr);
    if (n !== null) return n;
    // No summary but a clean exit: the flows it printed are the ones it deleted.
    if (res.code === 0) return lines;
    throw new ConntrackError(`deleting conntrack flows (${describeFilter(f)}) failed (exit ${res.code}): ${firstLine(res.stderr)}`);
  }

  /** count streams `conntrack -L` for f and counts the flows without keeping them. */
  async count(f: ConntrackFilter): Promise<number> {
    let lines = 0;
    const res = await this.runner.stream(
      ['-L', ...filterArgs(f)],
      (line) => {
        if (line.trim() !== '') lines++;
      },
      { timeoutMs: this.#timeoutMs },
    );
    if (res.code !== 0) throw new ConntrackError(`listing conntrack flows (${describeFilter(f)}) failed (exit ${res.code}): ${firstLine(res.stderr)}`);
    return parseSummary(res.stderr) ?? lines;
  }

  /**
   * list streams the flows matching f to onFlow, one at a time; onFlow returning
   * false stops the listing. Lines that do not parse are counted, not fatal.
   */
  async list(f: ConntrackFilter, onFlow: (flow: ConntrackFlow) => boolean | void, opts: { timeoutMs?: number } = {}): Promise<StreamResult & { unparsed: number }> {
    let unparsed = 0;
    const res = await this.runner.stream(
      ['-L', ...filterArgs(f), '-o', 'extended'],
      (line) => {
        if (line.trim() === '') return;
        const flow = parseFlowLine(line);
        if (!flow) {
          unparsed++;
          return;
        }
        return onFlow(flow);
      },
      { timeoutMs: opts.timeoutMs ?? this.#timeoutMs },
    );
    if (res.code !== 0 && !res.stopped) throw new ConntrackError(`listing conntrack flows (${describeFilter(f)}) failed (exit ${res.code}): ${firstLine(res.stderr)}`);
    return { ...res, unparsed };
  }
}

function firstLine(text: string): string {
  return text.trim().split('\n')[0] || 'no error output';
}

/**
 * execConntrack is the real runner: `conntrack` spawned without a shell.
 * stream() splits stdout into lines as chunks arrive and keeps at most one
 * partial line, so memory stays flat whatever the size of the table.
 */
export function execConntrack(opts: { binary?: string; exec?: ExecFn } = {}): ConntrackRunner {
  const binary = opts.binary ?? 'conntrack';
  const exec = opts.exec ?? execFile;
  return {
    run: (args, o = {}) => exec(binary, args, { timeoutMs: o.timeoutMs, maxOutputBytes: 1024 * 1024 }),
    stream: (args, onLine, o = {}) => streamLines(binary, args, onLine, o),
  };
}

function streamLines(binary: string, args: readonly string[], onLine: (line: string) => boolean | void, o: StreamOptions): Promise<StreamResult> {
  const maxLine = o.maxLineBytes ?? 4096;
  const timeoutMs = o.timeoutMs ?? 60_000;
  return new Promise((resolve, reject) => {
    const child = spawn(binary, args as string[], { stdio: ['ignore', 'pipe', 'pipe'] });
    // First, and the pipes may be missing: a spawn that fails for want of file descriptors (EMFILE) has no
    // stdio streams and emits 'error' later, which unheard would end the daemon (as in exec.ts).
    child.on('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (e.code === 'ENOENT') reject(new CommandNotFoundError(`${binary} is not installed or not on PATH`, { cause: e }));
      else reject(new CommandFailedError(`running ${binary} failed: ${e.message}`, { cause: e }));
    });
    let partial = '';
    let skipping = false;
    let lines = 0;
    let oversized = 0;
    let stopped = false;
    let timedOut = false;
    let failed: unknown = null;
    const err: Buffer[] = [];
    let errBytes = 0;
    const stop = () => {
      if (stopped) return;
      stopped = true;
      child.kill('SIGTERM');
    };
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
      // Settle now: a grandchild holding the pipes open would delay 'close' indefinitely.
      child.stdout?.destroy();
      child.stderr?.destroy();
      reject(new CommandTimeoutError(`${binary} ${args.slice(0, 6).join(' ')} did not finish within ${timeoutMs} ms`));
    }, timeoutMs);
    const emit = (line: string) => {
      if (stopped) return;
      lines++;
      try {
        if (onLine(line) === false) stop();
      } catch (e) {
        // A throwing consumer ends the listing; the error is the caller's to see.
        failed = e;
        stop();
      }
    };
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (chunk: string) => {
      let start = 0;
      for (;;) {
        const nl = chunk.indexOf('\n', start);
        if (nl < 0) break;
        const piece = chunk.slice(start, nl);
        if (skipping) skipping = false;
        else if (partial.length + piece.length > maxLine) oversized++;
        else emit(partial + piece);
        partial = '';
        start = nl + 1;
      }
      const rest = chunk.slice(start);
      if (skipping) return;
      if (partial.length + rest.length > maxLine) {
        // Too long to be a flow: drop what was gathered and skip to the next newline.
        oversized++;
        partial = '';
        skipping = true;
      } else partial += rest;
    });
    child.stderr?.on('data', (b: Buffer) => {
      if (errBytes < 16 * 1024) err.push(b);
      errBytes += b.length;
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (timedOut) return;
      if (failed) return reject(failed);
      if (partial !== '' && !skipping) emit(partial);
      resolve({ code: code ?? (signal ? 128 : 1), stderr: Buffer.concat(err).toString('utf8'), lines, oversized, stopped });
    });
  });
}
