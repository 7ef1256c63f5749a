import type { IPFamily } from '../../net/ip.ts';
import { testConfig } from '../../config/testing.ts';
import { FakeClock } from '../../clock-fake.ts';
import type { ProxyConfig } from '../../config/types.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { FakeNetInterfaces } from '../../kernel/netif-fake.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import { silentLogger, type Logger } from '../../log.ts';
import { createIptablesBackend, SYSCTL_ROUTE_LOCALNET, SYSCTL_TCP_BE_LIBERAL, type IptablesBackend } from './proxier.ts';

/**
 * Test helpers for the iptables backend: a complete ProxyConfig with
 * kube-proxy's defaults and a backend wired to the simulated kernel
 * (manifests become a ProxyState with ../testing.ts's stateFromObjects).
 */

export { testConfig };

export interface Harness {
  backend: IptablesBackend;
  kernel: SimulatedIptables;
  sysctl: SimulatedSysctl;
  netif: FakeNetInterfaces;
  clock: FakeClock;
}

/** harness builds an iptables backend over the simulated kernel. */
export function harness(
  opts: {
    config?: ProxyConfig;
    nodeName?: string;
    family?: IPFamily;
    kernel?: SimulatedIptables;
    /** runner: what the backend programs through (default the simulated kernel; tests wrap it). */
    runner?: IptablesRunner;
    logger?: Logger;
    nfacct?: boolean;
    rulesPerCommit?: number;
    inPlaceEdits?: boolean;
    afterFirstSync?: () => Promise<unknown>;
  } = {},
): Harness {
  const family = opts.family ?? opts.kernel?.family ?? 'IPv4';
  const kernel = opts.kernel ?? new SimulatedIptables({ family });
  const sysctl = new SimulatedSysctl({ [SYSCTL_ROUTE_LOCALNET]: '0', [SYSCTL_TCP_BE_LIBERAL]: '0' });
  const netif = new FakeNetInterfaces();
  const clock = new FakeClock();
  const backend = createIptablesBackend({
    config: opts.config ?? testConfig(),
    nodeName: opts.nodeName ?? 'node-a',
    family,
    runner: opts.runner ?? kernel,
    netif,
    sysctl,
    clock,
    logger: opts.logger ?? silentLogger,
    ...(opts.nfacct ? { nfacct: { ctStateInvalid: true, localhostNodePorts: true } } : {}),
    ...(opts.rulesPerCommit ? { rulesPerCommit: opts.rulesPerCommit } : {}),
    ...(opts.inPlaceEdits !== undefined ? { inPlaceEdits: opts.inPlaceEdits } : {}),
    afterFirstSync: opts.afterFirstSync,
  });
  return { backend, kernel, sysctl, netif, clock };
}
