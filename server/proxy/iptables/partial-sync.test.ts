import { describe, expect, it } from 'vitest';
import { SimulatedIptables } from '../../kernel/iptables-simulated.ts';
import { parseIptablesScript } from '../../kernel/iptables-save-parser.ts';
import type { EndpointSlice, Service } from '../kube-objects.ts';
import type { ProxyState } from '../proxy-state.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { KUBE_EXTERNAL_SERVICES, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL, KUBE_SERVICES } from '../xtables/chain-names.ts';
import { harness, testConfig } from './testing.ts';

/**
 * Partial syncs leave unchanged shared chains (KUBE-SERVICES...) alone, edit
 * them in place when few rules changed and rewrite them otherwise; whatever
 * they do, the kernel must end up holding what a full sync would write, the
 * order of service rules within the shared chains aside (README: Syncs).
 */
const SHARED = new Set([KUBE_SERVICES, KUBE_NODEPORTS, KUBE_EXTERNAL_SERVICES, KUBE_PROXY_FIREWALL]);
const NODEPORTS_TAIL = 'kubernetes service nodeports; NOTE: this must be the last rule in this chain';
const config = testConfig({ clusterCIDRs: ['10.244.0.0/16'] });

/** kernelShape is the kernel's kproxy chains: shared chains as sorted rule lists, the others in order. */
function kernelShape(k: SimulatedIptables): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [tn, t] of k.dump().tables) {
    for (const [cn, c] of t.chains) {
      if (!cn.startsWith('KUBE-')) continue;
      const specs = c.rules.map((r) => r.spec);
      out[`${tn}/${cn}`] = SHARED.has(cn) ? specs.sort() : specs;
    }
  }
  return out;
}

/** fullSyncShape is the kernel a fresh full sync of the same state writes. */
async function fullSyncShape(state: ProxyState): Promise<Record<string, string[]>> {
  // Nothing is pending after the partial sync: this checkout is the same maps, with no changes.
  const h = harness({ config, nodeName: 'node-a' });
  const r = await h.backend.sync({ state: state.checkout(), forceFull: true });
  expect(r.error).toBeUndefined();
  return kernelShape(h.kernel);
}

/** rng is a small seeded generator, so a failure replays. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const tcp = (port: number) => [{ name: 'http', port, protocol: 'TCP' }];

function service(i: number, r: () => number): Service {
  const u = r();
  const spec: NonNullable<Service['spec']> = { clusterIP: `10.96.${i >> 8}.${i & 255}`, ports: [{ name: 'http', port: 80, protocol: 'TCP', ...(u < 0.4 ? { nodePort: 30000 + i } : {}) }] };
  if (u < 0.4) spec.type = 'NodePort';
  if (u < 0.15) {
    spec.type = 'LoadBalancer';
    spec.loadBalancerSourceRanges = ['192.0.2.0/24'];
  }
  if (u > 0.3 && u < 0.4) spec.externalTrafficPolicy = 'Local';
  if (u > 0.9) spec.externalIPs = [`192.168.${i >> 8}.${i & 255}`];
  const status = u < 0.15 ? { loadBalancer: { ingress: [{ ip: `100.64.${i >> 8}.${i & 255}` }] } } : undefined;
  return makeService('ns', `s${i}`, spec, status ? { status } : {});
}

function slice(i: number, gen: number, r: () => number): EndpointSlice {
  const n = Math.floor(r() * 4); // 0..3 endpoints: services without any get REJECT rules
  const eps = Array.from({ length: n }, (_, e) => ep(`10.244.${(i + gen) & 255}.${e + 1}`, { nodeName: r() < 0.3 ? 'node-a' : 'node-b' }));
  return makeSlice('ns', `s${i}`, `s${i}-1`, eps, tcp(8080));
}

describe('iptables proxier: partial syncs keep the kernel equal to a full sync', () => {
  for (const inPlaceEdits of [true, false]) {
    it(`over 40 random changes (${inPlaceEdits ? 'in-place edits' : 'rewrites only'})`, async () => {
      const r = rng(inPlaceEdits ? 7 : 8);
      const objects: (Service | EndpointSlice)[] = [];
      const live = new Map<number, { svc: Service; slice: EndpointSlice; gen: number }>();
      for (let i = 0; i < 60; i++) {
        const s = { svc: service(i, r), slice: slice(i, 0, r), gen: 0 };
        live.set(i, s);
        objects.push(s.svc, s.slice);
      }
      const state = stateFromObjects('node-a', objects);
      const h = harness({ config, nodeName: 'node-a', inPlaceEdits });
      const backend = h.backend;
      expect((await backend.sync({ state: state.checkout(), forceFull: true })).error).toBeUndefined();
      let next = 60;
      let edited = 0;
      let rewritten = 0;
      for (let step = 0; step < 40; step++) {
        const changes = r() < 0.25 ? 1 + Math.floor(r() * 12) : 1;
        for (let c = 0; c < changes; c++) {
          const u = r();
          const keys = [...live.keys()];
          const pick = keys[Math.floor(r() * keys.length)];
          if (u < 0.3) {
            const s = { svc: service(next, r), slice: slice(next, 0, r), gen: 0 };
            live.set(next++, s);
            state.onService(null, s.svc);
            state.onEndpointSlice(null, s.slice);
          } else if (u < 0.55) {
            const s = live.get(pick)!;
            live.delete(pick);
            state.onService(s.svc, null);
            state.onEndpointSlice(s.slice, null);
          } else {
            const s = live.get(pick)!;
            const moved = slice(pick, ++s.gen, r);
            state.onEndpointSlice(s.slice, moved);
            s.slice = moved;
          }
        }
        const res = await backend.sync({ state: state.checkout(), forceFull: false });
        expect(res.error, `step ${step}`).toBeUndefined();
        expect(res.full).toBe(false);
        if (/^-[DI] /m.test(res.batch!)) edited++;
        if (/^:KUBE-SERVICES /m.test(res.batch!)) rewritten++;
        const got = kernelShape(h.kernel);
        expect(got, `step ${step}`).toEqual(await fullSyncShape(state));
        expect(h.kernel.rules('nat', KUBE_SERVICES).at(-1), `step ${step}: the node ports jump stays last`).toContain(NODEPORTS_TAIL);
      }
      // Both paths were taken (a single change edits a 60-service chain; a dozen rewrite it).
      if (inPlaceEdits) expect(edited).toBeGreaterThan(5);
      else expect(edited).toBe(0);
      expect(rewritten).toBeGreaterThan(2);
    });
  }

  it('writes nothing, and runs no iptables-restore, when nothing changed', async () => {
    const state = stateFromObjects('node-a', [service(1, rng(1)), slice(1, 0, () => 0.9)]);
    const h = harness({ config, nodeName: 'node-a' });
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    const before = h.kernel.callsOf('iptables-restore').length;
    const r = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(r.error).toBeUndefined();
    expect(r.full).toBe(false);
    expect(r.linesWritten).toBe(0);
    expect(r.batch).toBeUndefined();
    expect(h.kernel.callsOf('iptables-restore')).toHaveLength(before);
  });

  it("an endpoint change touches only that service port's chains: no shared or fixed chain, no filter table", async () => {
    const r = rng(3);
    const objects = Array.from({ length: 20 }, (_, i) => [service(i, r), slice(i, 0, () => 0.9)]).flat();
    const state = stateFromObjects('node-a', objects);
    const h = harness({ config, nodeName: 'node-a' });
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    state.onEndpointSlice(null, makeSlice('ns', 's3', 's3-1', [ep('10.244.9.1'), ep('10.244.9.2')], tcp(8080)));
    const res = await h.backend.sync({ state: state.checkout(), forceFull: false });
    const tables = parseIptablesScript(res.batch!).tables;
    expect(tables.map((t) => t.name)).toEqual(['nat']);
    const declared = tables[0].entries.flatMap((e) => (e.kind === 'chain' ? [e.name] : []));
    expect(declared.every((c) => /^KUBE-(SVC|SEP|EXT|FW|SVL)-/.test(c))).toBe(true);
    expect(res.batch).not.toMatch(/^-[DI] /m);
  });

  it('rebuilds the text it dropped after a sync: a second full sync writes what the first did, a changed service rewrites its unchanged port too', async () => {
    const ports = [
      { name: 'a', port: 80, protocol: 'TCP' },
      { name: 'b', port: 81, protocol: 'TCP' },
    ];
    const twoSlice = (ip: string) =>
      makeSlice(
        'ns',
        'two',
        'two-1',
        [ep(ip, { nodeName: 'node-b' })],
        [
          { name: 'a', port: 8080, protocol: 'TCP' },
          { name: 'b', port: 8081, protocol: 'TCP' },
        ],
      );
    const r = rng(5);
    const objects = [makeService('ns', 'two', { clusterIP: '10.96.9.9', ports }), twoSlice('10.244.9.1'), ...Array.from({ length: 10 }, (_, i) => [service(i, r), slice(i, 0, () => 0.9)]).flat()];
    const state = stateFromObjects('node-a', objects as (Service | EndpointSlice)[]);
    const h = harness({ config, nodeName: 'node-a' });
    const first = await h.backend.sync({ state: state.checkout(), forceFull: true });
    const again = await h.backend.sync({ state: state.checkout(), forceFull: true });
    // The first input also carried the jumps and canaries of a fresh node; the rest is the same.
    const norm = (b: string) =>
      b
        .split('\n')
        .filter((l) => !l.startsWith('-I ') && !l.includes('KUBE-PROXY-CANARY'))
        .join('\n')
        .replace('*mangle\nCOMMIT\n', '');
    expect(norm(again.batch!)).toBe(norm(first.batch!));
    state.onEndpointSlice(null, twoSlice('10.244.9.2'));
    const res = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(res.error).toBeUndefined();
    expect(res.batch).toMatch(/^-A KUBE-SVC-\S+ -m comment --comment "ns\/two:a -> 10\.244\.9\.2:8080"/m);
    expect(res.batch).toMatch(/^-A KUBE-SVC-\S+ -m comment --comment "ns\/two:b -> 10\.244\.9\.2:8081"/m);
    expect(kernelShape(h.kernel)).toEqual(await fullSyncShape(state));
  });

  it('a missing rule makes the in-place edit fail; the next sync is full and repairs the kernel', async () => {
    const r = rng(4);
    const objects = Array.from({ length: 40 }, (_, i) => [service(i, r), slice(i, 0, () => 0.9)]).flat();
    const state = stateFromObjects('node-a', objects);
    const h = harness({ config, nodeName: 'node-a' });
    await h.backend.sync({ state: state.checkout(), forceFull: true });
    // Someone deletes s5's jump behind kproxy's back; then s5 goes away.
    const jump = h.kernel.rules('nat', KUBE_SERVICES).find((s) => s.includes('ns/s5:http cluster IP'))!;
    await h.kernel.deleteRule(
      'nat',
      KUBE_SERVICES,
      parseIptablesScript(`*nat\n-A KUBE-SERVICES ${jump}\nCOMMIT\n`).tables[0].entries.flatMap((e) => (e.kind === 'chain' ? [] : [...e.args])),
    );
    state.onService(objects[10] as Service, null);
    const failed = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(failed.error?.message).toMatch(/-D KUBE-SERVICES/);
    const repaired = await h.backend.sync({ state: state.checkout(), forceFull: false });
    expect(repaired.error).toBeUndefined();
    expect(repaired.full).toBe(true);
    expect(kernelShape(h.kernel)).toEqual(await fullSyncShape(state));
  });
});
