import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { errorMessage, HealthCheckPortError, type KproxyError } from '../../errors.ts';
import { createLimitedServer, HEALTH_LIMITS } from '../../http/limits.ts';
import { LISTEN_BACKLOG } from '../../net/listen.ts';
import { readOnlyRefusal, sendRefusal } from '../../http/read-only.ts';
import type { Logger } from '../../log.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { StateCheckout } from '../proxy-state.ts';
import { healthCheckNodePorts, localReadyEndpoints } from './local-endpoints.ts';

/** HealthCheckListener is one open listening socket of a service health check. */
export interface HealthCheckListener {
  close(): Promise<void>;
}

/** ListenFn opens host:port for a handler (an OS boundary; tests pass one that fails on demand). */
export type ListenFn = (host: string, port: number, handler: RequestListener) => Promise<HealthCheckListener>;

/** PortError is what onPortError receives when a health check port cannot be opened. */
export interface PortError {
  readonly namespace: string;
  readonly name: string;
  readonly port: number;
  readonly error: KproxyError;
}

/** ServiceHealthEntry describes one open health check, for the dashboard. */
export interface ServiceHealthEntry {
  readonly service: string;
  readonly port: number;
  readonly addresses: readonly string[];
  readonly localEndpoints: number;
  /** status: what a load balancer's probe gets now (200 with local endpoints and a healthy proxy). */
  readonly status: 200 | 503;
  /** simulated: --dry-run; nothing is bound on the host, this is what the listener would answer. */
  readonly simulated: boolean;
}

export interface ServiceHealthServerOptions {
  nodeName: string;
  logger: Logger;
  /** bindAddresses: where each health check listens (node-port addresses; the wildcard when all). */
  bindAddresses: () => Promise<string[]> | string[];
  /** proxyHealthy: kube-proxy's proxy health, without node eligibility. */
  proxyHealthy: () => boolean;
  /** onPortError: a port could not be opened (the daemon turns it into a Warning Event on the Service). */
  onPortError?: (e: PortError) => void;
  listen?: ListenFn;
  /**
   * simulated: open nothing on the host (--dry-run, which must not touch it):
   * each health check is kept, answered and shown as if it listened, and
   * `listen` is never called.
   */
  simulated?: boolean;
}

interface Instance {
  readonly namespace: string;
  readonly name: string;
  readonly port: number;
  readonly addresses: string[];
  readonly listeners: HealthCheckListener[];
  endpoints: number;
}

/** listenNowhere is --dry-run's ListenFn: nothing is bound, there is nothing to close. */
const listenNowhere: ListenFn = async () => ({ close: async () => {} });

/**
 * listenHttp is the real ListenFn: a node:http server with the health
 * listeners' timeouts and connection caps (HEALTH_LIMITS: these ports are
 * open to whatever reaches the node), closed with all its connections.
 */
export const listenHttp: ListenFn = (host, port, handler) =>
  new Promise((resolve, reject) => {
    const server = createLimitedServer(HEALTH_LIMITS, handler);
    const onError = (err: Error) => reject(err);
    server.once('error', onError);
    // '::' holds IPv6 only: IPv4 has its own listener on 0.0.0.0 (a dual-stack node listens on both).
    server.listen({ host, port, backlog: LISTEN_BACKLOG, exclusive: true, ipv6Only: host === '::' }, () => {
      server.off('error', onError);
      resolve({
        close: () =>
          new Promise<void>((done, fail) => {
            server.close((err) => (err ? fail(err) : done()));
            // Go's Server.Close drops open connections too: a load balancer on
            // keep-alive must not keep talking to a closed health check.
            server.closeAllConnections();
          }),
      });
    });
  });

/**
 * ServiceHealthServer keeps one HTTP listener per service that needs a health
 * check node port (LoadBalancer, externalTrafficPolicy Local), answering how
 * many ready endpoints the service has on this node, like kube-proxy's
 * pkg/proxy/healthcheck/service_health.go. After each successful sync,
 * reconcile() opens, keeps or closes listeners. A port that cannot be opened is
 * logged, counted and reported, never thrown; the next reconcile retries it.
 */
export class ServiceHealthServer {
  readonly #o: ServiceHealthServerOptions & { listen: ListenFn };
  readonly #services = new Map<string, Instance>();
  /** #byFamily: each family's wanted health checks and local endpoint counts from its last sync. */
  readonly #byFamily = new Map<IPFamily, { ports: ReadonlyMap<string, number>; counts: ReadonlyMap<string, number> }>();
  #chain: Promise<void> = Promise.resolve();
  #closed = false;
  /** portErrorsTotal counts failed attempts to open a health check port. */
  portErrorsTotal = 0;

  constructor(opts: ServiceHealthServerOptions) {
    this.#o = { ...opts, listen: opts.simulated ? listenNowhere : (opts.listen ?? listenHttp) };
  }

  /**
   * reconcile reads the wanted health checks and local endpoint counts from a
   * sync's checkout now (its maps change with the next checkout) and applies
   * them in order after any reconcile still running.
   */
  reconcile(family: IPFamily, checkout: Pick<StateCheckout, 'services' | 'endpoints'>): Promise<void> {
    const ports = healthCheckNodePorts(checkout.services);
    // Counting walks every endpoint: skip it on nodes without any health check.
    const counts = ports.size > 0 ? localReadyEndpoints(checkout.endpoints) : new Map<string, number>();
    this.#byFamily.set(family, { ports, counts });
    // A dual-stack Service has a health check in each family's proxier, on the same
    // port; one listener per address serves it, counting the family with more local endpoints.
    const allPorts = new Map<string, number>();
    const allCounts = new Map<string, number>();
    for (const f of this.#byFamily.values()) {
      for (const [svc, port] of f.ports) if (!allPorts.has(svc)) allPorts.set(svc, port);
      for (const [svc, n] of f.counts) allCounts.set(svc, Math.max(n, allCounts.get(svc) ?? 0));
    }
    this.#chain = this.#chain.then(async () => {
      await this.syncServices(allPorts);
      this.syncEndpoints(allCounts);
    });
    return this.#chain;
  }

  /** settled resolves when every queued reconcile has been applied. */
  settled(): Promise<void> {
    return this.#chain;
  }

  /** syncServices makes exactly the given services ("ns/name" -> port) listen. */
  async syncServices(wanted: ReadonlyMap<string, number>): Promise<void> {
    for (const [svc, inst] of this.#services) {
      if (wanted.get(svc) === inst.port) continue;
      this.#o.logger.info('closing service health check', { service: svc, port: inst.port });
      this.#services.delete(svc);
      await this.#closeAll(svc, inst.listeners);
    }
    if (this.#closed) return;
    for (const [svc, port] of wanted) {
      if (this.#services.has(svc)) continue;
      const inst = await this.#open(svc, port);
      if (inst) this.#services.set(svc, inst);
    }
  }

  /** syncEndpoints sets each open health check's local endpoint count (0 when absent). */
  syncEndpoints(counts: ReadonlyMap<string, number>): void {
    for (const [svc, inst] of this.#services) inst.endpoints = counts.get(svc) ?? 0;
  }

  /** entries lists the open health checks (simulated ones with --dry-run). */
  entries(): ServiceHealthEntry[] {
    const healthy = this.#o.proxyHealthy();
    const simulated = this.#o.simulated === true;
    return [...this.#services.entries()].map(([service, i]) => ({
      service,
      port: i.port,
      addresses: [...i.addresses],
      localEndpoints: i.endpoints,
      status: i.endpoints !== 0 && healthy ? 200 : 503,
      simulated,
    }));
  }

  get size(): number {
    return this.#services.size;
  }

  /** close stops every listener; later reconciles do nothing. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#chain = this.#chain.then(() => this.syncServices(new Map()));
    await this.#chain;
  }

  async #open(svc: string, port: number): Promise<Instance | null> {
    const [namespace, name] = svc.split('/');
    const addresses = await this.#o.bindAddresses();
    if (addresses.length === 0) {
      this.#o.logger.warn('no node address matches nodePortAddresses: the service health check listens nowhere', { service: svc, port });
    }
    const inst: Instance = { namespace, name, port, addresses, listeners: [], endpoints: 0 };
    for (const host of addresses) {
      try {
        inst.listeners.push(await this.#o.listen(host, port, (req, res) => this.#serve(svc, req, res)));
      } catch (err) {
        // Whatever opened already must close, so a retry (or another owner) can take the port.
        await this.#closeAll(svc, inst.listeners);
        const error = new HealthCheckPortError(`node ${this.#o.nodeName} failed to start healthcheck "${svc}" on port ${port} (${hostPort(host, port)}): ${errorMessage(err)}`, { cause: err });
        this.portErrorsTotal++;
        this.#o.logger.error('failed to start service health check; retrying after the next sync', {
          service: svc,
          port,
          address: host,
          code: error.code,
          err: errorMessage(err),
        });
        try {
          this.#o.onPortError?.({ namespace, name, port, error });
        } catch (cbErr) {
          // The report is best effort: the error is already logged and counted.
          this.#o.logger.error('reporting a health check port error failed', { service: svc, err: errorMessage(cbErr) });
        }
        return null;
      }
    }
    this.#o.logger.info(this.#o.simulated ? 'simulated service health check (--dry-run: nothing bound on the host)' : 'opened service health check', {
      service: svc,
      port,
      addresses: addresses.join(','),
    });
    return inst;
  }

  async #closeAll(svc: string, listeners: HealthCheckListener[]): Promise<void> {
    for (const l of listeners.splice(0)) {
      try {
        await l.close();
      } catch (err) {
        // A listener that fails to close may keep its port: the next open of it reports that.
        this.#o.logger.error('closing a service health check listener failed', { service: svc, err: errorMessage(err) });
      }
    }
  }

  #serve(svc: string, req: IncomingMessage, res: ServerResponse): void {
    // GET and HEAD without a body only: what load balancers send, and nothing to read for anyone else.
    const refusal = readOnlyRefusal(req);
    if (refusal) {
      sendRefusal(res, refusal);
      return;
    }
    const inst = this.#services.get(svc);
    if (!inst) {
      // Only possible while the listener is closing; Go's handler writes nothing (an empty 200).
      this.#o.logger.error('received a request for a closed health check', { service: svc });
      res.end();
      return;
    }
    const count = inst.endpoints;
    const healthy = this.#o.proxyHealthy();
    const body = serviceHealthBody(inst.namespace, inst.name, count, healthy);
    res.writeHead(count !== 0 && healthy ? 200 : 503, {
      'Content-Type': 'application/json',
      'X-Content-Type-Options': 'nosniff',
      'X-Load-Balancing-Endpoint-Weight': String(count),
      'Content-Length': Buffer.byteLength(body),
    });
    res.end(body);
  }
}

/**
 * serviceHealthBody renders kube-proxy's service health answer byte for byte:
 * tab-indented JSON without a trailing newline (its dedented template).
 */
export function serviceHealthBody(namespace: string, name: string, localEndpoints: number, healthy: boolean): string {
  return (
    `{\n\t"service": {\n\t\t"namespace": ${JSON.stringify(namespace)},\n\t\t"name": ${JSON.stringify(name)}\n\t},\n` + `\t"localEndpoints": ${localEndpoints},\n\t"serviceProxyHealthy": ${healthy}\n}`
  );
}

function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}
