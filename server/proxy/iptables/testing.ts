import type { IPFamily } from '../../net/ip.ts';
import { testConfig } from '../../config/testing.ts';
import { FakeClock } from '../../clock-fake.ts';
import type { ProxyConfig } from '../../config/types.ts';
import type { IptablesRunner } from '../../kernel/iptables.ts';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { FakeNetInterfaces } from '../../kernel/netif-fake.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import { silentLogger, type Logger } from '../../log.ts';
import { parseManifest } from '../../sources/file/manifest.ts';
import type { EndpointSlice, Node, Service } from '../kube-objects.ts';
import { ProxyState } from '../proxy-state.ts';
import { createIptablesBackend, SYSCTL_ROUTE_LOCALNET, SYSCTL_TCP_BE_LIBERAL, type IptablesBackend } from './proxier.ts';

/**
 * Test helpers for the iptables backend: a complete ProxyConfig with
 * kube-proxy's defaults, manifests turned into a ProxyState, and a backend
 * wired to the simulated kernel.
 */

export { testConfig };

/** stateFromObjects feeds objects to a fresh ProxyState and marks the sources synced. */
export function stateFromObjects(nodeName: string, objects: readonly (Service | EndpointSlice | Node)[], clock = new FakeClock(), family: IPFamily = 'IPv4'): ProxyState {
  const state = new ProxyState({ family, nodeName, clock });
  for (const o of objects) {
    if (o.kind === 'Service') state.onService(null, o as Service);
    else if (o.kind === 'EndpointSlice') state.onEndpointSlice(null, o as EndpointSlice);
    else if (o.kind === 'Node') state.onNode(null, o as Node);
  }
  state.onSynced('Service');
  state.onSynced('EndpointSlice');
  state.onSynced('Node');
  return state;
}

/**
 * objectsFromYaml reads multi-document manifests: a golden case's input.yaml,
 * whose `kind: GoldenOptions` document (the case's settings, no Kubernetes
 * object) is read as a comment, so the file source's rules apply to the rest.
 */
export function objectsFromYaml(file: string, text: string): (Service | EndpointSlice | Node)[] {
  return parseManifest(file, withoutGoldenOptions(text)).objects.map((o) => o.object as Service | EndpointSlice | Node);
}

/** withoutGoldenOptions turns the lines of `kind: GoldenOptions` documents into comments, every other line kept where it was. */
function withoutGoldenOptions(text: string): string {
  const docs = text.split(/^(?=---[ \t]*(?:#.*)?$)/m);
  return docs.map((d) => (/^kind: GoldenOptions[ \t]*$/m.test(d) ? d.replace(/^(?!---)/gm, '# ') : d)).join('');
}

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

/** rewriteLines applies `lose` to each line of a text: the line it returns, or none for null. */
export function rewriteLines(text: string, lose: (line: string) => string | null): string {
  return text
    .split('\n')
    .map(lose)
    .filter((l): l is string => l !== null)
    .join('\n');
}

/**
 * lossyIptables: the simulated kernel behind a writer that rewrites every
 * restore input with `lose` first (the way a writer that silently programs
 * less than it is given would): what verifications must catch.
 */
export function lossyIptables(kernel: SimulatedIptables, lose: (line: string) => string | null): IptablesRunner {
  return {
    family: kernel.family,
    flavor: kernel.flavor,
    hasRandomFully: kernel.hasRandomFully,
    restore: (text, o) => kernel.restore(rewriteLines(text, lose), o),
    save: (o) => kernel.save(o),
    ensureChain: (t, c) => kernel.ensureChain(t, c),
    chainExists: (t, c) => kernel.chainExists(t, c),
    checkRule: (t, c, a) => kernel.checkRule(t, c, a),
    insertRule: (t, c, a) => kernel.insertRule(t, c, a),
    deleteRule: (t, c, a) => kernel.deleteRule(t, c, a),
    flushChain: (t, c) => kernel.flushChain(t, c),
    deleteChain: (t, c) => kernel.deleteChain(t, c),
    countChains: (ask) => kernel.countChains(ask),
  };
}
