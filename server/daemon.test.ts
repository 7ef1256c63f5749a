import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RunOptions } from './config/types.ts';
import { Daemon, serviceOfPortId } from './daemon.ts';
import type { Backend } from './proxy/backend.ts';
import { MemoryEventRecorder } from './events/memory-event-recorder.ts';
import { MemoryLog } from './log.ts';
import { harness, testConfig } from './proxy/iptables/testing.ts';
import { makeService, makeSlice, ep } from './proxy/testing.ts';
import type { ChangeHandlers } from './proxy/proxy-state.ts';
import { FileSource } from './sources/file/file-source.ts';
import type { Source, SourceStatus } from './proxy/source.ts';

const run: RunOptions = {
  configFile: null,
  kubeconfig: null,
  source: null,
  sourceIsDefault: false,
  once: true,
  onceTimeoutMs: 0,
  cleanup: false,
  dryRun: true,
  dashboardTokenFile: null,
  dashboardBindAddress: null,
  dashboardTlsCertFile: null,
  dashboardTlsKeyFile: null,
  dashboardTokenAudience: 'kproxy-dashboard',
  iptablesFlavor: 'nft',
  version: false,
  help: false,
};

const web = `apiVersion: v1
kind: Service
metadata: { name: web, namespace: ns }
spec: { clusterIP: 10.96.0.10, ports: [{ name: http, port: 80 }] }
---
apiVersion: v1
kind: Service
metadata: { name: bad, namespace: ns }
spec: { clusterIP: 10.96.0.300, ports: [{ name: http, port: 80 }] }
`;

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kproxy-daemon-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function onceDaemon() {
  const log = new MemoryLog();
  const h = harness({ logger: log.logger });
  const source = new FileSource({ path: dir, nodeName: 'node-a', clock: h.clock, logger: log.logger, watch: false });
  const events = new MemoryEventRecorder({ clock: h.clock, logger: log.logger });
  const daemon = new Daemon({ config: testConfig(), run, nodeName: 'node-a', logger: log.logger, clock: h.clock, backends: [h.backend], source, events });
  return { daemon, events, ...h };
}

describe('Daemon.once', () => {
  it('touches nothing when the source cannot be read completely: no sysctl, no iptables call', async () => {
    await writeFile(join(dir, 'a.yaml'), web);
    await writeFile(join(dir, 'b.json'), '{ broken\n');
    const { daemon, kernel, sysctl } = onceDaemon();
    await expect(daemon.once()).rejects.toMatchObject({ code: 'KPROXY_ERR_SOURCE_NOT_SYNCED', message: expect.stringMatching(/b\.json:2:1: invalid YAML/) });
    expect(kernel.calls).toEqual([]);
    expect(sysctl.writes).toEqual([]);
  });

  it('touches nothing when the source path does not exist (yet), naming it', async () => {
    await rm(dir, { recursive: true, force: true });
    const { daemon, kernel, sysctl } = onceDaemon();
    await expect(daemon.once()).rejects.toMatchObject({
      code: 'KPROXY_ERR_SOURCE_NOT_SYNCED',
      message: expect.stringContaining(`manifests from ${dir} could not be read completely: ${dir} cannot be read: ENOENT`),
    });
    expect(kernel.calls).toEqual([]);
    expect(sysctl.writes).toEqual([]);
  });

  it("refuses what the API server would refuse, per object: a slice labelled web/evil does not replace shop/web's endpoints, special addresses are not programmed", async () => {
    await writeFile(
      join(dir, 'shop.yaml'),
      `apiVersion: v1
kind: Service
metadata: { name: web, namespace: shop }
spec: { clusterIP: 10.96.0.10, ports: [{ name: http, port: 80 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-abc, namespace: shop, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
ports: [{ name: http, port: 8080 }]
endpoints: [{ addresses: [10.244.0.5] }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: evil, namespace: shop, labels: { kubernetes.io/service-name: web/evil } }
addressType: IPv4
ports: [{ name: http, port: 8080 }]
endpoints: [{ addresses: [10.0.0.66] }]
---
apiVersion: v1
kind: Service
metadata: { name: api, namespace: shop }
spec: { clusterIP: 10.96.0.11, externalIPs: [169.254.169.254], ports: [{ name: http, port: 80 }] }
---
apiVersion: v1
kind: Service
metadata: { name: db, namespace: shop }
spec: { clusterIP: 10.96.0.12, ports: [{ name: pg, port: 5432 }] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: db-local, namespace: shop, labels: { kubernetes.io/service-name: db } }
addressType: IPv4
ports: [{ name: pg, port: 5432 }]
endpoints: [{ addresses: [127.0.0.1] }]
`,
    );
    const { daemon, kernel, events } = onceDaemon();
    const [rec] = await daemon.once();
    expect(rec.ok).toBe(true);
    const rules = await kernel.save({});
    // shop/web keeps its one genuine endpoint; nothing of the refused objects reaches the kernel.
    expect(rules.match(/--comment shop\/web:http -m tcp -p tcp -j DNAT --to-destination \S+/g)).toEqual(['--comment shop/web:http -m tcp -p tcp -j DNAT --to-destination 10.244.0.5:8080']);
    expect(rules).not.toMatch(/10\.0\.0\.66|127\.0\.0\.1:5432|169\.254\.169\.254|shop\/api/);
    expect(rules).toMatch(/shop\/db:pg has no endpoints/);
    const refused = [
      'EndpointSlice shop/evil: metadata.labels["kubernetes.io/service-name"] "web/evil": must be a Service name: a DNS label of at most 63 lower-case letters, digits and "-"',
      'Service shop/api: spec.externalIPs[0] "169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)',
      'EndpointSlice shop/db-local: endpoints[0].addresses[0] "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)',
    ];
    expect([...daemon.state.invalid.values()].sort()).toEqual([...refused].sort());
    // Each refusal is a Warning Event on the object it names.
    const warnings = events.recent().filter((e) => e.reason === 'InvalidObject');
    expect(warnings.map((e) => [e.type, `${e.regarding.kind} ${e.regarding.namespace}/${e.regarding.name}`]).sort()).toEqual(
      [
        ['Warning', 'EndpointSlice shop/evil'],
        ['Warning', 'Service shop/api'],
        ['Warning', 'EndpointSlice shop/db-local'],
      ].sort(),
    );
    for (const [i, why] of refused.entries())
      expect(
        warnings.some((e) => e.note.startsWith(why)),
        `event ${i}`,
      ).toBe(true);
  });

  it('programs the valid objects and keeps the invalid ones aside, with why', async () => {
    await writeFile(join(dir, 'a.yaml'), web);
    const { daemon, kernel } = onceDaemon();
    const [rec] = await daemon.once();
    expect(rec.ok).toBe(true);
    expect(kernel.callsOf('iptables-restore')).not.toHaveLength(0);
    expect(await kernel.save({})).toMatch(/ns\/web:http has no endpoints/);
    expect([...daemon.state.invalid.values()]).toEqual([expect.stringMatching(/^Service ns\/bad: .*"10\.96\.0\.300"/)]);
  });
});

/** ApiLikeSource stands for the Kubernetes source: the test delivers its lists, one kind at a time. */
class ApiLikeSource implements Source {
  handlers: ChangeHandlers | null = null;
  async start(handlers: ChangeHandlers): Promise<void> {
    this.handlers = handlers;
  }
  async stop(): Promise<void> {}
  status(): SourceStatus {
    return { kind: 'kubernetes', description: 'https://10.0.0.1:6443', synced: true, objects: 0, counters: {} };
  }
  /** listServices delivers one Service with its endpoints, and says both lists are complete. */
  listServices(): void {
    const h = this.handlers!;
    h.onService(null, makeService('ns', 'web', { clusterIP: '10.96.0.10', ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }));
    h.onEndpointSlice(null, makeSlice('ns', 'web', 'web-1', [ep('10.244.0.5', { nodeName: 'node-a' })], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    h.onSynced('Service');
    h.onSynced('EndpointSlice');
  }
}

function apiDaemon(source: ApiLikeSource) {
  const log = new MemoryLog();
  const h = harness({ logger: log.logger });
  const events = new MemoryEventRecorder({ clock: h.clock, logger: log.logger });
  const daemon = new Daemon({ config: testConfig(), run, nodeName: 'node-a', logger: log.logger, clock: h.clock, backends: [h.backend], source, events });
  return { daemon, log, ...h };
}

describe('Daemon: service ports a backend leaves out', () => {
  it('records a Warning Event on the Service once per port and reason, and again when the reason changes', async () => {
    await writeFile(join(dir, 'a.yaml'), web);
    const log = new MemoryLog();
    const h = harness({ logger: log.logger });
    let skipped = new Map([['ns/web:http/TCP', 'its 1 entries do not fit in ipset KUBE-CLUSTER-IP']]);
    // The iptables backend as it is, reporting a service port it left out (as IPVS mode does with a full ipset).
    const backend: Backend = {
      mode: h.backend.mode,
      family: h.backend.family,
      sync: async (input) => ({ ...(await h.backend.sync(input)), skippedServicePorts: skipped }),
      requireFullSync: () => h.backend.requireFullSync(),
      cleanup: () => h.backend.cleanup(),
    };
    const source = new FileSource({ path: dir, nodeName: 'node-a', clock: h.clock, logger: log.logger, watch: false });
    const events = new MemoryEventRecorder({ clock: h.clock, logger: log.logger });
    const daemon = new Daemon({ config: testConfig(), run, nodeName: 'node-a', logger: log.logger, clock: h.clock, backends: [backend], source, events });
    const skips = () => events.recent().filter((e) => e.reason === 'ServicePortSkipped');
    expect((await daemon.once())[0].ok).toBe(true);
    expect(skips().map((e) => [e.type, e.action, `${e.regarding.kind} ${e.regarding.namespace}/${e.regarding.name}`, e.note])).toEqual([
      ['Warning', 'Skip', 'Service ns/web', 'IPv4 service port ns/web:http/TCP is not programmed: its 1 entries do not fit in ipset KUBE-CLUSTER-IP; every other service port is'],
    ]);
    // The same port left out for the same reason: no second Event.
    expect((await daemon.proxy.syncOnce())[0].ok).toBe(true);
    expect(skips()).toHaveLength(1);
    skipped = new Map([['ns/web:http/TCP', 'another reason']]);
    await daemon.proxy.syncOnce();
    expect(skips().map((e) => e.note)).toContain('IPv4 service port ns/web:http/TCP is not programmed: another reason; every other service port is');
  });

  it('reads the Service out of a service port id, named port or not', () => {
    expect(serviceOfPortId('ns/web:http/TCP')).toEqual({ kind: 'Service', namespace: 'ns', name: 'web' });
    expect(serviceOfPortId('ns/web/UDP')).toEqual({ kind: 'Service', namespace: 'ns', name: 'web' });
    expect(serviceOfPortId('not an id')).toBeNull();
  });
});

describe("Daemon and this node's Node (Kubernetes source)", () => {
  it('--once waits for the Node list before the one sync, then programs with it', async () => {
    const source = new ApiLikeSource();
    const { daemon, kernel } = apiDaemon(source);
    let done = false;
    const once = daemon.once().finally(() => (done = true));
    await Promise.resolve();
    source.listServices();
    await new Promise((r) => setTimeout(r, 20));
    // Services and EndpointSlices are listed, the Node is not: nothing is programmed yet.
    expect(done).toBe(false);
    expect(kernel.calls).toEqual([]);
    source.handlers!.onNode(null, { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-a' }, spec: { podCIDR: '10.244.0.0/24' } });
    source.handlers!.onSynced('Node');
    expect((await once).map((r) => r.ok)).toEqual([true]);
    expect(daemon.state.node).toMatchObject({ known: true, podCIDRs: ['10.244.0.0/24'] });
    expect(await kernel.save({})).toMatch(/ns\/web:http/);
  });

  it('--once with no Node by this name fails naming it, before touching anything', async () => {
    const source = new ApiLikeSource();
    const { daemon, kernel, sysctl } = apiDaemon(source);
    const once = daemon.once();
    await Promise.resolve();
    source.listServices();
    source.handlers!.onSynced('Node');
    await expect(once).rejects.toMatchObject({
      code: 'KPROXY_ERR_NODE_NOT_FOUND',
      message: "Node node-a not found in the cluster (check --hostname-override): which endpoints are local, and the node's addresses, are unknown",
    });
    expect(kernel.calls).toEqual([]);
    expect(sysctl.writes).toEqual([]);
  });

  it('--once gives up after its timeout naming the source and what it waits for, and a list arriving later programs nothing', async () => {
    const source = new (class extends ApiLikeSource {
      override status(): SourceStatus {
        return { ...super.status(), synced: false, waitingFor: 'the first list of Node (last error: connect ECONNREFUSED 10.0.0.1:6443)' };
      }
    })();
    const { daemon, kernel, sysctl, clock } = apiDaemon(source);
    const once = daemon.once({ timeoutMs: 120_000 });
    await Promise.resolve();
    source.listServices();
    await clock.advanceAsync(119_999);
    let settled = false;
    void once.catch(() => (settled = true));
    await Promise.resolve();
    expect(settled).toBe(false);
    await clock.advanceAsync(1);
    await expect(once).rejects.toMatchObject({
      code: 'KPROXY_ERR_SOURCE_NOT_SYNCED',
      message: 'https://10.0.0.1:6443 did not sync within 2m0s (--once-timeout): waiting for the first list of Node (last error: connect ECONNREFUSED 10.0.0.1:6443)',
    });
    // The Node list comes after all: nothing is programmed, the run is over.
    source.handlers!.onNode(null, { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-a' } });
    source.handlers!.onSynced('Node');
    await new Promise((r) => setTimeout(r, 20));
    expect(kernel.calls).toEqual([]);
    expect(sysctl.writes).toEqual([]);
  });

  it('the daemon says so in its log once the Nodes are listed, and proxies on', async () => {
    const source = new ApiLikeSource();
    const { daemon, log } = apiDaemon(source);
    await daemon.start();
    try {
      source.listServices();
      source.handlers!.onSynced('Node');
      await Promise.resolve();
      expect(log.lines('warn')).toContainEqual(expect.stringMatching(/Node node-a not found in the cluster \(check --hostname-override\)/));
    } finally {
      await daemon.stop();
    }
  });
});
