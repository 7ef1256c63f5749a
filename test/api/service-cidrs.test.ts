import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '../wait.ts';
import { Cluster, node, NODE, service, serviceCIDR } from './harness.ts';

/**
 * ServiceCIDRs (networking.k8s.io/v1) through the real client-node informers:
 * nftables mode drops traffic to the unallocated addresses of these ranges.
 * Only a source asked for them watches them, and an API server that does not
 * serve them (before Kubernetes 1.33) is noticed once, not retried forever.
 */
let c: Cluster;
beforeEach(async () => {
  c = await new Cluster().start();
});
afterEach(async () => {
  await c.stop();
});

describe('ServiceCIDRs from the Kubernetes API', () => {
  it('lists and watches them into the proxy state: added, changed, deleted', async () => {
    c.server.apply(service('web'));
    c.server.apply(node(NODE));
    c.server.apply(serviceCIDR('kubernetes', ['10.96.0.0/16', 'fd00:10:96::/112']));
    await c.connect({}, { serviceCIDRs: true });
    await waitFor(() => c.state.serviceCIDRs.length === 2, { what: 'the first ServiceCIDR' });
    expect(c.state.serviceCIDRs).toEqual(['10.96.0.0/16', 'fd00:10:96::/112']);
    // A sync picks them up: the checkout carries them.
    expect(c.state.checkout().serviceCIDRs).toEqual(['10.96.0.0/16', 'fd00:10:96::/112']);

    c.server.apply(serviceCIDR('extra', ['10.97.0.0/16']));
    await waitFor(() => c.state.serviceCIDRs.includes('10.97.0.0/16'), { what: 'a second ServiceCIDR' });
    expect(c.state.hasPending).toBe(true);
    c.server.remove('ServiceCIDR', 'kubernetes');
    await waitFor(() => !c.state.serviceCIDRs.includes('10.96.0.0/16'), { what: 'the first one deleted' });
    expect(c.state.serviceCIDRs).toEqual(['10.97.0.0/16']);
    expect(c.changes.filter((x) => x.kind === 'ServiceCIDR').map((x) => `${x.op} ${x.key}`)).toEqual(['add kubernetes', 'add extra', 'delete kubernetes']);
    expect(c.server.watchRequests('servicecidrs').length).toBeGreaterThan(0);
    // They never hold the source's sync back, and its status lists their informer.
    await waitFor(() => c.source.status().synced, { what: 'the source synced' });
    expect(c.source.informers().map((i) => i.kind)).toEqual(['Service', 'EndpointSlice', 'Node', 'ServiceCIDR']);
  });

  it('is not watched unless asked (the iptables and IPVS modes)', async () => {
    c.server.apply(serviceCIDR('kubernetes', ['10.96.0.0/16']));
    await c.connectAndSync();
    expect(c.server.requests.filter((r) => r.path.includes('servicecidrs'))).toEqual([]);
    expect(c.state.serviceCIDRs).toEqual([]);
  });

  it('an API server without ServiceCIDRs is told once, and the rest works', async () => {
    c.server.unserve('servicecidrs');
    c.server.apply(service('web'));
    await c.connect({}, { serviceCIDRs: true });
    await waitFor(() => c.synced.length === 3, { what: 'initial lists' });
    await waitFor(() => c.log.lines('warn').some((l) => l.includes('serves no networking.k8s.io/v1 ServiceCIDRs')), { what: 'the warning' });
    expect(c.server.requests.filter((r) => r.path.includes('servicecidrs'))).toHaveLength(1);
    expect(c.source.status().synced).toBe(true);
    expect(c.source.informers().map((i) => i.kind)).toEqual(['Service', 'EndpointSlice', 'Node']);
  });
});
