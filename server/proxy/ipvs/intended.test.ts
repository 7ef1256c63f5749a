import { describe, expect, it } from 'vitest';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { ipvsConfig, ipvsHarness } from './testing.ts';

const tcp = (port: number) => [{ name: 'http', port, protocol: 'TCP' }];
const slice = (ips: string[]) =>
  makeSlice(
    'ns1',
    'a',
    'a-1',
    ips.map((ip) => ep(ip, { nodeName: 'node-b' })),
    tcp(8080),
  );

function cluster() {
  return stateFromObjects('node-a', [makeService('ns1', 'a', { clusterIP: '10.96.0.1', ports: tcp(80) }), slice(['10.244.1.1', '10.244.1.2'])]);
}

describe('IPVS backend: what it intended (read by the dashboard)', () => {
  it("is null before the first sync, then holds the wanted objects, the rules and each port's objects", async () => {
    const h = ipvsHarness();
    expect(h.backend.intended()).toBeNull();
    await h.sync(cluster());
    const p = h.backend.intended()!;
    expect(p.version).toBe(1);
    expect([...p.virtualServers.keys()]).toEqual(['10.96.0.1:80/TCP']);
    expect([...p.sets.get('clusterIP')!]).toEqual(['10.96.0.1,tcp:80']);
    expect([...p.binds]).toEqual(['10.96.0.1']);
    expect(p.link).toBe(true);
    expect(p.iptables).toMatch(/^\*nat\n[\s\S]*\*filter\n/);
    expect(p.objects('ns1/a:http/TCP')!.virtualServers.map((v) => v.key)).toEqual(['10.96.0.1:80/TCP']);
    expect(p.objects('ns1/nope:http/TCP')).toBeNull();
    expect(h.backend.runners.ipvs).toBe(h.ipvs);
  });

  it('lists draining real servers, keeps the last plan when a sync fails, and plans nothing after a cleanup', async () => {
    const h = ipvsHarness();
    const state = cluster();
    await h.sync(state);
    state.onEndpointSlice(slice(['10.244.1.1', '10.244.1.2']), slice(['10.244.1.1']));
    await h.sync(state);
    const p = h.backend.intended()!;
    expect(p.version).toBe(2);
    expect(p.draining.map((d) => `${d.vsKey} ${d.rs.address}`)).toEqual(['10.96.0.1:80/TCP 10.244.1.2']);

    h.ipvs.failNext = 'Memory allocation problem';
    state.onEndpointSlice(slice(['10.244.1.1']), slice(['10.244.1.1', '10.244.1.3']));
    expect((await h.backend.sync({ state: state.checkout(), forceFull: false })).error).toBeDefined();
    expect(h.backend.intended()).toBe(p);

    await h.backend.cleanup();
    const empty = h.backend.intended()!;
    expect(empty.version).toBe(3);
    expect([empty.virtualServers.size, empty.sets.size, empty.binds.size, empty.link, empty.iptables, empty.draining.length]).toEqual([0, 0, 0, false, '', 0]);
  });

  it('manages virtual servers of its family outside ipvs.excludeCIDRs', async () => {
    const h = ipvsHarness({ config: ipvsConfig({ ipvs: { excludeCIDRs: ['172.16.0.0/12'] } }) });
    await h.sync(cluster());
    const p = h.backend.intended()!;
    expect([p.manages('10.96.0.9'), p.manages('172.16.0.5'), p.manages('fd00::1')]).toEqual([true, false, false]);
  });
});
