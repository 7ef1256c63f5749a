import type { FastifyPluginAsync } from 'fastify';
import { describe, expect, it } from 'vitest';
import { buildMetricsApp } from './app.ts';
import { testProxyConfig } from './testing.ts';

const metrics = { contentType: 'text/plain; version=0.0.4; charset=utf-8', render: async () => '# HELP x y\n# TYPE x gauge\nx 1\n' };

describe('metrics listener app', () => {
  it('serves /proxyMode as plain text, like kube-proxy', async () => {
    const app = buildMetricsApp({ metrics, config: testProxyConfig({ mode: 'nftables' }) });
    const res = await app.inject({ method: 'GET', url: '/proxyMode' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/plain; charset=utf-8');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(res.body).toBe('nftables');
  });

  it('serves /configz as the effective configuration under kubeproxy.config.k8s.io, durations in Go form', async () => {
    const app = buildMetricsApp({ metrics, config: testProxyConfig({ nodePortAddresses: ['10.0.0.0/8'] }) });
    const res = await app.inject({ method: 'GET', url: '/configz' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/json');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    const doc = res.json() as { 'kubeproxy.config.k8s.io': Record<string, any> };
    const c = doc['kubeproxy.config.k8s.io'];
    expect(c.mode).toBe('iptables');
    expect(c.configSyncPeriod).toBe('15m0s');
    expect(c.iptables).toEqual({ masqueradeAll: false, masqueradeBit: 14, localhostNodePorts: true, syncPeriod: '30s', minSyncPeriod: '1s' });
    expect(c.conntrack.tcpEstablishedTimeout).toBe('24h0m0s');
    expect(c.conntrack.udpTimeout).toBe('0s');
    expect(c.nodePortAddresses).toEqual(['10.0.0.0/8']);
    expect(c).not.toHaveProperty('configSyncPeriodMs');
  });

  it('serves component-base /healthz: "ok", the check list when verbose, exclusions honoured', async () => {
    const app = buildMetricsApp({ metrics, config: testProxyConfig() });
    const plain = await app.inject({ method: 'GET', url: '/healthz' });
    expect([plain.statusCode, plain.headers['content-type'], plain.body]).toEqual([200, 'text/plain; charset=utf-8', 'ok']);
    expect((await app.inject({ method: 'GET', url: '/healthz?verbose' })).body).toBe('[+]ping ok\nhealthz check passed\n');
    expect((await app.inject({ method: 'GET', url: '/healthz?verbose&exclude=ping&exclude=etcd' })).body).toBe(
      '[+]ping excluded: ok\nwarn: some health checks cannot be excluded: no matches for "etcd"\nhealthz check passed\n',
    );
    expect((await app.inject({ method: 'GET', url: '/healthz/ping' })).body).toBe('ok');
  });

  it('serves /metrics from the metrics source with its content type', async () => {
    const app = buildMetricsApp({ metrics, config: testProxyConfig() });
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(res.body).toBe('# HELP x y\n# TYPE x gauge\nx 1\n');
  });

  it('answers unknown paths with Go ServeMux 404 text', async () => {
    const app = buildMetricsApp({ metrics, config: testProxyConfig() });
    const res = await app.inject({ method: 'GET', url: '/debug/pprof' });
    expect([res.statusCode, res.body]).toEqual([404, '404 page not found\n']);
  });

  it('registers further plugins (the dashboard) beside its own routes', async () => {
    const dashboard: FastifyPluginAsync<{ greeting: string }> = async (app, opts) => {
      app.get('/api/v1/hello', { schema: { response: { 200: { type: 'object', properties: { hello: { type: 'string' } } } } } }, async () => ({ hello: opts.greeting }));
    };
    const app = buildMetricsApp({ metrics, config: testProxyConfig(), plugins: [{ plugin: dashboard, options: { greeting: 'node-a' } }] });
    expect((await app.inject({ method: 'GET', url: '/api/v1/hello' })).json()).toEqual({ hello: 'node-a' });
    expect((await app.inject({ method: 'GET', url: '/proxyMode' })).body).toBe('iptables');
  });
});
