import { describe, expect, it } from 'vitest';
import type { NftTable } from '../../kernel/nft-types.ts';
import type { EndpointSlice, Service } from '../kube-objects.ts';
import type { ProxyState } from '../proxy-state.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { KUBE_PROXY_TABLE } from './names.ts';
import { STALE_CHAIN_DELAY_MS } from './proxier.ts';
import { nftHarness, staleChains, testConfig } from './testing.ts';

/**
 * The property partial syncs rest on: whatever sequence of changes arrives,
 * applying them as partial syncs leaves the kernel holding what one full sync
 * of the final state writes. Chains that went stale are still there, empty,
 * until they are deleted a second later; so each step compares the tables
 * without empty chains, and the end compares them exactly once the stale ones
 * are gone.
 */
const config = testConfig({ mode: 'nftables', clusterCIDRs: ['10.244.0.0/16'] });

function shape(t: NftTable | null, dropEmpty: boolean): unknown {
  if (!t) return null;
  const chains = [...t.chains.values()].filter((c) => !dropEmpty || c.rules.length > 0).map((c) => [c.name, c.base, c.rules] as const);
  const sets = [...t.sets.values()].map((s) => [s.name, s.map, s.type, s.flags, s.timeoutSeconds, s.comment, [...s.elements.values()].sort((a, b) => (a.key < b.key ? -1 : 1))] as const);
  return { chains: chains.sort((a, b) => (a[0] < b[0] ? -1 : 1)), sets: sets.sort((a, b) => (a[0] < b[0] ? -1 : 1)) };
}

async function fullSyncTable(state: ProxyState): Promise<NftTable | null> {
  const h = nftHarness({ config, nodeName: 'node-a' });
  // Nothing is pending after the partial sync: this checkout holds the same maps, with no changes.
  const r = await h.backend.sync({ state: state.checkout(), forceFull: true });
  expect(r.error).toBeUndefined();
  return h.kernel.table('ip', KUBE_PROXY_TABLE);
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

/** service draws one of every kind the matrix has: ClusterIP, NodePort, LB with ranges, ETP/ITP Local, affinity, UDP. */
function service(i: number, r: () => number, shared: boolean): Service {
  const u = r();
  const protocol = r() < 0.2 ? 'UDP' : 'TCP';
  const spec: NonNullable<Service['spec']> = { clusterIP: `10.96.${i >> 8}.${i & 255}`, ports: [{ name: 'http', port: 80, protocol, ...(u < 0.5 ? { nodePort: 30000 + i } : {}) }] };
  if (u < 0.5) spec.type = 'NodePort';
  if (u < 0.2) {
    spec.type = 'LoadBalancer';
    spec.loadBalancerSourceRanges = r() < 0.5 ? ['192.0.2.0/24'] : ['192.0.2.0/25', '192.0.2.128/25', '198.51.100.7/32'];
  }
  if (u > 0.35 && u < 0.5) spec.externalTrafficPolicy = 'Local';
  if (u > 0.6 && u < 0.7) spec.internalTrafficPolicy = 'Local';
  if (u > 0.7 && u < 0.8) {
    spec.sessionAffinity = 'ClientIP';
    spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: r() < 0.5 ? 10800 : 60 } };
  }
  // Some services share one external IP and port: the map element belongs to the first by name.
  if (u > 0.85) spec.externalIPs = [shared ? '192.168.0.100' : `192.168.${i >> 8}.${i & 255}`];
  const status = u < 0.2 ? { loadBalancer: { ingress: [{ ip: `100.64.${i >> 8}.${i & 255}` }] } } : undefined;
  return makeService('ns', `s${i}`, spec, status ? { status } : {});
}

function slice(i: number, gen: number, svc: Service, r: () => number): EndpointSlice {
  const n = Math.floor(r() * 4); // 0..3 endpoints: services without any are rejected
  const eps = Array.from({ length: n }, (_, e) => {
    const u = r();
    return ep(`10.244.${(i + gen) & 255}.${e + 1}`, { nodeName: r() < 0.4 ? 'node-a' : 'node-b', ...(u < 0.1 ? { ready: false, serving: true, terminating: true } : {}) });
  });
  const protocol = svc.spec!.ports![0].protocol!;
  return makeSlice('ns', `s${i}`, `s${i}-1`, eps, [{ name: 'http', port: 8080, protocol }]);
}

describe('nftables proxier: partial syncs keep the table equal to a full sync', () => {
  for (const seed of [11, 12, 13]) {
    it(`over 40 random changes (seed ${seed})`, async () => {
      const r = rng(seed);
      const objects: (Service | EndpointSlice)[] = [];
      const live = new Map<number, { svc: Service; slice: EndpointSlice; gen: number }>();
      const add = (i: number) => {
        const svc = service(i, r, r() < 0.3);
        const s = { svc, slice: slice(i, 0, svc, r), gen: 0 };
        live.set(i, s);
        return s;
      };
      for (let i = 0; i < 50; i++) {
        const s = add(i);
        objects.push(s.svc, s.slice);
      }
      const state = stateFromObjects('node-a', objects);
      const h = nftHarness({ config, nodeName: 'node-a' });
      expect((await h.backend.sync({ state: state.checkout(), forceFull: true })).error).toBeUndefined();
      let next = 50;
      let partial = 0;
      for (let step = 0; step < 40; step++) {
        const changes = r() < 0.25 ? 1 + Math.floor(r() * 10) : 1;
        for (let c = 0; c < changes; c++) {
          const u = r();
          const keys = [...live.keys()];
          const pick = keys[Math.floor(r() * keys.length)];
          if (u < 0.25) {
            const s = add(next++);
            state.onService(null, s.svc);
            state.onEndpointSlice(null, s.slice);
          } else if (u < 0.45) {
            const s = live.get(pick)!;
            live.delete(pick);
            state.onService(s.svc, null);
            state.onEndpointSlice(s.slice, null);
          } else if (u < 0.6) {
            // The Service itself changes (type, policies, affinity timeout...).
            const s = live.get(pick)!;
            const changed = service(pick, r, r() < 0.3);
            state.onService(s.svc, changed);
            const moved = slice(pick, ++s.gen, changed, r);
            state.onEndpointSlice(s.slice, moved);
            s.svc = changed;
            s.slice = moved;
          } else {
            const s = live.get(pick)!;
            const moved = slice(pick, ++s.gen, s.svc, r);
            state.onEndpointSlice(s.slice, moved);
            s.slice = moved;
          }
        }
        if (r() < 0.3) h.clock.advance(STALE_CHAIN_DELAY_MS);
        const res = await h.backend.sync({ state: state.checkout(), forceFull: false });
        expect(res.error, `step ${step}`).toBeUndefined();
        if (!res.full) partial++;
        expect(shape(h.kernel.table('ip', KUBE_PROXY_TABLE), true), `step ${step}`).toEqual(shape(await fullSyncTable(state), true));
      }
      expect(partial).toBe(40);
      // Once the stale chains are deleted the tables are equal, empty chains and all.
      h.clock.advance(STALE_CHAIN_DELAY_MS);
      expect((await h.backend.sync({ state: state.checkout(), forceFull: false })).error).toBeUndefined();
      expect(staleChains(h.kernel.table('ip', KUBE_PROXY_TABLE))).toEqual([]);
      expect(shape(h.kernel.table('ip', KUBE_PROXY_TABLE), false)).toEqual(shape(await fullSyncTable(state), false));
      // And what the proxier believes it wrote is what the kernel holds.
      expect(shape(h.backend.intended(), false)).toEqual(shape(h.kernel.table('ip', KUBE_PROXY_TABLE), false));
    });
  }
});
