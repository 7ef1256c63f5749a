import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

/**
 * The layers point down (docs/architecture.md): the kproxy/layers rule of
 * eslint.config.js refuses an import of a layer the importing file's layer may
 * not use, however it is written (import, import type, export from, a dynamic
 * import(), an import('…') type), and lets each layer import what the table
 * allows.
 */
// Loading typescript-eslint's parser takes seconds on a busy machine: these tests get a minute.
describe('lint: layers point down', { timeout: 60_000 }, () => {
  const eslint = new ESLint();
  const refused = async (filePath: string, code: string): Promise<string[]> => {
    const [result] = await eslint.lintText(code, { filePath });
    return result.messages.filter((m) => m.ruleId === 'kproxy/layers').map((m) => m.message);
  };

  it('refuses server/kernel and server/config importing proxy, dashboard or http', async () => {
    expect(await refused('server/kernel/example.ts', "import type { Backend } from '../proxy/backend.ts';\nexport type B = Backend;\n")).toEqual([
      `server/kernel may not import server/proxy ('../proxy/backend.ts'): it imports only server/net, the bottom files (docs/architecture.md, "Layers").`,
    ]);
    expect(await refused('server/config/example.ts', "import type { Dashboard } from '../dashboard/dashboard.ts';\nexport type D = Dashboard;\n")).toHaveLength(1);
    expect(await refused('server/config/example.ts', "import type { NodeServers } from '../http/node-servers.ts';\nexport type N = NodeServers;\n")).toHaveLength(1);
  });

  it('refuses server/net importing anything of kproxy', async () => {
    expect(await refused('server/net/example.ts', "import { errorMessage } from '../errors.ts';\nexport const e = errorMessage;\n")).toEqual([
      `server/net may not import the bottom files ('../errors.ts'): it imports nothing of kproxy (docs/architecture.md, "Layers").`,
    ]);
  });

  it('keeps the HTTP layer free of the domain: it serves what it is handed', async () => {
    expect(await refused('server/http/example.ts', "import type { SyncObservers } from '../proxy/sync-observers.ts';\nexport type S = SyncObservers;\n")).toHaveLength(1);
    expect(await refused('server/http/example.ts', "import type { Dashboard } from '../dashboard/dashboard.ts';\nexport type D = Dashboard;\n")).toHaveLength(1);
    // Its tests drive proxy's health listener and the sync observers through the listeners.
    expect(await refused('server/http/example.test.ts', "import { createSyncObservers } from '../proxy/sync-observers.ts';\nexport const c = createSyncObservers;\n")).toEqual([]);
  });

  it('lets the tracer read the dashboard and never the dashboard the tracer', async () => {
    expect(await refused('server/trace/example.ts', "import type { KernelTables } from '../dashboard/kernel-view.ts';\nexport type K = KernelTables;\n")).toEqual([]);
    expect(await refused('server/dashboard/example.ts', "import { traceKernel } from '../trace/tracer.ts';\nexport const t = traceKernel;\n")).toEqual([
      expect.stringContaining('server/dashboard may not import server/trace'),
    ]);
    // Not in its tests either.
    expect(await refused('server/dashboard/http/example.test.ts', "import { dashboardTracer } from '../../trace/dashboard-trace.ts';\nexport const d = dashboardTracer;\n")).toHaveLength(1);
    expect(await refused('server/dashboard/example.ts', "import type { Assembled } from '../assemble.ts';\nexport type A = Assembled;\n")).toEqual([
      expect.stringContaining('server/dashboard may not import the composition'),
    ]);
    // kproxy trace's command loads the daemon for --dry-run: it is the composition's, at the top of server/, not the tracer's.
    expect(await refused('server/trace/command.ts', "export const load = () => import('../assemble.ts');\n")).toEqual([
      `server/trace may not import the composition ('../assemble.ts'): it imports only server/net, the bottom files, server/kernel, server/config, server/events, server/http, server/sources, server/proxy, server/dashboard (docs/architecture.md, "Layers").`,
    ]);
  });

  it('catches a dynamic import(), a re-export and an import() type as well', async () => {
    expect(await refused('server/kernel/example.ts', "export const load = () => import('../proxy/backend.ts');\n")).toHaveLength(1);
    expect(await refused('server/kernel/example.ts', "export * from '../proxy/backend.ts';\n")).toHaveLength(1);
    expect(await refused('server/kernel/example.ts', "export { createSyncObservers } from '../proxy/sync-observers.ts';\n")).toHaveLength(1);
    expect(await refused('server/http/example.ts', "export type B = import('../proxy/backend.ts').Backend;\n")).toHaveLength(1);
  });

  it('refuses one mode folder importing another, however it is written, in its tests too', async () => {
    expect(await refused('server/proxy/ipvs/host.ts', "import { iptablesFamilyUnsupported } from '../iptables/host.ts';\nexport const f = iptablesFamilyUnsupported;\n")).toEqual([
      `server/proxy/ipvs may not import server/proxy/iptables ('../iptables/host.ts'): a mode imports no other mode: what two modes share lives in server/proxy/ or server/proxy/xtables/ (docs/architecture.md, "Layers").`,
    ]);
    expect(await refused('server/proxy/nftables/example.ts', "import type { IpvsBackend } from '../ipvs/proxier.ts';\nexport type B = IpvsBackend;\n")).toHaveLength(1);
    expect(await refused('server/proxy/userspace/example.ts', "export const load = () => import('../nftables/cleanup.ts');\n")).toHaveLength(1);
    expect(await refused('server/proxy/iptables/example.ts', "export { cleanupIpvs } from '../ipvs/cleanup.ts';\n")).toHaveLength(1);
    expect(await refused('server/proxy/ipvs/example.test.ts', "import { harness } from '../iptables/testing.ts';\nexport const h = harness;\n")).toHaveLength(1);
    expect(await refused('server/proxy/userspace/testing.ts', "import { harness } from '../iptables/testing.ts';\nexport const h = harness;\n")).toHaveLength(1);
  });

  it('lets a mode import its own folder, the shared proxy code and the iptables language (xtables/)', async () => {
    expect(await refused('server/proxy/ipvs/example.ts', "import { startCanaryMonitor } from '../xtables/canary-monitor.ts';\nexport const s = startCanaryMonitor;\n")).toEqual([]);
    expect(await refused('server/proxy/userspace/example.ts', "import { validateServicePort } from '../service-port-validation.ts';\nexport const v = validateServicePort;\n")).toEqual([]);
    expect(await refused('server/proxy/nftables/example.ts', "import { cleanupNftables } from './cleanup.ts';\nexport const c = cleanupNftables;\n")).toEqual([]);
  });

  it('keeps the shared proxy code free of the modes, but in its tests; the composition imports every mode', async () => {
    expect(await refused('server/proxy/xtables/example.ts', "import { JUMP_RULES } from '../iptables/rules.ts';\nexport const j = JUMP_RULES;\n")).toEqual([
      `the shared proxy code may not import server/proxy/iptables ('../iptables/rules.ts'): it imports no mode: what needs every mode is the composition (docs/architecture.md, "Layers").`,
    ]);
    expect(await refused('server/proxy/example.ts', "import type { IpvsBackend } from './ipvs/proxier.ts';\nexport type B = IpvsBackend;\n")).toHaveLength(1);
    expect(await refused('server/proxy/metrics/example.ts', "import { registerUserspaceMetrics } from '../userspace/metrics.ts';\nexport const r = registerUserspaceMetrics;\n")).toHaveLength(1);
    // Tests of the shared code may run every mode (first-sync-housekeeping.test.ts does).
    expect(await refused('server/proxy/example.test.ts', "import { nftHarness } from './nftables/testing.ts';\nexport const n = nftHarness;\n")).toEqual([]);
    expect(await refused('server/platform-cleanup.ts', "import { cleanupIpvsHost } from './proxy/ipvs/index.ts';\nexport const c = cleanupIpvsHost;\n")).toEqual([]);
  });

  it('lets the dashboard, the tracer, the modes and the composition import a mode through its public file alone', async () => {
    expect(await refused('server/dashboard/ipvs/view.ts', "import { DUMMY_DEVICE } from '../../proxy/ipvs/names.ts';\nexport const d = DUMMY_DEVICE;\n")).toEqual([
      `server/dashboard may not import a file of server/proxy/ipvs but its public file ('../../proxy/ipvs/names.ts'): outside server/proxy a mode is imported through server/proxy/ipvs/index.ts (docs/architecture.md, "Layers").`,
    ]);
    // However it is written: a type, a re-export, a dynamic import().
    expect(await refused('server/dashboard/nftables/view.ts', "import type { NftablesBackend } from '../../proxy/nftables/proxier.ts';\nexport type B = NftablesBackend;\n")).toHaveLength(1);
    expect(await refused('server/dashboard/example.ts', "export { PORTAL_JUMPS } from '../proxy/userspace/portals.ts';\n")).toHaveLength(1);
    expect(await refused('server/trace/host.ts', "export const load = () => import('../proxy/nftables/names.ts');\n")).toHaveLength(1);
    expect(await refused('server/modes/example.ts', "import { createHostIpvsBackends } from '../proxy/ipvs/host.ts';\nexport const c = createHostIpvsBackends;\n")).toHaveLength(1);
    expect(await refused('server/platform-cleanup.ts', "import { cleanupNftablesLeftovers } from './proxy/nftables/cleanup.ts';\nexport const c = cleanupNftablesLeftovers;\n")).toEqual([
      expect.stringContaining('the composition may not import a file of server/proxy/nftables but its public file'),
    ]);
    expect(await refused('server/dashboard/ipvs/view.ts', "import { DUMMY_DEVICE, type IpvsIntent } from '../../proxy/ipvs/index.ts';\nexport const d: IpvsIntent | string = DUMMY_DEVICE;\n")).toEqual(
      [],
    );
    expect(await refused('server/trace/host.ts', "import { KUBE_PROXY_TABLE } from '../proxy/nftables/index.ts';\nexport const t = KUBE_PROXY_TABLE;\n")).toEqual([]);
    expect(await refused('server/platform-cleanup.ts', "import { cleanupIpvsHost } from './proxy/ipvs/index.ts';\nexport const c = cleanupIpvsHost;\n")).toEqual([]);
    // The shared code outside the mode folders (xtables/, the kit) is no mode's: imported as any file of proxy.
    expect(await refused('server/dashboard/iptables/view.ts', "import { JUMP_RULES } from '../../proxy/xtables/jump-chains.ts';\nexport const j = JUMP_RULES;\n")).toEqual([]);
    // Tests and test helpers reach further (harnesses, golden cases).
    expect(await refused('server/dashboard/ipvs/stream.test.ts', "import { RS_CHECK_INTERVAL_MS } from '../../proxy/ipvs/graceful-termination.ts';\nexport const r = RS_CHECK_INTERVAL_MS;\n")).toEqual(
      [],
    );
    expect(await refused('server/dashboard/testing.ts', "import { ipvsHarness } from '../proxy/ipvs/testing.ts';\nexport const h = ipvsHarness;\n")).toEqual([]);
  });

  it("puts the modes' descriptors (server/modes/) between the dashboard and the composition", async () => {
    expect(
      await refused(
        'server/modes/example.ts',
        "import { IpvsView } from '../dashboard/ipvs/view.ts';\nimport type { Backend } from '../proxy/backend.ts';\nexport const v: Backend | typeof IpvsView | null = null;\n",
      ),
    ).toEqual([]);
    expect(await refused('server/modes/example.ts', "import type { Daemon } from '../daemon.ts';\nexport type D = Daemon;\n")).toEqual([
      `server/modes may not import the composition ('../daemon.ts'): it imports only server/net, the bottom files, server/kernel, server/config, server/events, server/proxy, server/dashboard (docs/architecture.md, "Layers").`,
    ]);
    expect(await refused('server/modes/example.ts', "import { traceKernel } from '../trace/tracer.ts';\nexport const t = traceKernel;\n")).toHaveLength(1);
    expect(await refused('server/dashboard/example.ts', "import { MODES } from '../modes/registry.ts';\nexport const m = MODES;\n")).toEqual([
      expect.stringContaining('server/dashboard may not import server/modes'),
    ]);
    expect(await refused('server/assemble.ts', "import { MODES } from './modes/registry.ts';\nexport const m = MODES;\n")).toEqual([]);
  });

  it('makes no exception for types: proxy imports nothing of the sources, which implement its Source', async () => {
    expect(await refused('server/proxy/example.ts', "import type { FileSource } from '../sources/file/file-source.ts';\nexport type F = FileSource;\n")).toEqual([
      `server/proxy may not import server/sources ('../sources/file/file-source.ts'): it imports only server/net, the bottom files, server/kernel, server/config, server/events, server/http (docs/architecture.md, "Layers").`,
    ]);
    expect(await refused('server/proxy/example.ts', "import { parseManifest } from '../sources/file/manifest.ts';\nexport const p = parseManifest;\n")).toHaveLength(1);
    expect(await refused('server/proxy/metrics/example.ts', "export type K = import('../../sources/k8s/kube-source.ts').KubeSource;\n")).toHaveLength(1);
    expect(await refused('server/sources/example.ts', "import type { Source } from '../proxy/source.ts';\nexport type S = Source;\n")).toEqual([]);
  });

  it('lets the upper layers import downward, and the composition import everything', async () => {
    expect(await refused('server/kernel/example.ts', "import { canonicalIP } from '../net/ip.ts';\nexport const c = canonicalIP;\n")).toEqual([]);
    expect(await refused('server/proxy/example.ts', "import type { ProxyConfig } from '../config/types.ts';\nexport type P = ProxyConfig;\n")).toEqual([]);
    expect(await refused('server/proxy/healthcheck/example.ts', "import { HEALTH_LIMITS } from '../../http/limits.ts';\nexport const h = HEALTH_LIMITS;\n")).toEqual([]);
    expect(await refused('server/dashboard/example.ts', "import type { ProxyState } from '../proxy/proxy-state.ts';\nexport type P = ProxyState;\n")).toEqual([]);
    expect(await refused('server/assemble.ts', "import { dashboardTracer } from './trace/dashboard-trace.ts';\nexport const d = dashboardTracer;\n")).toEqual([]);
    expect(await refused('server/trace-command.ts', "export const load = () => import('./assemble.ts');\n")).toEqual([]);
  });

  it('allows no cycle: following what each layer may import never leads back to it', async () => {
    // eslint.config.js is plain JavaScript without types: its layer table is read as data.
    const config: string = '../../eslint.config.js';
    const layers = ((await import(config)) as { LAYERS: Record<string, { may: string[] | null }> }).LAYERS;
    const below = (layer: string, seen: Set<string>): void => {
      for (const next of layers[layer].may ?? []) {
        expect(next, `${[...seen].join(' -> ')} -> ${next}`).not.toBe([...seen][0]);
        if (!seen.has(next)) below(next, new Set([...seen, next]));
      }
    };
    for (const layer of Object.keys(layers)) if (layers[layer].may !== null) below(layer, new Set([layer]));
  });
});
