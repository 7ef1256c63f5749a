import { FakeClock } from '../../server/clock-fake.ts';
import { MemoryLog } from '../../server/log.ts';
import type { EndpointSlice, KubeObject, Node, Service, ServiceCIDR } from '../../server/proxy/kube-objects.ts';
import { ProxyState, type ChangeHandlers, type ObjectKind } from '../../server/proxy/proxy-state.ts';
import { loadKubeConfig } from '../../server/sources/k8s/kubeconfig.ts';
import { KubeSource } from '../../server/sources/k8s/kube-source.ts';
import type { InformerTuning } from '../../server/sources/k8s/informer-types.ts';
import { waitFor } from '../wait.ts';
import { FakeApiServer } from './fake-apiserver.ts';
import { writeKubeconfig, type KubeconfigFile } from './kubeconfig-file.ts';

export const NODE = 'node-a';

/** Change is one handler call as a test reads it: "update Service ns/web 3->5". */
export interface Change {
  readonly op: 'add' | 'update' | 'delete';
  readonly kind: ObjectKind | 'ServiceCIDR';
  readonly key: string;
  readonly prev: KubeObject | null;
  readonly cur: KubeObject | null;
}

function describe(c: Change): string {
  const rv = (o: KubeObject | null) => o?.metadata?.resourceVersion ?? '-';
  return `${c.op} ${c.kind} ${c.key} ${rv(c.prev)}->${rv(c.cur)}`;
}

/**
 * Cluster is one API test's world: a fake API server, a kubeconfig for it, and a
 * KubeSource on a fake clock feeding a real ProxyState through a recorder that
 * keeps every (prev, cur) the handlers received.
 */
export class Cluster {
  readonly server = new FakeApiServer();
  readonly clock = new FakeClock();
  readonly log = new MemoryLog();
  readonly state = new ProxyState({ family: 'IPv4', nodeName: NODE, clock: this.clock });
  readonly changes: Change[] = [];
  readonly synced: ObjectKind[] = [];
  source!: KubeSource;
  #kubeconfig: KubeconfigFile | null = null;

  async start(): Promise<this> {
    await this.server.start();
    this.#kubeconfig = await writeKubeconfig(this.server.url);
    return this;
  }

  /** connect starts the KubeSource (the API may be up or down). */
  async connect(tuning: Partial<InformerTuning> = {}, opts: { serviceCIDRs?: boolean } = {}): Promise<KubeSource> {
    const { kubeConfig } = await loadKubeConfig({ kubeconfig: this.#kubeconfig!.path });
    this.source = new KubeSource({
      kubeConfig,
      nodeName: NODE,
      clock: this.clock,
      logger: this.log.logger,
      // Quiet-watch relists only where a test asks for them.
      tuning: { quietRelistMs: 24 * 3600_000, ...tuning },
      random: () => 0.5,
      serviceCIDRs: opts.serviceCIDRs ?? false,
    });
    await this.source.start(this.#handlers());
    return this.source;
  }

  /** connectAndSync connects and waits for all three initial lists. */
  async connectAndSync(tuning: Partial<InformerTuning> = {}): Promise<KubeSource> {
    await this.connect(tuning);
    await waitFor(() => this.synced.length === 3, { what: 'initial lists' });
    return this.source;
  }

  /** mark returns the number of changes so far: changesSince(mark) are the ones after it. */
  mark(): number {
    return this.changes.length;
  }

  changesSince(mark: number): string[] {
    return this.changes.slice(mark).map(describe);
  }

  counter(name: string): number {
    return this.source.status().counters[name] ?? 0;
  }

  async stop(): Promise<void> {
    await this.source?.stop();
    this.server.stallWatches(false);
    await this.server.stop();
    await this.#kubeconfig?.remove();
  }

  #handlers(): ChangeHandlers {
    const record = (kind: ObjectKind | 'ServiceCIDR', prev: KubeObject | null, cur: KubeObject | null) => {
      const o = (cur ?? prev)!;
      const key = o.metadata?.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : String(o.metadata?.name);
      this.changes.push({ op: prev && cur ? 'update' : cur ? 'add' : 'delete', kind, key, prev, cur });
    };
    return {
      onService: (prev: Service | null, cur: Service | null) => {
        record('Service', prev, cur);
        this.state.onService(prev, cur);
      },
      onEndpointSlice: (prev: EndpointSlice | null, cur: EndpointSlice | null) => {
        record('EndpointSlice', prev, cur);
        this.state.onEndpointSlice(prev, cur);
      },
      onNode: (prev: Node | null, cur: Node | null) => {
        record('Node', prev, cur);
        this.state.onNode(prev, cur);
      },
      onServiceCIDR: (prev: ServiceCIDR | null, cur: ServiceCIDR | null) => {
        record('ServiceCIDR', prev, cur);
        this.state.onServiceCIDR(prev, cur);
      },
      onSynced: (kind: ObjectKind) => {
        this.synced.push(kind);
        this.state.onSynced(kind);
      },
    };
  }
}

/** Objects of the test cluster, as a user would apply them. */
export function service(name: string, opts: { port?: number; clusterIP?: string; labels?: Record<string, string>; namespace?: string } = {}): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: opts.namespace ?? 'shop', labels: opts.labels ?? {} },
    spec: { type: 'ClusterIP', clusterIP: opts.clusterIP ?? '10.96.0.10', ports: [{ name: 'http', port: opts.port ?? 80, protocol: 'TCP', targetPort: 8080 }] },
  };
}

export function slice(name: string, serviceName: string, ips: string[], opts: { labels?: Record<string, string>; port?: number; namespace?: string } = {}): Record<string, unknown> {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: opts.namespace ?? 'shop', labels: { 'kubernetes.io/service-name': serviceName, ...opts.labels } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: opts.port ?? 8080, protocol: 'TCP' }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true, serving: true, terminating: false }, nodeName: NODE })),
  };
}

export function serviceCIDR(name: string, cidrs: string[]): Record<string, unknown> {
  return { apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name }, spec: { cidrs } };
}

export function node(name: string, zone = 'zone-a'): Record<string, unknown> {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name, labels: { 'topology.kubernetes.io/zone': zone } }, spec: { podCIDR: '10.244.0.0/24' } };
}
