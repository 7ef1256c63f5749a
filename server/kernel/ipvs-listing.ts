import { IpvsError } from '../errors.ts';
import { canonicalIP, compareIPs } from '../net/ip.ts';
import {
  hostPort,
  parseIpvsCommand,
  realServerKey,
  serviceOption,
  virtualServerKey,
  type IpvsForward,
  type IpvsProtocol,
  type IpvsRealServer,
  type IpvsService,
  type IpvsVirtualServer,
} from './ipvs-batch.ts';

/**
 * ipvsadm's three listings, parsed and rendered: `-Sn` (the configuration as
 * commands), `-Ln --exact` (with connection counts) and `-Ln --stats --exact`
 * (traffic counters). The renderers print lines as ipvsadm 1.31 prints them,
 * sorted by protocol, address and port, so the simulated kernel's listings read
 * like the real ones and the parsers are tested against both.
 */

const PROTOCOL_NUMBER: Record<IpvsProtocol, number> = { TCP: 6, UDP: 17, SCTP: 132 };

/**
 * compareServices orders virtual servers by protocol, address and port, the
 * keys ipvsadm sorts by. (ipvsadm 1.31 compares addresses by an int difference
 * that wraps past 2^31, so it lists 192.0.2.x before 10.x; nothing in kproxy
 * depends on listing order.)
 */
export function compareServices(a: IpvsVirtualServer, b: IpvsVirtualServer): number {
  return PROTOCOL_NUMBER[a.protocol] - PROTOCOL_NUMBER[b.protocol] || compareIPs(a.address, b.address) || a.port - b.port;
}

/** compareReals orders real servers as ipvsadm lists them (address, then port). */
export function compareReals(a: Pick<IpvsRealServer, 'address' | 'port'>, b: Pick<IpvsRealServer, 'address' | 'port'>): number {
  return compareIPs(a.address, b.address) || a.port - b.port;
}

/** parseIpvsSave reads `ipvsadm -Sn` output (add commands only) into services. */
export function parseIpvsSave(text: string): IpvsService[] {
  const services = new Map<string, { vs: IpvsVirtualServer; reals: IpvsRealServer[] }>();
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    let cmd;
    try {
      cmd = parseIpvsCommand(line);
    } catch (err) {
      throw new IpvsError(`ipvsadm -Sn line ${i + 1} is not understood: ${line}`, { cause: err });
    }
    if (cmd.op === 'add-service') services.set(virtualServerKey(cmd.service), { vs: cmd.service, reals: [] });
    else if (cmd.op === 'add-real') {
      const s = services.get(virtualServerKey(cmd.service));
      if (!s) throw new IpvsError(`ipvsadm -Sn line ${i + 1} adds a real server to an unlisted virtual server: ${line}`);
      s.reals.push(cmd.real);
    } else throw new IpvsError(`ipvsadm -Sn line ${i + 1} is not a listing line: ${line}`);
  }
  return [...services.values()].map((s) => ({ ...s.vs, reals: s.reals }));
}

const FORWARD_NAME: Record<string, IpvsForward> = { Masq: 'masq', Route: 'route', Local: 'route', Tunnel: 'tunnel' };
const FORWARD_TITLE: Record<IpvsForward, string> = { masq: 'Masq', route: 'Route', tunnel: 'Tunnel' };

function parseListAddr(text: string, line: string): { address: string; port: number } {
  const m = /^\[(.+)\]:(\d+)$/.exec(text) ?? /^([^:]+):(\d+)$/.exec(text);
  const address = m ? canonicalIP(m[1]) : null;
  if (!m || !address) throw new IpvsError(`ipvsadm listing line is not understood: ${line}`);
  return { address, port: Number(m[2]) };
}

/**
 * parseIpvsList reads `ipvsadm -Ln --exact`: each service line ("TCP
 * 10.96.0.1:443 rr (mh-port) persistent 10800") followed by its "  ->"
 * destination lines with forwarding method, weight and connection counts.
 */
export function parseIpvsList(text: string): IpvsService[] {
  const out: { vs: IpvsVirtualServer; reals: IpvsRealServer[] }[] = [];
  for (const line of text.split('\n')) {
    const svc = /^(TCP|UDP|SCTP)\s+(\S+)\s+(\S+)(.*)$/.exec(line);
    if (svc) {
      const { address, port } = parseListAddr(svc[2], line);
      const rest = svc[4];
      const flags = /\(([^)]*)\)/.exec(rest)?.[1];
      const persistent = /\bpersistent (\d+)/.exec(rest);
      out.push({
        vs: {
          protocol: svc[1] as IpvsProtocol,
          address,
          port,
          scheduler: svc[3],
          persistence: persistent ? Number(persistent[1]) : 0,
          schedFlags: flags ? flags.split(',').sort() : [],
        },
        reals: [],
      });
      continue;
    }
    const dest = /^\s+->\s+(\S+)\s+(Masq|Route|Local|Tunnel)\s+(\d+)\s+(\d+)\s+(\d+)\s*$/.exec(line);
    if (dest) {
      const cur = out.at(-1);
      if (!cur) throw new IpvsError(`ipvsadm listing has a destination before any service: ${line}`);
      const { address, port } = parseListAddr(dest[1], line);
      cur.reals.push({ address, port, forward: FORWARD_NAME[dest[2]], weight: Number(dest[3]), activeConns: Number(dest[4]), inactiveConns: Number(dest[5]) });
    }
  }
  return out.map((s) => ({ ...s.vs, reals: s.reals }));
}

/** IpvsCounters are one row of `ipvsadm -Ln --stats --exact`. */
export interface IpvsCounters {
  readonly conns: number;
  readonly inPackets: number;
  readonly outPackets: number;
  readonly inBytes: number;
  readonly outBytes: number;
}

/** IpvsServiceStats are a virtual server's counters and its real servers' ("ip:port" -> counters). */
export interface IpvsServiceStats {
  readonly key: string;
  readonly counters: IpvsCounters;
  readonly reals: ReadonlyMap<string, IpvsCounters>;
}

function counters(fields: string[]): IpvsCounters {
  const [conns, inPackets, outPackets, inBytes, outBytes] = fields.map(Number);
  return { conns, inPackets, outPackets, inBytes, outBytes };
}

/** parseIpvsStats reads `ipvsadm -Ln --stats --exact`, keyed by virtual server ("10.96.0.1:443/TCP"). */
export function parseIpvsStats(text: string): Map<string, IpvsServiceStats> {
  const out = new Map<string, IpvsServiceStats>();
  let cur: { key: string; counters: IpvsCounters; reals: Map<string, IpvsCounters> } | null = null;
  for (const line of text.split('\n')) {
    const svc = /^(TCP|UDP|SCTP)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$/.exec(line);
    if (svc) {
      const { address, port } = parseListAddr(svc[2], line);
      cur = { key: virtualServerKey({ protocol: svc[1] as IpvsProtocol, address, port }), counters: counters(svc.slice(3)), reals: new Map() };
      out.set(cur.key, cur);
      continue;
    }
    const dest = /^\s+->\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$/.exec(line);
    if (dest && cur) {
      const { address, port } = parseListAddr(dest[1], line);
      cur.reals.set(realServerKey({ address, port }), counters(dest.slice(2)));
    }
  }
  return out;
}

const sorted = (services: readonly IpvsService[]) => [...services].sort(compareServices).map((s) => ({ ...s, reals: [...s.reals].sort(compareReals) }));

/** renderIpvsSave prints services as `ipvsadm -Sn` does. */
export function renderIpvsSave(services: readonly IpvsService[]): string {
  const out: string[] = [];
  for (const s of sorted(services)) {
    let line = `-A ${serviceOption(s)} -s ${s.scheduler}`;
    if (s.persistence > 0) line += ` -p ${s.persistence}`;
    if (s.schedFlags.length) line += ` -b ${s.schedFlags.join(',')}`;
    out.push(line);
    const fwd = { masq: '-m', route: '-g', tunnel: '-i' } as const;
    for (const r of s.reals) out.push(`-a ${serviceOption(s)} -r ${realServerKey(r)} ${fwd[r.forward]} -w ${r.weight}`);
  }
  return out.map((l) => l + '\n').join('');
}

/** IPVS_VERSION_LINE is the header of ipvsadm's listings (kernel 1.2.1, default table size). */
export const IPVS_VERSION_LINE = 'IP Virtual Server version 1.2.1 (size=4096)';

const pad = (s: string, n: number) => s.padEnd(n);
const exact = (n: number) => {
  const s = String(n);
  return s.padStart(s.length <= 8 ? 9 : s.length + 1);
};

/** renderIpvsList prints services as `ipvsadm -Ln --exact` does. */
export function renderIpvsList(services: readonly IpvsService[]): string {
  const out = [IPVS_VERSION_LINE, 'Prot LocalAddress:Port Scheduler Flags', '  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn'];
  for (const s of sorted(services)) {
    let line = `${pad(s.protocol, 4)} ${hostPort(s.address, s.port)} ${s.scheduler}`;
    if (s.schedFlags.length) line += ` (${s.schedFlags.join(',')})`;
    if (s.persistence > 0) line += ` persistent ${s.persistence}`;
    out.push(line);
    for (const r of s.reals) {
      out.push(`  -> ${pad(realServerKey(r), 28)} ${pad(FORWARD_TITLE[r.forward], 7)} ${pad(String(r.weight), 6)} ${pad(String(r.activeConns ?? 0), 10)} ${pad(String(r.inactiveConns ?? 0), 10)}`);
    }
  }
  return out.map((l) => l + '\n').join('');
}

const ZERO: IpvsCounters = { conns: 0, inPackets: 0, outPackets: 0, inBytes: 0, outBytes: 0 };
const row = (c: IpvsCounters) => [c.conns, c.inPackets, c.outPackets, c.inBytes, c.outBytes].map(exact).join('');

/** renderIpvsStats prints services as `ipvsadm -Ln --stats --exact` does. */
export function renderIpvsStats(services: readonly IpvsService[], stats: ReadonlyMap<string, IpvsServiceStats>): string {
  const title = `${pad('Prot LocalAddress:Port', 33)} ${['Conns', 'InPkts', 'OutPkts', 'InBytes', 'OutBytes'].map((h) => h.padStart(8)).join(' ')}`;
  const out = [IPVS_VERSION_LINE, title, '  -> RemoteAddress:Port'];
  for (const s of sorted(services)) {
    const st = stats.get(virtualServerKey(s));
    out.push(`${pad(`${pad(s.protocol, 4)} ${hostPort(s.address, s.port)}`, 33)}${row(st?.counters ?? ZERO)}`);
    for (const r of s.reals) out.push(`  -> ${pad(realServerKey(r), 28)}${row(st?.reals.get(realServerKey(r)) ?? ZERO)}`);
  }
  return out.map((l) => l + '\n').join('');
}
