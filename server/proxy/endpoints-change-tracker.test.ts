import { describe, expect, it } from 'vitest';
import { EndpointSliceInvalidError } from '../errors.ts';
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

  it.each([
    ['unspecified', 'IPv4', '0.0.0.0', 'may not be unspecified (0.0.0.0)'],
    ['unspecified', 'IPv6', '::', 'may not be unspecified (::)'],
    ['loopback', 'IPv4', '127.0.0.1', 'may not be in the loopback range (127.0.0.0/8, ::1/128)'],
    ['loopback', 'IPv4', '127.10.0.3', 'may not be in the loopback range (127.0.0.0/8, ::1/128)'],
    ['loopback', 'IPv6', '::1', 'may not be in the loopback range (127.0.0.0/8, ::1/128)'],
    ['link-local', 'IPv4', '169.254.169.254', 'may not be in the link-local range (169.254.0.0/16, fe80::/10)'],
    ['link-local', 'IPv6', 'fe80::1', 'may not be in the link-local range (169.254.0.0/16, fe80::/10)'],
    ['link-local multicast', 'IPv4', '224.0.0.251', 'may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)'],
    ['link-local multicast', 'IPv6', 'ff02::1', 'may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)'],
  ] as const)('refuses a %s %s endpoint address (%s) as the API server does, naming the slice and the field, and keeps the last valid slice', (_class, family, ip, why) => {
    const t = new EndpointsChangeTracker(family, 'node-a', T0);
    const good = family === 'IPv4' ? '10.0.0.1' : 'fd00::1';
    const slice = (addrs: string[]) => ({ ...makeSlice('ns', 's', 's-1', [ep(good), { ...ep(good), addresses: addrs }]), addressType: family });
    t.update('ns/s-1', slice([good]));
    t.checkout();
    // Every address of an endpoint is checked, not only the first (the one kube-proxy uses).
    const r = t.update('ns/s-1', slice([good, ip]));
    expect(r.kind === 'invalid' && r.error.message).toBe(`EndpointSlice ns/s-1: endpoints[1].addresses[1] ${JSON.stringify(ip)}: ${why}`);
    expect(r.kind === 'invalid' && r.error).toBeInstanceOf(EndpointSliceInvalidError);
    expect(t.checkout().changed.size).toBe(0);
    expect(t.endpoints.get('ns/s:p80/TCP')!.map((e) => e.ip)).toEqual([good]);
  });

  it('accepts global multicast and broadcast endpoint addresses, which the API server accepts too', () => {
    const t = tracker();
    expect(t.update('ns/s-1', makeSlice('ns', 's', 's-1', [ep('239.1.2.3'), ep('255.255.255.255')])).kind).toBe('changed');
  });

  it.each([['web/evil'], ['web.evil'], ['Web'], ['-web'], ['web_1'], ['x'.repeat(64)]])(
    'refuses a kubernetes.io/service-name label that is no Service name (%s), so it can never be read as another service',
    (label) => {
      const t = tracker();
      const r = t.update('shop/evil', makeSlice('shop', label, 'evil', [ep('10.0.0.66')]));
      expect(r.kind === 'invalid' && r.error.message).toBe(
        `EndpointSlice shop/evil: metadata.labels["kubernetes.io/service-name"] ${JSON.stringify(label)
          .slice(0, 80)
          .replace(/^(.{77}).*$/, '$1...')}: must be a Service name: a DNS label of at most 63 lower-case letters, digits and "-"`,
      );
    },
  );

  it("a slice labelled web/evil in namespace shop does not replace shop/web's endpoints", () => {
    const t = tracker();
    t.update('shop/web-abc', makeSlice('shop', 'web', 'web-abc', [ep('10.244.0.5')]));
    t.checkout();
    expect(t.update('shop/evil', makeSlice('shop', 'web/evil', 'evil', [ep('10.0.0.66')])).kind).toBe('invalid');
    expect(t.checkout().changed.size).toBe(0);
    expect(t.endpoints.get('shop/web:p80/TCP')!.map((e) => e.ip)).toEqual(['10.244.0.5']);
  });

  it('accepts a Service name that starts with a digit (RelaxedServiceNameValidation)', () => {
    const t = tracker();
    expect(t.update('shop/1web-abc', makeSlice('shop', '1web', '1web-abc', [ep('10.244.0.5')])).kind).toBe('changed');
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
