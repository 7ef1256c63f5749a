import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { HealthCheckPortError } from '../../errors.ts';
import { MemoryLog, silentLogger } from '../../log.ts';
import { FakeNetInterfaces } from '../../kernel/netif-fake.ts';
import type { NetInterfaces } from '../../kernel/netif.ts';
import { NodePortAddresses } from '../node-port-addresses.ts';
import { ProxyState } from '../proxy-state.ts';
import { ep, makeService, makeSlice } from '../testing.ts';
import { healthCheckNodePorts, localReadyEndpoints, serviceOfPortId } from './local-endpoints.ts';
import { healthCheckBindAddresses } from './node-addresses.ts';
import { serviceHealthBody, ServiceHealthServer, type PortError } from './service-health-server.ts';

const NODE = 'node-a';

/** freePort asks the kernel for a free TCP port on 127.0.0.1. */
async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

function lbLocal(name: string, hcPort: number, ports = [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }]) {
  return makeService('shop', name, {
    type: 'LoadBalancer',
    clusterIP: '10.96.0.10',
    externalTrafficPolicy: 'Local',
    healthCheckNodePort: hcPort,
    ports,
  });
}

function newState() {
  const state = new ProxyState({ family: 'IPv4', nodeName: NODE, clock: new FakeClock() });
  state.onSynced('Service');
  state.onSynced('EndpointSlice');
  return state;
}

async function probe(port: number, path = '/') {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { code: res.status, headers: res.headers, body: await res.text() };
}

describe('local endpoint counting', () => {
  it('finds the service of a port id, named or not', () => {
    expect(serviceOfPortId('shop/web:http/TCP')).toBe('shop/web');
    expect(serviceOfPortId('shop/web/UDP')).toBe('shop/web');
  });

  it('counts ready local endpoints by distinct IP over all ports of a service', () => {
    const state = newState();
    state.onService(
      null,
      lbLocal('web', 32000, [
        { name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 },
        { name: 'https', port: 443, protocol: 'TCP', nodePort: 30443 },
      ]),
    );
    state.onEndpointSlice(
      null,
      makeSlice(
        'shop',
        'web',
        'web-1',
        [
          ep('10.1.0.1', { nodeName: NODE }),
          ep('10.1.0.2', { nodeName: NODE, ready: false }),
          ep('10.1.0.3', { nodeName: NODE, ready: false, serving: true, terminating: true }),
          ep('10.1.0.4', { nodeName: 'node-b' }),
        ],
        [
          { name: 'http', port: 8080, protocol: 'TCP' },
          { name: 'https', port: 8443, protocol: 'TCP' },
        ],
      ),
    );
    const co = state.checkout();
    expect(localReadyEndpoints(co.endpoints)).toEqual(new Map([['shop/web', 1]]));
    expect(healthCheckNodePorts(co.services)).toEqual(new Map([['shop/web', 32000]]));
  });

  it('asks for no health check port for Cluster policy or non-LoadBalancer services', () => {
    const state = newState();
    state.onService(null, makeService('shop', 'np', { type: 'NodePort', externalTrafficPolicy: 'Local', ports: [{ name: 'p', port: 80, nodePort: 30001 }] }));
    state.onService(null, makeService('shop', 'lb', { type: 'LoadBalancer', externalTrafficPolicy: 'Cluster', healthCheckNodePort: 32001, ports: [{ name: 'p', port: 80, nodePort: 30002 }] }));
    expect(healthCheckNodePorts(state.checkout().services).size).toBe(0);
  });
});

describe('health check bind addresses', () => {
  const netif = new FakeNetInterfaces([
    { ifname: 'lo', family: 'IPv4', address: '127.0.0.1', prefixLength: 8 },
    { ifname: 'eth0', family: 'IPv4', address: '192.168.1.10', prefixLength: 24 },
    { ifname: 'eth1', family: 'IPv4', address: '10.0.0.5', prefixLength: 24 },
    { ifname: 'eth1', family: 'IPv6', address: 'fd00::5', prefixLength: 64 },
  ]);
  const bind = (values: string[], nodeAddresses: string[] = [], via: NetInterfaces = netif) => healthCheckBindAddresses([new NodePortAddresses('IPv4', values, nodeAddresses)], via, silentLogger);

  it('listens on the wildcard address when node ports are accepted everywhere', async () => {
    expect(await bind([])).toEqual(['0.0.0.0']);
    expect(await bind(['0.0.0.0/0'])).toEqual(['0.0.0.0']);
    expect(await bind(['fd00::/64'])).toEqual(['0.0.0.0']);
  });
  it('listens on each host address inside nodePortAddresses', async () => {
    expect(await bind(['192.168.0.0/16', '127.0.0.0/8'])).toEqual(['127.0.0.1', '192.168.1.10']);
    expect(await bind(['172.16.0.0/12'])).toEqual([]);
  });
  it('resolves "primary" to the node address of the family', async () => {
    expect(await bind(['primary'], ['fd00::5', '10.0.0.5'])).toEqual(['10.0.0.5']);
  });
  it('falls back to the wildcard when the host addresses cannot be listed', async () => {
    const broken: NetInterfaces = { addresses: async () => Promise.reject(new Error('ip: not found')) };
    expect(await bind(['10.0.0.0/8'], [], broken)).toEqual(['0.0.0.0']);
  });
});

describe('ServiceHealthServer', () => {
  let shs: ServiceHealthServer | null = null;
  const blockers: Server[] = [];
  afterEach(async () => {
    await shs?.close();
    shs = null;
    for (const b of blockers.splice(0)) await new Promise<void>((r) => b.close(() => r()));
  });

  function make(opts: { healthy?: () => boolean; errors?: PortError[] } = {}) {
    const log = new MemoryLog();
    const errors = opts.errors ?? [];
    shs = new ServiceHealthServer({
      nodeName: NODE,
      logger: log.logger,
      bindAddresses: () => ['127.0.0.1'],
      proxyHealthy: opts.healthy ?? (() => true),
      onPortError: (e) => errors.push(e),
    });
    return { shs, log, errors };
  }

  it('opens a listener for an ETP Local LoadBalancer and answers 503, then 200 once a local endpoint is ready', async () => {
    const port = await freePort();
    const { shs } = make();
    const state = newState();
    state.onService(null, lbLocal('web', port));
    await shs.reconcile('IPv4', state.checkout());
    const empty = await probe(port, '/any/path');
    expect(empty.code).toBe(503);
    expect(empty.headers.get('content-type')).toBe('application/json');
    expect(empty.headers.get('x-content-type-options')).toBe('nosniff');
    expect(empty.headers.get('x-load-balancing-endpoint-weight')).toBe('0');
    expect(empty.body).toBe('{\n\t"service": {\n\t\t"namespace": "shop",\n\t\t"name": "web"\n\t},\n\t"localEndpoints": 0,\n\t"serviceProxyHealthy": true\n}');

    state.onEndpointSlice(null, makeSlice('shop', 'web', 'web-1', [ep('10.1.0.1', { nodeName: NODE }), ep('10.1.0.2', { nodeName: NODE })], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    await shs.reconcile('IPv4', state.checkout());
    const ok = await probe(port);
    expect(ok.code).toBe(200);
    expect(ok.headers.get('x-load-balancing-endpoint-weight')).toBe('2');
    expect(JSON.parse(ok.body)).toEqual({ service: { namespace: 'shop', name: 'web' }, localEndpoints: 2, serviceProxyHealthy: true });

    // The pods go not-ready: back to 503 with weight 0.
    state.onEndpointSlice(null, makeSlice('shop', 'web', 'web-1', [ep('10.1.0.1', { nodeName: NODE, ready: false })], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    await shs.reconcile('IPv4', state.checkout());
    expect((await probe(port)).code).toBe(503);
    expect(shs.entries()).toEqual([{ service: 'shop/web', port, addresses: ['127.0.0.1'], localEndpoints: 0, status: 503, simulated: false }]);
  });

  it('answers GET and HEAD only: a POST is refused with 405 before its body is read', async () => {
    const port = await freePort();
    const { shs } = make();
    const state = newState();
    state.onService(null, lbLocal('web', port));
    await shs.reconcile('IPv4', state.checkout());
    const head = await fetch(`http://127.0.0.1:${port}/`, { method: 'HEAD' });
    expect(head.status).toBe(503);
    const post = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: 'x'.repeat(256 * 1024) });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
    expect(post.headers.get('connection')).toBe('close');
  });

  it('answers 503 with serviceProxyHealthy false while the proxy is unhealthy, even with local endpoints', async () => {
    const port = await freePort();
    let healthy = true;
    const { shs } = make({ healthy: () => healthy });
    const state = newState();
    state.onService(null, lbLocal('web', port));
    state.onEndpointSlice(null, makeSlice('shop', 'web', 'web-1', [ep('10.1.0.1', { nodeName: NODE })], [{ name: 'http', port: 8080, protocol: 'TCP' }]));
    await shs.reconcile('IPv4', state.checkout());
    expect((await probe(port)).code).toBe(200);
    healthy = false;
    const res = await probe(port);
    expect(res.code).toBe(503);
    expect(res.body).toBe(serviceHealthBody('shop', 'web', 1, false));
  });

  it('closes the listener when the service goes away, and moves it when the port changes', async () => {
    const [p1, p2] = [await freePort(), await freePort()];
    const { shs } = make();
    const state = newState();
    const svc = lbLocal('web', p1);
    state.onService(null, svc);
    await shs.reconcile('IPv4', state.checkout());
    expect((await probe(p1)).code).toBe(503);

    state.onService(svc, lbLocal('web', p2));
    await shs.reconcile('IPv4', state.checkout());
    await expect(probe(p1)).rejects.toThrow();
    expect((await probe(p2)).code).toBe(503);

    state.onService(lbLocal('web', p2), null);
    await shs.reconcile('IPv4', state.checkout());
    await expect(probe(p2)).rejects.toThrow();
    expect(shs.size).toBe(0);
  });

  it('reports a port it cannot bind without throwing, keeps the other services, and retries on the next reconcile', async () => {
    const [taken, free] = [await freePort(), await freePort()];
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(taken, '127.0.0.1', r));
    blockers.push(blocker);
    const { shs, log, errors } = make();
    const state = newState();
    state.onService(null, lbLocal('blocked', taken));
    state.onService(null, lbLocal('web', free));
    await expect(shs.reconcile('IPv4', state.checkout())).resolves.toBeUndefined();

    expect((await probe(free)).code).toBe(503);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ namespace: 'shop', name: 'blocked', port: taken });
    expect(errors[0].error).toBeInstanceOf(HealthCheckPortError);
    expect(errors[0].error.code).toBe('KPROXY_ERR_HEALTHCHECK_PORT');
    expect(errors[0].error.message).toContain(`node ${NODE} failed to start healthcheck "shop/blocked" on port ${taken}`);
    expect(shs.portErrorsTotal).toBe(1);
    expect(log.lines('error').join('\n')).toMatch(/failed to start service health check.*service=shop\/blocked/);

    // Freed: the next sync's reconcile opens it.
    blockers.splice(0);
    await new Promise<void>((r) => blocker.close(() => r()));
    await shs.reconcile('IPv4', state.checkout());
    expect((await probe(taken)).code).toBe(503);
    expect(errors).toHaveLength(1);
  });

  it('closes every listener on close()', async () => {
    const port = await freePort();
    const { shs } = make();
    const state = newState();
    state.onService(null, lbLocal('web', port));
    await shs.reconcile('IPv4', state.checkout());
    await shs.close();
    await expect(probe(port)).rejects.toThrow();
    // A reconcile after close opens nothing.
    await shs.reconcile('IPv4', state.checkout());
    await expect(probe(port)).rejects.toThrow();
  });
});

describe('ServiceHealthServer simulated (--dry-run)', () => {
  it('binds nothing on the host, and keeps each health check with what it would answer', async () => {
    const listened: number[] = [];
    const log = new MemoryLog();
    const shs = new ServiceHealthServer({
      nodeName: NODE,
      logger: log.logger,
      bindAddresses: () => ['0.0.0.0'],
      proxyHealthy: () => true,
      simulated: true,
      // Must never be called: a simulated server has no socket at all.
      listen: async (_host, port) => {
        listened.push(port);
        throw new Error('listen called');
      },
    });
    await shs.syncServices(
      new Map([
        ['shop/ingress', 32100],
        ['shop/edge', 32101],
      ]),
    );
    shs.syncEndpoints(new Map([['shop/ingress', 2]]));
    expect(listened).toEqual([]);
    expect(shs.portErrorsTotal).toBe(0);
    expect(shs.entries()).toEqual([
      { service: 'shop/ingress', port: 32100, addresses: ['0.0.0.0'], localEndpoints: 2, status: 200, simulated: true },
      { service: 'shop/edge', port: 32101, addresses: ['0.0.0.0'], localEndpoints: 0, status: 503, simulated: true },
    ]);
    expect(log.lines('info').join('\n')).toMatch(/simulated service health check \(--dry-run: nothing bound on the host\)/);
    await shs.close();
    expect(shs.entries()).toEqual([]);
  });
});
