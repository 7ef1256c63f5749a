import { FakeClock } from '../../clock-fake.ts';
import { testConfig } from '../../config/testing.ts';
import type { ProxyConfig } from '../../config/types.ts';
import type { IpsetRunner } from '../../kernel/ipset.ts';
import { SimulatedIpset } from '../../kernel/ipset-simulated.ts';
import type { IpvsRunner } from '../../kernel/ipvs.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { SimulatedIpvs } from '../../kernel/ipvs-simulated.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { formatIptablesSave } from '../../kernel/iptables-save-parser.ts';
import { SimulatedNetlink } from '../../kernel/netlink-simulated.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import { silentLogger, type Logger } from '../../log.ts';
import type { EndpointSlice, Node, Service } from '../kube-objects.ts';
import type { ProxyState } from '../proxy-state.ts';
import { cleanupIpvs } from './cleanup.ts';
import { DUMMY_DEVICE } from './names.ts';
import { createIpvsBackend, type IpvsBackend } from './proxier.ts';
import { ipvsSysctls } from './sysctls.ts';

/** Test helpers for IPVS mode: a backend wired to the simulated IPVS, ipset, links, iptables and /proc/sys. */

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K] };

/** ipvsConfig returns kube-proxy's defaults in IPVS mode, with overrides. */
export function ipvsConfig(over: DeepPartial<ProxyConfig> = {}): ProxyConfig {
  return testConfig({ ...over, mode: 'ipvs', ipvs: { scheduler: 'rr', ...(over.ipvs ?? {}) } });
}

export interface IpvsHarness {
  backend: IpvsBackend;
  ipvs: SimulatedIpvs;
  ipset: SimulatedIpset;
  netlink: SimulatedNetlink;
  iptables: SimulatedIptables;
  sysctl: SimulatedSysctl;
  clock: FakeClock;
  /** sync runs one sync of the state's pending changes and throws its error. */
  sync(state: ProxyState, forceFull?: boolean): Promise<import('../backend.ts').BackendSyncResult>;
  /** kernel prints what the simulated kernel holds: IPVS, sets, kube-ipvs0 and the nat and filter tables. */
  kernel(): string;
}

export interface HarnessOptions {
  config?: ProxyConfig;
  nodeName?: string;
  /** links: the node's links and addresses ("10.0.0.10/24"); default lo and eth0 10.0.0.10. */
  links?: Record<string, string[]>;
  logger?: Logger;
  kernelRelease?: string;
  afterFirstSync?: () => Promise<unknown>;
  /** wrap: what the backend programs through instead of the simulated kernels themselves (tests put lossy writers in front). */
  wrap?: { ipvs?: (k: SimulatedIpvs) => IpvsRunner; ipset?: (k: SimulatedIpset) => IpsetRunner; iptables?: (k: SimulatedIptables) => IptablesRunner };
}

/** ipvsHarness builds an IPVS backend over the simulated kernel; its ipset refuses to destroy sets iptables rules match. */
export function ipvsHarness(opts: HarnessOptions = {}): IpvsHarness {
  const config = opts.config ?? ipvsConfig();
  const clock = new FakeClock();
  const ipvs = new SimulatedIpvs();
  const iptables = new SimulatedIptables();
  const ipset = new SimulatedIpset({
    references: (name) => (formatIptablesSave(iptables.dump(), { tables: ['nat', 'filter'] }).match(new RegExp(`--match-set ${name} `, 'g')) ?? []).length,
  });
  const netlink = new SimulatedNetlink(opts.links);
  // Kernel defaults: everything 0 but conn_reuse_mode, which starts at 1.
  const sysctl = new SimulatedSysctl(Object.fromEntries(ipvsSysctls(true, '5.4.0').map((s) => [s.name, s.name.endsWith('conn_reuse_mode') ? '1' : '0'])));
  const logger = opts.logger ?? silentLogger;
  const backend = createIpvsBackend({
    config,
    nodeName: opts.nodeName ?? 'node-a',
    family: 'IPv4',
    ipvs: opts.wrap?.ipvs?.(ipvs) ?? ipvs,
    ipset: opts.wrap?.ipset?.(ipset) ?? ipset,
    netlink,
    iptables: opts.wrap?.iptables?.(iptables) ?? iptables,
    sysctl,
    clock,
    logger,
    kernelRelease: opts.kernelRelease ?? '6.1.0',
    cleanup: () => cleanupIpvs({ ipvs, ipset, netlink, logger }),
    afterFirstSync: opts.afterFirstSync,
  });
  return {
    backend,
    ipvs,
    ipset,
    netlink,
    iptables,
    sysctl,
    clock,
    async sync(state, forceFull = false) {
      const r = await backend.sync({ state: state.checkout(), forceFull });
      if (r.error) throw r.error;
      return r;
    },
    kernel() {
      const bound = netlink.addresses(DUMMY_DEVICE);
      return [
        '# ipvsadm -Sn\n',
        ipvs.saveText(),
        '# ipset save\n',
        ipset.saveText(),
        `# ip addr show ${DUMMY_DEVICE}\n`,
        ...bound.map((a) => `${a}\n`),
        '# iptables-save -t nat -t filter\n',
        formatIptablesSave(iptables.dump(), { tables: ['nat', 'filter'] }),
      ].join('');
    },
  };
}

export type { EndpointSlice, Node, Service };
