import { describe, expect, it } from 'vitest';
import { SimulatedIptables } from '../kernel/iptables-simulated.ts';
import type { ServicePort } from '../proxy/service-port.ts';
import { categorizeEndpoints } from '../proxy/topology.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../proxy/testing.ts';
import { harness } from '../proxy/iptables/testing.ts';
import { dashboardPortId, joinFamilies, splitPortId } from './family-model.ts';
import { FamilyKernelView, familyTable, tableFamily } from './family-view.ts';
import { IptablesView } from './iptables/view.ts';

const dual = makeService('shop', 'catalog', { clusterIP: '10.96.10.80', clusterIPs: ['10.96.10.80', 'fd00:10:96::80'], ipFamilies: ['IPv4', 'IPv6'] });
const objects = [dual, makeSlice('shop', 'catalog', 'c4', [ep('10.244.0.80')]), { ...makeSlice('shop', 'catalog', 'c6', [ep('fd00:10:244::80')]), addressType: 'IPv6' }];

/** programmed programs both families of the objects into simulated kernels and returns the joined view. */
async function programmed() {
  const families = (['IPv4', 'IPv6'] as const).map((family) => {
    const kernel = new SimulatedIptables({ family });
    return { family, kernel, h: harness({ kernel }), state: stateFromObjects('node-a', objects, undefined, family) };
  });
  const views = families.map((f) => ({ family: f.family, provider: new IptablesView({ runner: f.kernel, simulated: true, pause: async () => {} }) }));
  for (const [i, f] of families.entries()) {
    await f.h.backend.init!();
    const checkout = f.state.checkout();
    const result = await f.h.backend.sync({ state: checkout, forceFull: true });
    expect(result.error).toBeUndefined();
    views[i].provider.noteSync({ family: f.family, seq: i + 1, ok: true, full: result.full, trigger: 'startup', startedAt: 0, finishedAt: 0 } as never, result);
  }
  return { families, view: new FamilyKernelView(views) };
}

describe('dashboard ids and tables of the IP families', () => {
  it('keys IPv6 service ports "…@IPv6" and IPv6 tables "ip6-…", and reads both back', () => {
    expect(dashboardPortId('shop/catalog:http/TCP', 'IPv6')).toBe('shop/catalog:http/TCP@IPv6');
    expect(dashboardPortId('shop/catalog:http/TCP', 'IPv4')).toBe('shop/catalog:http/TCP');
    expect(splitPortId('shop/catalog:http/TCP@IPv6')).toEqual({ family: 'IPv6', id: 'shop/catalog:http/TCP' });
    expect(familyTable('nat', 'IPv6')).toBe('ip6-nat');
    expect(tableFamily('ip6-filter')).toEqual({ family: 'IPv6', table: 'filter' });
    expect(tableFamily('nat')).toEqual({ family: 'IPv4', table: 'nat' });
  });

  it("joins both families' service ports and endpoints into one model without copying the maps", () => {
    const states = (['IPv4', 'IPv6'] as const).map((f) => stateFromObjects('node-a', objects, undefined, f));
    for (const s of states) s.checkout();
    const joined = joinFamilies(() => states);
    expect([...joined.services.keys()]).toEqual(['shop/catalog:p80/TCP', 'shop/catalog:p80/TCP@IPv6']);
    const v6 = joined.services.get('shop/catalog:p80/TCP@IPv6')!;
    expect(v6).toMatchObject({ id: 'shop/catalog:p80/TCP@IPv6', clusterIP: 'fd00:10:96::80' });
    // The same object each time (the catalog compares them), and the family's own map is untouched.
    expect(joined.services.get('shop/catalog:p80/TCP@IPv6')).toBe(v6);
    expect(states[1].services.get('shop/catalog:p80/TCP')!.id).toBe('shop/catalog:p80/TCP');
    expect(joined.endpoints.get('shop/catalog:p80/TCP@IPv6')!.map((e) => e.key)).toEqual(['[fd00:10:244::80]:80']);
    expect(joined.endpoints.get('shop/catalog:p80/TCP')!.map((e) => e.key)).toEqual(['10.244.0.80:80']);
    expect(joined.services.size).toBe(2);
    expect(joined.services.has('shop/catalog:p80/TCP@IPv4')).toBe(false);
  });
});

describe('FamilyKernelView', () => {
  it('shows each family its own tables: iptables as nat and filter, ip6tables as ip6-nat and ip6-filter', async () => {
    const { view } = await programmed();
    const read = await view.read();
    expect([...read.tables.keys()].sort()).toEqual(['filter', 'ip6-filter', 'ip6-mangle', 'ip6-nat', 'mangle', 'nat']);
    const v6nat = [...read.tables.get('ip6-nat')!.chains.get('KUBE-SERVICES')!.rules].map((r) => r.spec).join('\n');
    expect(v6nat).toContain('-d fd00:10:96::80');
    expect(v6nat).not.toContain('10.96.10.80');
    const intended = (await view.intended())!;
    expect(intended.tables.get('ip6-nat')!.chains.has('KUBE-SERVICES')).toBe(true);
    // What kproxy wrote is split back by family for the download.
    const text = (await view.formatIntended(intended)).join('');
    expect(text).toMatch(/^# IPv4\n\*mangle\n/);
    expect(text).toContain('\n# IPv6\n*mangle\n');
  });

  it("describes an IPv6 port with its family's chains, in its ip6- tables", async () => {
    const { view, families } = await programmed();
    const sp: ServicePort = { ...families[1].state.services.get('shop/catalog:p80/TCP')!, id: 'shop/catalog:p80/TCP@IPv6' };
    const eps = families[1].state.endpoints.get('shop/catalog:p80/TCP')!;
    const o = view.servicePort(sp, eps, categorizeEndpoints(eps, sp, 'node-a', ''));
    expect(o.entryChains.map((e) => `${e.table}/${e.chain}`)).toContain('ip6-nat/KUBE-SERVICES');
    expect(o.owned.every((c) => c.table.startsWith('ip6-'))).toBe(true);
    expect(o.flows[0].address).toBe('[fd00:10:96::80]:80/TCP');
    expect(view.ownsChain('ip6-nat', o.owned[0].chain)).toBe(true);
    expect(view.requiredRules().some((r) => r.table === 'ip6-nat' && r.chain === 'PREROUTING')).toBe(true);
  });
});
