import { IpvsError } from '../errors.ts';
import { canonicalIP } from '../net/ip.ts';

/**
 * The IPVS table as ipvsadm shows and takes it: virtual servers (a protocol,
 * an address and a port, with a scheduler) and their real servers. This
 * module writes `ipvsadm -R` batches and parses the same command lines, the
 * ones `ipvsadm -Sn` prints: the real runner and the simulated kernel speak exactly this.
 */

export type IpvsProtocol = 'TCP' | 'UDP' | 'SCTP';

/** IpvsForward is a real server's forwarding method; kube-proxy only uses masq (NAT). */
export type IpvsForward = 'masq' | 'route' | 'tunnel';

/** IpvsRealServer is one destination of a virtual server. */
export interface IpvsRealServer {
  readonly address: string;
  readonly port: number;
  readonly weight: number;
  readonly forward: IpvsForward;
  /** activeConns/inactiveConns: from `ipvsadm -Ln` only (undefined from `-Sn`). */
  readonly activeConns?: number;
  readonly inactiveConns?: number;
}

/** IpvsVirtualServer is one IPVS service without its destinations. */
export interface IpvsVirtualServer {
  readonly protocol: IpvsProtocol;
  readonly address: string;
  readonly port: number;
  readonly scheduler: string;
  /** persistence: the persistent timeout in seconds (ClientIP affinity); 0 = not persistent. */
  readonly persistence: number;
  /** schedFlags: scheduler flags as ipvsadm names them ("mh-port", "sh-fallback", "flag-1"...), sorted. */
  readonly schedFlags: readonly string[];
}

/** IpvsService is a virtual server with its real servers, as listed. */
export interface IpvsService extends IpvsVirtualServer {
  readonly reals: readonly IpvsRealServer[];
}

/** hostPort renders ip:port the way ipvsadm and Go's JoinHostPort do ([v6]:port). */
export function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** virtualServerKey is kube-proxy's VirtualServer.String(): "10.96.0.1:443/TCP". */
export function virtualServerKey(vs: Pick<IpvsVirtualServer, 'address' | 'port' | 'protocol'>): string {
  return `${hostPort(vs.address, vs.port)}/${vs.protocol}`;
}

/** realServerKey is kube-proxy's RealServer.String(): "10.244.0.5:8080". */
export function realServerKey(rs: Pick<IpvsRealServer, 'address' | 'port'>): string {
  return hostPort(rs.address, rs.port);
}

/** sameVirtualServer compares what `ipvsadm -E` can change (kube-proxy's VirtualServer.Equal). */
export function sameVirtualServer(a: IpvsVirtualServer, b: IpvsVirtualServer): boolean {
  return a.scheduler === b.scheduler && a.persistence === b.persistence && a.schedFlags.length === b.schedFlags.length && a.schedFlags.every((f, i) => f === b.schedFlags[i]);
}

const PROTOCOL_OPTION: Record<IpvsProtocol, string> = { TCP: '-t', UDP: '-u', SCTP: '--sctp-service' };
const FORWARD_OPTION: Record<IpvsForward, string> = { masq: '-m', route: '-g', tunnel: '-i' };

/** serviceOption renders "-t 10.96.0.1:443" (the virtual server part of every command). */
export function serviceOption(vs: Pick<IpvsVirtualServer, 'address' | 'port' | 'protocol'>): string {
  return `${PROTOCOL_OPTION[vs.protocol]} ${hostPort(vs.address, vs.port)}`;
}

/** serviceLine renders a virtual server as ipvsadm -S does: "-s rr", then "-p N", then "-b flags". */
function serviceArgs(vs: IpvsVirtualServer): string {
  let s = `${serviceOption(vs)} -s ${vs.scheduler}`;
  if (vs.persistence > 0) s += ` -p ${vs.persistence}`;
  if (vs.schedFlags.length > 0) s += ` -b ${vs.schedFlags.join(',')}`;
  return s;
}

function realArgs(vs: IpvsVirtualServer, rs: IpvsRealServer): string {
  return `${serviceOption(vs)} -r ${realServerKey(rs)} ${FORWARD_OPTION[rs.forward]} -w ${rs.weight}`;
}

/**
 * IpvsBatch collects `ipvsadm -R` input, one command per line, in the order
 * the lines must run: ipvsadm applies each line on its own (a failed line does
 * not undo the earlier ones), so the caller orders them so no line depends on
 * one that could fail.
 */
export class IpvsBatch {
  readonly #lines: string[] = [];

  addService(vs: IpvsVirtualServer): void {
    this.#lines.push(`-A ${serviceArgs(vs)}`);
  }

  editService(vs: IpvsVirtualServer): void {
    this.#lines.push(`-E ${serviceArgs(vs)}`);
  }

  deleteService(vs: Pick<IpvsVirtualServer, 'address' | 'port' | 'protocol'>): void {
    this.#lines.push(`-D ${serviceOption(vs)}`);
  }

  addReal(vs: IpvsVirtualServer, rs: IpvsRealServer): void {
    this.#lines.push(`-a ${realArgs(vs, rs)}`);
  }

  editReal(vs: IpvsVirtualServer, rs: IpvsRealServer): void {
    this.#lines.push(`-e ${realArgs(vs, rs)}`);
  }

  deleteReal(vs: Pick<IpvsVirtualServer, 'address' | 'port' | 'protocol'>, rs: Pick<IpvsRealServer, 'address' | 'port'>): void {
    this.#lines.push(`-d ${serviceOption(vs)} -r ${realServerKey(rs)}`);
  }

  /** setTimeouts is `--set tcp tcpfin udp` in seconds; 0 leaves a timeout as it is. */
  setTimeouts(tcp: number, tcpFin: number, udp: number): void {
    this.#lines.push(`--set ${tcp} ${tcpFin} ${udp}`);
  }

  get lines(): number {
    return this.#lines.length;
  }

  get empty(): boolean {
    return this.#lines.length === 0;
  }

  text(): string {
    return this.#lines.length ? this.#lines.join('\n') + '\n' : '';
  }
}

/** IpvsCommand is one parsed ipvsadm command line. */
export type IpvsCommand =
  | { readonly op: 'add-service' | 'edit-service'; readonly service: IpvsVirtualServer }
  | { readonly op: 'delete-service'; readonly service: Pick<IpvsVirtualServer, 'protocol' | 'address' | 'port'> }
  | { readonly op: 'add-real' | 'edit-real'; readonly service: Pick<IpvsVirtualServer, 'protocol' | 'address' | 'port'>; readonly real: IpvsRealServer }
  | { readonly op: 'delete-real'; readonly service: Pick<IpvsVirtualServer, 'protocol' | 'address' | 'port'>; readonly real: Pick<IpvsRealServer, 'address' | 'port'> }
  | { readonly op: 'set-timeouts'; readonly tcp: number; readonly tcpFin: number; readonly udp: number }
  | { readonly op: 'clear' };

/**
 * IpvsSyntaxError is a line ipvsadm refuses before talking to the kernel.
 * fatal: ipvsadm exits 2 there and later lines are not applied (a bad value);
 * otherwise it only skips the line (an unknown option or a missing argument,
 * which popt reports) and goes on with the next one.
 */
export class IpvsSyntaxError extends IpvsError {
  readonly fatal: boolean;
  constructor(message: string, fatal = true) {
    super(message);
    this.fatal = fatal;
  }
}

const SCHED_FLAGS: Record<string, string | null> = {
  'flag-1': null,
  'flag-2': null,
  'flag-3': null,
  'sh-fallback': 'sh',
  'sh-port': 'sh',
  'mh-fallback': 'mh',
  'mh-port': 'mh',
};

/** The scheduler ipvsadm uses when a command names none. */
export const IPVSADM_DEFAULT_SCHEDULER = 'wlc';

function parseAddrPort(text: string, what: string): { address: string; port: number } {
  // As ipvsadm's parse_service: an address, optionally ":port" ([v6]:port); no port means 0.
  const m = /^\[([0-9a-fA-F:.]+)\](?::(\d+))?$/.exec(text) ?? /^([0-9.]+)(?::(\d+))?$/.exec(text);
  const address = m ? canonicalIP(m[1]) : null;
  const port = m?.[2] === undefined ? 0 : Number(m[2]);
  if (!m || !address || !Number.isInteger(port) || port > 65535) throw new IpvsSyntaxError(`illegal ${what} address[:port] specified`);
  return { address, port };
}

function parseNumber(text: string | undefined, min: number, max: number, what: string): number {
  const n = text !== undefined && /^\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isInteger(n) || n < min || n > max) throw new IpvsSyntaxError(what === 'timeout' ? `invalid timeout value \`${text}' specified` : `illegal ${what} specified`);
  return n;
}

/** IPVSADM_COMMAND names kproxy's ops as ipvsadm's messages name its commands. */
const IPVSADM_COMMAND: Record<string, string> = {
  'add-service': 'add-service',
  'edit-service': 'edit-service',
  'delete-service': 'delete-service',
  'add-real': 'add-server',
  'edit-real': 'edit-server',
  'delete-real': 'delete-server',
};

/**
 * OPTION_RULES is the part of ipvsadm's commands_v_options table for the
 * options kproxy parses, in ipvsadm's column order: "+" required, "x" refused.
 */
const OPTION_RULES: readonly [option: string, rules: Record<string, '+' | 'x' | ' '>][] = [
  ['service-address', { 'add-service': '+', 'edit-service': '+', 'delete-service': '+', 'add-real': '+', 'edit-real': '+', 'delete-real': '+' }],
  ['scheduler', { 'add-service': ' ', 'edit-service': ' ', 'delete-service': 'x', 'add-real': 'x', 'edit-real': 'x', 'delete-real': 'x' }],
  ['persistent', { 'add-service': ' ', 'edit-service': ' ', 'delete-service': 'x', 'add-real': 'x', 'edit-real': 'x', 'delete-real': 'x' }],
  ['real-server', { 'add-service': 'x', 'edit-service': 'x', 'delete-service': 'x', 'add-real': '+', 'edit-real': '+', 'delete-real': '+' }],
  ['forwarding-method', { 'add-service': 'x', 'edit-service': 'x', 'delete-service': 'x', 'add-real': ' ', 'edit-real': ' ', 'delete-real': 'x' }],
  ['weight', { 'add-service': 'x', 'edit-service': 'x', 'delete-service': 'x', 'add-real': ' ', 'edit-real': ' ', 'delete-real': 'x' }],
  ['sched-flags', { 'add-service': ' ', 'edit-service': ' ', 'delete-service': 'x', 'add-real': 'x', 'edit-real': 'x', 'delete-real': 'x' }],
];

/** checkOptions is ipvsadm's generic_opt_check for these commands, with its messages. */
function checkOptions(op: string, seen: ReadonlySet<string>): void {
  const name = IPVSADM_COMMAND[op];
  for (const [option, rules] of OPTION_RULES) {
    const rule = rules[op];
    if (!seen.has(option) && rule === '+') throw new IpvsSyntaxError(`You need to supply the '${option}' option for the '${name}' command`);
    if (seen.has(option) && rule === 'x') throw new IpvsSyntaxError(`Illegal '${option}' option with the '${name}' command`);
  }
}

const TRY_HELP = "Try `ipvsadm -h' or 'ipvsadm --help' for more information.";
const COMMAND_WORDS = new Set([
  '-A',
  '--add-service',
  '-E',
  '--edit-service',
  '-D',
  '--delete-service',
  '-a',
  '--add-server',
  '-e',
  '--edit-server',
  '-d',
  '--delete-server',
  '-C',
  '--clear',
  '--set',
]);

/**
 * parseIpvsCommand reads one ipvsadm command line (without "ipvsadm") into a
 * command, applying the rules of ipvsadm 1.31 as Debian builds it (checked
 * against the binary in test/kernel/ipvs-ipvsadm.test.ts): the command first,
 * other options in any order, scheduler flags checked against the final
 * scheduler, weights up to 2^31-1; default scheduler wlc, weight 1 and
 * forwarding "route" (-g). Throws IpvsSyntaxError with ipvsadm's messages.
 */
export function parseIpvsCommand(line: string): IpvsCommand {
  const words = line
    .trim()
    .split(/\s+/)
    .filter((w) => w !== '');
  let cmd: string | null = null;
  let svc: { protocol: IpvsProtocol; address: string; port: number } | null = null;
  let real: { address: string; port: number } | null = null;
  let scheduler = '';
  let persistence = 0;
  let flags: string[] = [];
  let weight = 1;
  let forward: IpvsForward = 'route';
  let timeouts: number[] | null = null;
  const seen = new Set<string>();
  // The command must be the first option (else ipvsadm prints its "Try" hint and
  // exits); a later command option is an invalid option.
  if (!COMMAND_WORDS.has(words[0] ?? '')) throw new IpvsSyntaxError(TRY_HELP);
  const setCmd = (c: string, word: string, index: number) => {
    if (index !== 0 || cmd !== null) throw new IpvsSyntaxError(`invalid option \`${word}'`);
    cmd = c;
  };
  for (let i = 0; i < words.length; i++) {
    const w = words[i];
    const arg = () => {
      const v = words[++i];
      if (v === undefined) throw new IpvsSyntaxError(`${w}: missing argument`, false);
      return v;
    };
    const once = (name: string) => {
      if (seen.has(name)) throw new IpvsSyntaxError(`multiple '${name}' options specified`);
      seen.add(name);
    };
    switch (w) {
      case '-A':
      case '--add-service':
        setCmd('add-service', w, i);
        break;
      case '-E':
      case '--edit-service':
        setCmd('edit-service', w, i);
        break;
      case '-D':
      case '--delete-service':
        setCmd('delete-service', w, i);
        break;
      case '-a':
      case '--add-server':
        setCmd('add-real', w, i);
        break;
      case '-e':
      case '--edit-server':
        setCmd('edit-real', w, i);
        break;
      case '-d':
      case '--delete-server':
        setCmd('delete-real', w, i);
        break;
      case '-C':
      case '--clear':
        setCmd('clear', w, i);
        break;
      case '--set': {
        setCmd('set-timeouts', w, i);
        timeouts = [arg(), arg(), arg()].map((t) => parseNumber(t, 0, 2678400, 'timeout'));
        break;
      }
      case '-t':
      case '--tcp-service':
      case '-u':
      case '--udp-service':
      case '--sctp-service': {
        once('service-address');
        const protocol: IpvsProtocol = w === '-t' || w === '--tcp-service' ? 'TCP' : w === '--sctp-service' ? 'SCTP' : 'UDP';
        svc = { protocol, ...parseAddrPort(arg(), 'virtual server') };
        break;
      }
      case '-r':
      case '--real-server':
        once('real-server');
        real = parseAddrPort(arg(), 'real server');
        break;
      case '-s':
      case '--scheduler': {
        once('scheduler');
        // ipvsadm keeps 15 characters and lets the kernel judge the name.
        scheduler = arg().slice(0, 15);
        break;
      }
      case '-p':
      case '--persistent': {
        once('persistent');
        // -p takes an optional value: the next word, unless it is an option.
        const next = words[i + 1];
        persistence = next !== undefined && !next.startsWith('-') ? parseNumber(words[++i], 1, 2678400, 'timeout') : 300;
        break;
      }
      case '-b':
      case '--sched-flags': {
        once('sched-flags');
        // Checked after every option is read, against the final scheduler (as ipvsadm does).
        flags = arg().split(',');
        break;
      }
      case '-w':
      case '--weight':
        once('weight');
        weight = parseNumber(arg(), 0, 2147483647, 'weight');
        break;
      case '-m':
      case '--masquerading':
        once('forwarding-method');
        forward = 'masq';
        break;
      case '-g':
      case '--gatewaying':
        once('forwarding-method');
        forward = 'route';
        break;
      case '-i':
      case '--ipip':
        once('forwarding-method');
        forward = 'tunnel';
        break;
      default:
        throw new IpvsSyntaxError(`${w}: unknown option`, false);
    }
  }
  if (cmd === null) throw new IpvsSyntaxError(TRY_HELP);
  const sched = scheduler || IPVSADM_DEFAULT_SCHEDULER;
  for (const f of flags) {
    if (!(f in SCHED_FLAGS)) throw new IpvsSyntaxError(`invalid scheduler flag \`${f}'`);
    const only = SCHED_FLAGS[f];
    if (only !== null && only !== sched) throw new IpvsSyntaxError(`incompatible scheduler flag \`${f}'`);
  }
  const c: string = cmd;
  if (c === 'clear') return { op: 'clear' };
  if (c === 'set-timeouts') return { op: 'set-timeouts', tcp: timeouts![0], tcpFin: timeouts![1], udp: timeouts![2] };
  checkOptions(c, seen);
  const service: { protocol: IpvsProtocol; address: string; port: number } = svc!;
  if (c === 'add-service' || c === 'edit-service') {
    if (service.port === 0 && persistence === 0) throw new IpvsSyntaxError('Zero port specified for non-persistent service');
    const s: IpvsVirtualServer = { ...service, scheduler: scheduler || IPVSADM_DEFAULT_SCHEDULER, persistence, schedFlags: [...flags].sort() };
    return { op: c, service: s };
  }
  if (c === 'delete-service') return { op: c, service };
  // A real server without a port takes the service's (ipvsadm copies vport to dport).
  const given: { address: string; port: number } = real!;
  const r = given.port === 0 ? { ...given, port: service.port } : given;
  if (c === 'delete-real') return { op: c, service, real: r };
  // ipvsadm forces the service port on direct-routed and tunnelled real servers.
  const port = forward === 'masq' ? r.port : service.port;
  return { op: c as 'add-real' | 'edit-real', service, real: { address: r.address, port, weight, forward } };
}
