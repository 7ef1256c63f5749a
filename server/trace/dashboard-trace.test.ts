import { afterEach, describe, expect, it } from 'vitest';
import { flushMicrotasks } from '../clock-fake.ts';
import { HeavyReads } from '../dashboard/heavy-reads.ts';
import type { ServiceDetail, TraceResult } from '../dashboard/protocol.ts';
import { testDashboard, type TestDashboardOptions, type TestDashboard } from '../dashboard/testing.ts';
import { dashboardTracer } from './dashboard-trace.ts';

const HOST = { host: 'localhost:10249' };
const TOKEN = 's3cret-token';
const AUTH = { ...HOST, authorization: `Bearer ${TOKEN}` };
const q = (p: Record<string, string>) => `/api/v1/trace?${new URLSearchParams(p)}`;

/** tracedDashboard is the test dashboard with the packet tracer the composition gives it, on a node with the addresses 127.0.0.1 and 10.0.0.10. */
function tracedDashboard(opts: TestDashboardOptions = {}): Promise<TestDashboard> {
  const addresses = ['127.0.0.1', '10.0.0.10'].map((address) => ({ ifname: 'eth0', family: 'IPv4' as const, address, prefixLength: 32 }));
  return testDashboard({ token: TOKEN, tracer: dashboardTracer({ netInterfaces: { addresses: async () => addresses } }), ...opts });
}

/** splitSpec turns a listed rule back into words for SimulatedIptables.deleteRule. */
function splitSpec(spec: string): string[] {
  return [...spec.matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2]);
}

describe('GET /api/v1/trace', () => {
  let t: TestDashboard;
  afterEach(async () => t?.close());

  it('answers 503 from a dashboard built without a tracer', async () => {
    t = await testDashboard({ token: TOKEN });
    const res = await t.app.inject({ url: q({ proto: 'tcp', src: '10.0.0.2', dst: '10.96.10.10:80' }), headers: AUTH });
    expect(res.statusCode).toBe(503);
    expect(res.json().error.code).toBe('KPROXY_ERR_TRACE_UNAVAILABLE');
  });

  it('needs the same auth as the rest of the API', async () => {
    t = await tracedDashboard();
    const res = await t.app.inject({ url: q({ proto: 'tcp', src: '10.0.0.2', dst: '10.96.10.10:80' }), headers: HOST });
    expect(res.statusCode).toBe(401);
    expect(res.json().error.code).toBe('KPROXY_ERR_AUTH_REQUIRED');
  });

  it('traces a packet through the dashboard kernel read and answers in Service terms', async () => {
    t = await tracedDashboard();
    const res = await t.app.inject({ url: q({ proto: 'tcp', src: '10.0.0.2:40000', dst: '10.96.10.10:80' }), headers: AUTH });
    expect(res.statusCode).toBe(200);
    const r = res.json() as TraceResult;
    expect(r).toMatchObject({ mode: 'iptables', family: 'IPv4', verdict: 'dnat', service: 'shop/frontend:http', masquerade: true, simulated: true });
    expect(r.query).toEqual({ proto: 'tcp', src: '10.0.0.2', srcPort: 40000, dst: '10.96.10.10', dstPort: 80, from: 'external' });
    expect(r.endpoints.map((e) => e.probability)).toEqual([1 / 3, 1 / 3, 1 / 3].map((p) => expect.closeTo(p, 6)));
    expect(r.path[0]).toMatchObject({ table: 'nat', chain: 'PREROUTING', rule: expect.stringContaining('-j KUBE-SERVICES'), verdict: 'jump KUBE-SERVICES' });
    // The same chains the Service page lists for the port.
    const detail = (await t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH })).json() as ServiceDetail;
    const svcChain = detail.ports[0].chains.find((c) => c.role === 'service')!.name;
    expect(r.path.some((s) => s.chain === svcChain)).toBe(true);
    // Drift was checked (an empty list), not left unknown.
    expect(r.drift).toEqual([]);
    expect(r.readAt).toBe(t.dashboard.reader.readAt);
  });

  it('answers 400 naming the bad field', async () => {
    t = await tracedDashboard();
    for (const [params, message] of [
      [{ proto: 'icmp', src: '10.0.0.2', dst: '10.96.10.10:80' }, 'proto: "icmp" is not tcp, udp or sctp'],
      [{ proto: 'tcp', src: '10.0.0.2', dst: '10.96.10.10' }, 'dst: "10.96.10.10" has no port (write IP:PORT, [IPv6]:PORT)'],
      [{ proto: 'tcp', dst: '10.96.10.10:80' }, 'src: missing (the source IP, optionally IP:PORT)'],
      [{ proto: 'tcp', src: '10.0.0.2', dst: '10.96.10.10:80', from: 'space' }, 'from: "space" is not pod, external or node'],
    ] as const) {
      const res = await t.app.inject({ url: q(params), headers: AUTH });
      expect(res.statusCode, message).toBe(400);
      expect(res.json().error).toEqual({ code: 'KPROXY_ERR_TRACE_INPUT', message });
    }
  });

  it('shows drift the dashboard confirmed on the traced path', async () => {
    t = await tracedDashboard();
    await t.app.inject({ url: '/api/v1/tables', headers: AUTH });
    const detail = (await t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH })).json() as ServiceDetail;
    const svc = detail.ports[0].chains.find((c) => c.role === 'service')!;
    // Someone deletes the first endpoint rule by hand; two reads confirm it.
    await t.kernel.deleteRule('nat', svc.name, splitSpec(svc.rules[0].text));
    for (let i = 0; i < 2; i++) {
      await t.settle(5000);
      await t.app.inject({ url: '/api/v1/tables', headers: AUTH });
      await t.settle(0);
    }
    const r = (await t.app.inject({ url: q({ proto: 'tcp', src: '10.0.0.2', dst: '10.96.10.10:80' }), headers: AUTH })).json() as TraceResult;
    expect(r.drift).toEqual([{ table: 'nat', chain: svc.name, kind: 'missing-rule', detail: svc.rules[0].text }]);
    expect([...r.path, ...r.endpoints.flatMap((e) => e.path)].filter((s) => s.chain === svc.name).every((s) => s.drift === 'missing-rule')).toBe(true);
    expect(r.reason).toMatch(/the kernel differs from what kproxy wrote on this path \(1 finding, see drift\)$/);
  });

  it('names IPVS virtual servers from kproxy model and counts the node addresses as its own', async () => {
    t = await tracedDashboard({ mode: 'ipvs' });
    const r = (await t.app.inject({ url: q({ proto: 'tcp', src: '203.0.113.7', dst: '192.0.2.10:443' }), headers: AUTH })).json() as TraceResult;
    expect(r).toMatchObject({ mode: 'ipvs', verdict: 'dnat', service: 'shop/web:https' });
    expect(r.reason).toMatch(/^shop\/web:https: a new connection to load balancer IP 192\.0\.2\.10:443\/tcp is DNATed to one of 2 endpoints \(50% each, IPVS scheduler rr\)/);
    const blocked = (await t.app.inject({ url: q({ proto: 'tcp', src: '198.51.100.200', dst: '192.0.2.10:443' }), headers: AUTH })).json() as TraceResult;
    expect(blocked).toMatchObject({ verdict: 'drop', service: 'shop/web:https' });
    expect(blocked.reason).toMatch(/^source 198\.51\.100\.200 is outside loadBalancerSourceRanges of shop\/web:https/);
  });

  it('is a heavy read: refused with 429 and Retry-After while the dashboard is busy', async () => {
    t = await tracedDashboard({ heavy: new HeavyReads({ maxRunning: 1, maxQueued: 0 }) });
    let release = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const real = t.dashboard.detail.bind(t.dashboard);
    t.dashboard.detail = async (key) => {
      await gate;
      return real(key);
    };
    const busy = t.app.inject({ url: '/api/v1/services/shop/frontend', headers: AUTH });
    for (let i = 0; i < 50; i++) await flushMicrotasks();
    const refused = await t.app.inject({ url: q({ proto: 'tcp', src: '10.0.0.2', dst: '10.96.10.10:80' }), headers: AUTH });
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.json().error.message).toMatch(/a packet trace/);
    release();
    expect((await busy).statusCode).toBe(200);
  });
});
