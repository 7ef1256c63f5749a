import { recordCall, UNBOUNDED, type CallLogLimits } from './call-log.ts';
import { canonicalIP } from '../net/ip.ts';
import type { InterfaceAddress } from './netif.ts';
import { NetlinkBatchError, type LinkTable, type Netlink } from './netlink.ts';

/**
 * SimulatedNetlink is an in-memory link table behind the Netlink interface. batch()
 * takes the `ip -batch` commands NetlinkBatch writes, with iproute2's answers,
 * and stops at the first refused line like ip does without -force.
 */
export class SimulatedNetlink implements Netlink {
  readonly #links = new Map<string, { dummy: boolean; addrs: InterfaceAddress[] }>();
  readonly calls: { op: 'show' | 'batch'; input?: string }[] = [];
  /** callLogLimits bound the call history (default: all; --dry-run daemons keep little). */
  callLogLimits: CallLogLimits = UNBOUNDED;
  /** dummySupported: false models a kernel without the dummy link type. */
  dummySupported = true;

  /** defaults: lo and eth0 with a node address, like FakeNetInterfaces. */
  constructor(links: Record<string, string[]> = { lo: ['127.0.0.1/8', '::1/128'], eth0: ['10.0.0.10/24'] }) {
    for (const [name, addrs] of Object.entries(links)) {
      this.#links.set(name, { dummy: false, addrs: addrs.map((a) => toAddress(name, a)) });
    }
  }

  get batches(): string[] {
    return this.calls.filter((c) => c.op === 'batch').map((c) => c.input!);
  }

  async show(): Promise<LinkTable> {
    recordCall(this.calls, { op: 'show' }, this.callLogLimits);
    return this.table();
  }

  /** table returns the links without recording a call. */
  table(): LinkTable {
    const out: LinkTable = new Map();
    for (const [name, l] of this.#links)
      out.set(
        name,
        l.addrs.map((a) => ({ ...a })),
      );
    return out;
  }

  /** addresses lists one link's addresses ("10.96.0.1"), sorted; [] when the link is missing. */
  addresses(link: string): string[] {
    return (this.#links.get(link)?.addrs ?? []).map((a) => a.address).sort();
  }

  /** setLink replaces a link's addresses ("10.0.0.10/24"), e.g. a node address appearing. */
  setLink(name: string, addrs: string[]): void {
    this.#links.set(name, { dummy: this.#links.get(name)?.dummy ?? false, addrs: addrs.map((a) => toAddress(name, a)) });
  }

  async batch(commands: string): Promise<void> {
    recordCall(this.calls, { op: 'batch', input: commands }, this.callLogLimits);
    const lines = commands.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i].trim();
      if (line === '') continue;
      const refused = this.#apply(line.split(/\s+/));
      if (refused) throw new NetlinkBatchError(`ip -batch failed at line ${i + 1} (exit 1): ${refused}: ${line}`, i + 1);
    }
  }

  #apply(w: string[]): string | null {
    if (w[0] === 'link' && w[1] === 'add' && w[3] === 'type' && w[4] === 'dummy' && w.length === 5) {
      if (!this.dummySupported) return 'Error: Unknown device type.';
      if (this.#links.has(w[2])) return 'RTNETLINK answers: File exists';
      this.#links.set(w[2], { dummy: true, addrs: [] });
      return null;
    }
    if (w[0] === 'link' && w[1] === 'del' && w.length === 3) {
      if (!this.#links.delete(w[2])) return `Cannot find device "${w[2]}"`;
      return null;
    }
    if (w[0] === 'addr' && (w[1] === 'add' || w[1] === 'del') && w[3] === 'dev' && w.length === 5) {
      const link = this.#links.get(w[4]);
      if (!link) return `Cannot find device "${w[4]}"`;
      const a = toAddress(w[4], w[2]);
      const i = link.addrs.findIndex((x) => x.address === a.address);
      if (w[1] === 'add') {
        if (i >= 0) return 'RTNETLINK answers: File exists';
        link.addrs.push(a);
      } else {
        if (i < 0) return 'RTNETLINK answers: Cannot assign requested address';
        link.addrs.splice(i, 1);
      }
      return null;
    }
    return `Error: either "dev" is duplicate, or "${w.at(-1)}" is a garbage.`;
  }
}

function toAddress(ifname: string, text: string): InterfaceAddress {
  const [ip, prefix] = text.split('/');
  const address = canonicalIP(ip);
  if (!address) throw new Error(`bad address ${text}`);
  const v6 = address.includes(':');
  return { ifname, family: v6 ? 'IPv6' : 'IPv4', address, prefixLength: prefix === undefined ? (v6 ? 128 : 32) : Number(prefix) };
}
