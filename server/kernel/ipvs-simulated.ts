import { recordCall, UNBOUNDED, type CallLogLimits } from './call-log.ts';
import { IpvsSyntaxError, parseIpvsCommand, realServerKey, virtualServerKey, type IpvsRealServer, type IpvsService, type IpvsVirtualServer } from './ipvs-batch.ts';
import { parseIpvsList, parseIpvsSave, parseIpvsStats, renderIpvsList, renderIpvsSave, renderIpvsStats, type IpvsCounters, type IpvsServiceStats } from './ipvs-listing.ts';
import { IpvsRestoreError, type IpvsRunner } from './ipvs.ts';

/** The schedulers a stock kernel ships as ip_vs_<name> modules. */
export const KERNEL_SCHEDULERS = ['rr', 'wrr', 'lc', 'wlc', 'lblc', 'lblcr', 'dh', 'sh', 'sed', 'nq', 'fo', 'ovf', 'mh', 'twos'];

interface Entry {
  vs: IpvsVirtualServer;
  reals: Map<string, { rs: IpvsRealServer; active: number; inactive: number }>;
  counters: IpvsCounters;
  realCounters: Map<string, IpvsCounters>;
}

export interface SimulatedIpvsCall {
  readonly op: 'save' | 'list' | 'stats' | 'restore';
  readonly input?: string;
}

const ZERO: IpvsCounters = { conns: 0, inPackets: 0, outPackets: 0, inBytes: 0, outBytes: 0 };

/**
 * SimulatedIpvs is an in-memory IPVS table behind the IpvsRunner interface. Its
 * restore() reads `ipvsadm -R` input line by line with ipvsadm's parser and the
 * kernel's answers: a bad value stops the batch (lines before it stay applied,
 * as ipvsadm exits 2), an unknown option skips its line, a refused line
 * ("Service already exists", "No such destination") is reported; in the last
 * two cases the batch goes on. Listings are rendered
 * in ipvsadm's formats and parsed back, so the parsers are exercised too.
 * Tests set connection counts and traffic counters directly.
 */
export class SimulatedIpvs implements IpvsRunner {
  readonly #services = new Map<string, Entry>();
  readonly calls: SimulatedIpvsCall[] = [];
  /** callLogLimits bound the call history (default: all; --dry-run daemons keep little). */
  callLogLimits: CallLogLimits = UNBOUNDED;
  /** schedulers: scheduler modules this simulated kernel has; others are refused like a missing ip_vs_<name>. */
  schedulers = new Set(KERNEL_SCHEDULERS);
  timeouts = { tcp: 900, tcpFin: 120, udp: 300 };
  /** failNext: the next restore fails with this stderr line, applying nothing (tests). */
  failNext: string | null = null;

  get restores(): string[] {
    return this.calls.filter((c) => c.op === 'restore').map((c) => c.input!);
  }

  async save(): Promise<IpvsService[]> {
    recordCall(this.calls, { op: 'save' }, this.callLogLimits);
    return parseIpvsSave(this.saveText());
  }

  async list(): Promise<IpvsService[]> {
    recordCall(this.calls, { op: 'list' }, this.callLogLimits);
    return parseIpvsList(this.listText());
  }

  async stats(): Promise<Map<string, IpvsServiceStats>> {
    recordCall(this.calls, { op: 'stats' }, this.callLogLimits);
    return parseIpvsStats(this.statsText());
  }

  /** saveText is what `ipvsadm -Sn` would print. */
  saveText(): string {
    return renderIpvsSave(this.#snapshot());
  }

  /** listText is what `ipvsadm -Ln --exact` would print. */
  listText(): string {
    return renderIpvsList(this.#snapshot());
  }

  /** statsText is what `ipvsadm -Ln --stats --exact` would print. */
  statsText(): string {
    const stats = new Map<string, IpvsServiceStats>();
    for (const [key, e] of this.#services) stats.set(key, { key, counters: e.counters, reals: e.realCounters });
    return renderIpvsStats(this.#snapshot(), stats);
  }

  #snapshot(): IpvsService[] {
    return [...this.#services.values()].map((e) => ({
      ...e.vs,
      reals: [...e.reals.values()].map((r) => ({ ...r.rs, activeConns: r.active, inactiveConns: r.inactive })),
    }));
  }

  async restore(batch: string): Promise<void> {
    recordCall(this.calls, { op: 'restore', input: batch }, this.callLogLimits);
    if (this.failNext !== null) {
      const msg = this.failNext;
      this.failNext = null;
      throw new IpvsRestoreError(`ipvsadm -R refused part of the batch: ${msg}`, [msg], false);
    }
    const messages: string[] = [];
    let syntax = false;
    for (const line of batch.split('\n')) {
      if (line.trim() === '') continue;
      let cmd;
      try {
        cmd = parseIpvsCommand(line);
      } catch (err) {
        messages.push((err as Error).message);
        if (err instanceof IpvsSyntaxError && !err.fatal) continue;
        syntax = true;
        break;
      }
      const refused = this.#apply(cmd);
      if (refused) messages.push(refused);
    }
    if (messages.length) throw new IpvsRestoreError(`ipvsadm -R refused ${syntax ? 'a line it could not parse' : 'part of the batch'}: ${messages.join('; ')}`, messages, syntax);
  }

  /** #apply runs one command as the kernel would; returns ipvsadm's complaint, or null. */
  #apply(cmd: ReturnType<typeof parseIpvsCommand>): string | null {
    switch (cmd.op) {
      case 'clear':
        this.#services.clear();
        return null;
      case 'set-timeouts':
        if (cmd.tcp) this.timeouts.tcp = cmd.tcp;
        if (cmd.tcpFin) this.timeouts.tcpFin = cmd.tcpFin;
        if (cmd.udp) this.timeouts.udp = cmd.udp;
        return null;
    }
    const key = virtualServerKey(cmd.service);
    const entry = this.#services.get(key);
    switch (cmd.op) {
      case 'add-service':
        if (entry) return 'Service already exists';
        if (!this.schedulers.has(cmd.service.scheduler)) return 'Scheduler or persistence engine not found';
        this.#services.set(key, { vs: cmd.service, reals: new Map(), counters: { ...ZERO }, realCounters: new Map() });
        return null;
      case 'edit-service':
        if (!entry) return 'No such service';
        if (!this.schedulers.has(cmd.service.scheduler)) return 'Scheduler or persistence engine not found';
        entry.vs = cmd.service;
        return null;
      case 'delete-service':
        if (!entry) return 'No such service';
        this.#services.delete(key);
        return null;
      case 'add-real': {
        if (!entry) return 'Service not defined';
        const rk = realServerKey(cmd.real);
        if (entry.reals.has(rk)) return 'Destination already exists';
        entry.reals.set(rk, { rs: cmd.real, active: 0, inactive: 0 });
        return null;
      }
      case 'edit-real': {
        if (!entry) return 'Service not defined';
        const cur = entry.reals.get(realServerKey(cmd.real));
        if (!cur) return 'No such destination';
        cur.rs = cmd.real;
        return null;
      }
      case 'delete-real': {
        if (!entry) return 'Service not defined';
        const rk = realServerKey(cmd.real);
        if (!entry.reals.delete(rk)) return 'No such destination';
        entry.realCounters.delete(rk);
        return null;
      }
    }
  }

  /** services returns the table, sorted as ipvsadm lists it. */
  services(): IpvsService[] {
    return parseIpvsList(this.listText());
  }

  /** setConnections sets a real server's connection counts ("10.96.0.1:80/TCP", "10.244.0.5:8080"). */
  setConnections(vsKey: string, rsKey: string, active: number, inactive: number): void {
    const r = this.#services.get(vsKey)?.reals.get(rsKey);
    if (!r) throw new Error(`no real server ${rsKey} in ${vsKey}`);
    r.active = active;
    r.inactive = inactive;
  }

  /** addTraffic adds to a virtual server's and one of its real servers' counters. */
  addTraffic(vsKey: string, rsKey: string, c: IpvsCounters): void {
    const e = this.#services.get(vsKey);
    if (!e?.reals.has(rsKey)) throw new Error(`no real server ${rsKey} in ${vsKey}`);
    const add = (a: IpvsCounters): IpvsCounters => ({
      conns: a.conns + c.conns,
      inPackets: a.inPackets + c.inPackets,
      outPackets: a.outPackets + c.outPackets,
      inBytes: a.inBytes + c.inBytes,
      outBytes: a.outBytes + c.outBytes,
    });
    e.counters = add(e.counters);
    e.realCounters.set(rsKey, add(e.realCounters.get(rsKey) ?? ZERO));
  }
}
