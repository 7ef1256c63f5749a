import { errorMessage, NetlinkError } from '../errors.ts';
import { canonicalIP } from '../net/ip.ts';
import { execFile, type ExecFn } from './exec.ts';
import { ipAddrShow, type LinkTable } from './netif.ts';

/**
 * Links and addresses through iproute2: one `ip -j addr show` lists every link
 * with its addresses, one `ip -batch -` applies a sync's changes. IPVS mode
 * keeps every service address on a dummy link (kube-ipvs0) so the kernel
 * treats packets to them as local and hands them to IPVS.
 */

export type { LinkTable };

/** Netlink is kproxy's boundary to links and addresses. Implementations: below and SimulatedNetlink. */
export interface Netlink {
  /** show lists every link and its addresses (`ip -j addr show`). */
  show(): Promise<LinkTable>;
  /** batch runs commands with `ip -batch -`; ip stops at the first failure, which NetlinkBatchError names. */
  batch(commands: string): Promise<void>;
}

/** NetlinkBatchError is a refused `ip -batch` command; line is its 1-based line (0 if ip named none). */
export class NetlinkBatchError extends NetlinkError {
  readonly line: number;
  constructor(message: string, line: number, options?: { cause?: unknown }) {
    super(message, options);
    this.line = line;
  }
}

const LINK_NAME = /^[A-Za-z0-9_.-]{1,15}$/;

function checkLink(name: string): string {
  if (!LINK_NAME.test(name)) throw new NetlinkError(`${JSON.stringify(name)} is not a valid link name`);
  return name;
}

function hostPrefix(ip: string): string {
  const c = canonicalIP(ip);
  if (!c) throw new NetlinkError(`${JSON.stringify(ip)} is not an IP address`);
  return c.includes(':') ? `${c}/128` : `${c}/32`;
}

/** NetlinkBatch collects `ip -batch` commands; every value is validated before it is written. */
export class NetlinkBatch {
  readonly #lines: string[] = [];

  /** addDummy creates a dummy link; kube-proxy leaves it down (local routes for its addresses exist anyway). */
  addDummy(name: string): void {
    this.#lines.push(`link add ${checkLink(name)} type dummy`);
  }

  deleteLink(name: string): void {
    this.#lines.push(`link del ${checkLink(name)}`);
  }

  /** addAddress binds ip as a host address (/32, /128), as kube-proxy's netlink handle does. */
  addAddress(dev: string, ip: string): void {
    this.#lines.push(`addr add ${hostPrefix(ip)} dev ${checkLink(dev)}`);
  }

  delAddress(dev: string, ip: string): void {
    this.#lines.push(`addr del ${hostPrefix(ip)} dev ${checkLink(dev)}`);
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

/** createNetlink returns the iproute2-backed Netlink of the namespace the process runs in. */
export function createNetlink(exec: ExecFn = execFile): Netlink {
  return {
    show() {
      return ipAddrShow(exec);
    },
    async batch(commands) {
      let res;
      try {
        res = await exec('ip', ['-batch', '-'], { stdin: commands, timeoutMs: 30_000 });
      } catch (err) {
        throw new NetlinkError(`ip -batch could not run: ${errorMessage(err)}`, { cause: err });
      }
      if (res.code === 0) return;
      const m = /Command failed -:(\d+)/.exec(res.stderr);
      const line = m ? Number(m[1]) : 0;
      const said = res.stderr
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '' && !l.startsWith('Command failed'))
        .join('; ');
      const cmd = line ? `: ${commands.split('\n')[line - 1] ?? ''}` : '';
      throw new NetlinkBatchError(`ip -batch failed${line ? ` at line ${line}` : ''} (exit ${res.code}): ${said}${cmd}`, line);
    },
  };
}
