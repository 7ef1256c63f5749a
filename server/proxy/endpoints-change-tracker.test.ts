import { describe, expect, it } from 'vitest';
import { EndpointsChangeTracker } from './endpoints-change-tracker.ts';
import { ep, makeSlice } from './testing.ts';

const T0 = Date.UTC(2026, 10, 1);

function tracker() {
  return new EndpointsChangeTracker('IPv4', 'node-a', T0);
}

describe('EndpointsChangeTracker', () => {
  it('merges all slices of a service, dedups by ip:port and sorts like kube-proxy (by ip:port text)', () => {
    const t = tracker();
    t.update('ns/s-1', makeSlice('ns', 's', 's-1', [ep('10.0.0.9'), ep('10.0.0.10')]));
    t.update('ns/s-2', makeSlice('ns', 's', 's-2', [ep('10.0.0.2'), ep('10.0.0.9', { nodeName: 'node-a' })]));
    const c = t.checkout();
    expect([...c.changed]).toEqual(['ns/s']);
    const eps = t.endpoints.get('ns/s:p80/TCP')!;
    expect(eps.map((e) => e.key)).toEqual(['10.0.0.10:80', '10.0.0.2:80', '10.0.0.9:80']);
    expect(eps.find((e) => e.ip === '10.0.0.9')!.isLocal).toBe(true); // the local copy wins
  });

  it('reads conditions with API defaults (unset = ready, serving, not terminating)', () => {
    const t = tracker();
    t.update('ns/s-1', makeSlice('ns', 's', 's-1', [{ addresses: ['10.0.0.1'] }, ep('10.0.0.2', { ready: false, serving: true, terminating: true })]));
    t.checkout();
    const [a, b] = t.endpoints.get('ns/s:p80/TCP')!;
    expect([a.ready, a.serving, a.terminating]).toEqual([true, true, false]);
    expect([b.ready, b.serving, b.terminating]).toEqual([false, true, true]);
  });

  it('keeps endpoints that moved between slices (no flap when one slice updates before the other)', () => {
    const t = tracker();
    t.update('ns/s-1', makeSlice('ns', 's', 's-1', [ep('10.0.0.1')]));
    t.checkout();
    t.update('ns/s-2', makeSlice('ns', 's', 's-2', [ep('10.0.0.1')]));
    t.update('ns/s-1', makeSlice('ns', 's', 's-1', []));
    const c = t.checkout();
    expect(c.changed.size).toBe(0);
    expect(t.endpoints.get('ns/s:p80/TCP')!.map((e) => e.key)).toEqual(['10.0.0.1:80']);
  });

  it('reports an identical slice as unchanged', () => {
    const t = tracker();
    const s = makeSlice('ns', 's', 's-1', [ep('10.0.0.1')]);
    expect(t.update('ns/s-1', s).kind).toBe('changed');
    t.checkout();
    expect(t.update('ns/s-1', structuredClone(s)).kind).toBe('unchanged');
    expect(t.pendingCount).toBe(0);
  });

  it('reports stale UDP endpoints and newly active UDP services for conntrack cleanup', () => {
    const t = tracker();
    const udp = [{ name: 'dns', port: 53, protocol: 'UDP' }];
    t.update('ns/dns-1', makeSlice('ns', 'dns', 'dns-1', [], udp));
    t.checkout();
    t.update('ns/dns-1', makeSlice('ns', 'dns', 'dns-1', [ep('10.0.0.1'), ep('10.0.0.2')], udp));
    let c = t.checkout();
    expect([...c.newlyActive]).toEqual(['ns/dns:dns/UDP']);
    expect(c.stale).toEqual([]);
    t.update('ns/dns-1', makeSlice('ns', 'dns', 'dns-1', [ep('10.0.0.2', { ready: false, serving: false })], udp));
    c = t.checkout();
    expect(c.stale.map((s) => `${s.servicePortId} ${s.endpoint.key}`).sort()).toEqual(['ns/dns:dns/UDP 10.0.0.1:53', 'ns/dns:dns/UDP 10.0.0.2:53']);
    expect(c.newlyActive.size).toBe(0);
  });

  it('never reports TCP endpoints as stale', () => {
    const t = tracker();
    t.update('ns/s-1', makeSlice('ns', 's', 's-1', [ep('10.0.0.1')]));
    t.checkout();
    t.update('ns/s-1', null);
    const c = t.checkout();
    expect(c.stale).toEqual([]);
    expect([...c.changed]).toEqual(['ns/s']);
    expect(t.endpoints.size).toBe(0);
  });

  it('collects trigger times after start and ignores older ones', () => {
    const t = tracker();
    const after = new Date(T0 + 5000).toISOString();
    const before = new Date(T0 - 5000).toISOString();
    t.update('ns/a-1', makeSlice('ns', 'a', 'a-1', [ep('10.0.0.1')], undefined, { 'endpoints.kubernetes.io/last-change-trigger-time': after }));
    t.update('ns/b-1', makeSlice('ns', 'b', 'b-1', [ep('10.0.0.2')], undefined, { 'endpoints.kubernetes.io/last-change-trigger-time': before }));
    expect(t.checkout().triggerTimes).toEqual([T0 + 5000]);
    expect(t.checkout().triggerTimes).toEqual([]);
  });

  it('refuses an invalid slice and keeps the last valid one', () => {
    const t = tracker();
    t.update('ns/s-1', makeSlice('ns', 's', 's-1', [ep('10.0.0.1')]));
    t.checkout();
    const bad = makeSlice('ns', 's', 's-1', [ep('10.0.0.999')]);
    const r = t.update('ns/s-1', bad);
    expect(r.kind).toBe('invalid');
    expect(r.kind === 'invalid' && r.error.message).toMatch(/^EndpointSlice ns\/s-1: endpoints\[0\].addresses\[0\] "10.0.0.999": is not an IP address/);
    expect(t.checkout().changed.size).toBe(0);
    expect(t.endpoints.get('ns/s:p80/TCP')!.map((e) => e.key)).toEqual(['10.0.0.1:80']);
  });

  it('refuses an address of the other family, or IPv4-mapped IPv6, naming the address and why', () => {
    const t = tracker();
    const other = t.update('ns/s-1', makeSlice('ns', 's', 's-1', [ep('fd00::1')]));
    expect(other.kind === 'invalid' && other.error.message).toBe('EndpointSlice ns/s-1: endpoints[0].addresses[0] "fd00::1": is an IPv6 address in a slice of addressType IPv4');
    const v6 = new EndpointsChangeTracker('IPv6', 'node-a', 0);
    const slice = { ...makeSlice('ns', 's', 's-1', [ep('::ffff:10.0.0.1')]), addressType: 'IPv6' };
    const mapped = v6.update('ns/s-1', slice);
    expect(mapped.kind === 'invalid' && mapped.error.message).toBe(
      'EndpointSlice ns/s-1: endpoints[0].addresses[0] "::ffff:10.0.0.1": is an IPv4-mapped IPv6 address, which Kubernetes does not accept (write 10.0.0.1 instead)',
    );
  });

  it('keeps IPv6 endpoints of an IPv6 slice in canonical form, keyed [ip]:port, and ignores them in the IPv4 tracker', () => {
    const slice = { ...makeSlice('ns', 's', 's-1', [ep('FD00:0:0::A'), ep('fd00::0b')]), addressType: 'IPv6' };
    const v6 = new EndpointsChangeTracker('IPv6', 'node-a', 0);
    expect(v6.update('ns/s-1', slice).kind).toBe('changed');
    v6.checkout();
    expect(v6.endpoints.get('ns/s:p80/TCP')!.map((e) => e.key)).toEqual(['[fd00::a]:80', '[fd00::b]:80']);
    const v4 = tracker();
    expect(v4.update('ns/s-1', slice)).toEqual({ kind: 'ignored', reason: 'it holds IPv6 addresses' });
    const fqdn = { ...slice, addressType: 'FQDN' };
    expect(v6.update('ns/s-2', { ...fqdn, metadata: { ...fqdn.metadata, name: 's-2' } })).toEqual({ kind: 'ignored', reason: 'FQDN slices are not proxied' });
  });

  it.each([
    [{ ports: [{ name: 'p80', port: 0 }] }, /ports\[0\].port 0/],
    [{ ports: [{ name: 'p80', port: 80, protocol: 'ICMP' }] }, /ports\[0\].protocol "ICMP"/],
    [{ addressType: 'IPvX' }, /addressType "IPvX"/],
    [{ metadata: { name: 's-1', namespace: 'ns', labels: {} } }, /kubernetes.io\/service-name/],
    [{ endpoints: Array.from({ length: 1001 }, (_, i) => ep(`10.0.${i >> 8}.${i & 255}`)) }, /1001 endpoints/],
  ])('refuses a malformed slice (%#)', (patch, message) => {
    const t = tracker();
    const r = t.update('ns/s-1', { ...makeSlice('ns', 's', 's-1', [ep('10.0.0.1')]), ...patch } as never);
    expect(r.kind).toBe('invalid');
    expect(r.kind === 'invalid' && r.error.message).toMatch(message);
  });

  it('ignores slices of the other family and FQDN slices', () => {
    const t = tracker();
    expect(t.update('ns/s-1', { ...makeSlice('ns', 's', 's-1', [ep('fd00::1')]), addressType: 'IPv6' }).kind).toBe('ignored');
    expect(t.update('ns/s-2', { ...makeSlice('ns', 's', 's-2', []), addressType: 'FQDN' }).kind).toBe('ignored');
  });

  it('skips ports without a number (meaning "all ports") as kube-proxy does', () => {
    const t = tracker();
    t.update(
      'ns/s-1',
      makeSlice(
        'ns',
        's',
        's-1',
        [ep('10.0.0.1')],
        [
          { name: 'all', port: null },
          { name: 'p80', port: 80 },
        ],
      ),
    );
    t.checkout();
    expect([...t.endpoints.keys()]).toEqual(['ns/s:p80/TCP']);
  });
});

describe('EndpointsChangeTracker and bad input', () => {
  it('reports a refused slice as invalid, but lets an error that is not about the object through (a bug is not bad input)', () => {
    const t = tracker();
    const bad = makeSlice('ns', 's', 's-1', [ep('10.0.0.1')]);
    bad.addressType = 'Bogus' as never;
    const res = t.update('ns/s-1', bad);
    expect(res.kind).toBe('invalid');
    const broken = makeSlice('ns', 's', 's-2', [ep('10.0.0.2')]);
    Object.defineProperty(broken, 'endpoints', {
      get() {
        throw new TypeError('a bug while reading the slice');
      },
    });
    expect(() => t.update('ns/s-2', broken)).toThrow(TypeError);
  });
});
