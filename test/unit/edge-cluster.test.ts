import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canonicalIP, ipToBigInt, parseCIDR, type IPFamily } from '../../server/net/ip.ts';
import type { EndpointSlice, Node, Service } from '../../server/proxy/kube-objects.ts';
import { parseManifest } from '../../server/sources/file/manifest.ts';
import { CI_SEEDS, edgeSeeds, ENDPOINT_COUNTS, expectations, fixedEdgeCases, limitEdgeCases, randomEdgeCase, sourceRanges, writeEdgeCase, type EdgeCase } from '../kernel/harness/edge-cluster.ts';
import { stateFromObjects } from '../../server/proxy/testing.ts';

/**
 * The edge-case generator (test/kernel/harness/edge-cluster.ts): every object
 * it makes is one the API server would accept (checked here against the API
 * server's rules, pkg/apis/core/validation and pkg/apis/discovery/validation,
 * written out below rather than taken from kproxy), kproxy's model accepts
 * them all, the fixed cases are the edges they are named after, random
 * clusters are the same for the same seed, and the expectations hold what a
 * trace must find.
 */

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const label = (s: unknown, re = DNS1123_LABEL) => typeof s === 'string' && s.length <= 63 && re.test(s);
const subdomain = (s: unknown) => typeof s === 'string' && s.length <= 253 && s.split('.').every((l) => label(l));
const family = (ip: string): IPFamily => (ip.includes(':') ? 'IPv6' : 'IPv4');

/** apiProblems lists what the API server would refuse in a case (empty: it accepts every object). */
function apiProblems(c: EdgeCase): string[] {
  const out: string[] = [];
  const bad = (what: string) => out.push(what);
  const nodePorts = new Map<string, string>();
  const clusterIPs = new Set<string>();
  for (const o of c.objects) {
    const ref = `${o.kind} ${o.metadata?.namespace ?? ''}/${o.metadata?.name}`;
    if (o.kind === 'Node') {
      const n = o as Node;
      if (!subdomain(n.metadata?.name)) bad(`${ref}: name`);
      for (const v of Object.values(n.metadata?.labels ?? {})) if (v.length > 63 || !/^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?)?$/.test(v)) bad(`${ref}: label value ${v}`);
      for (const cidr of n.spec?.podCIDRs ?? []) if (parseCIDR(cidr)?.text !== cidr) bad(`${ref}: podCIDR ${cidr}`);
      continue;
    }
    if (!label(o.metadata?.namespace)) bad(`${ref}: namespace`);
    if (o.kind === 'Service') {
      const s = o as Service;
      const spec = s.spec!;
      if (!label(s.metadata?.name, DNS1035_LABEL)) bad(`${ref}: name`);
      const ips = spec.clusterIPs ?? [];
      if (spec.clusterIP !== ips[0] || ips.length === 0 || ips.length > 2 || new Set(ips.map(family)).size !== ips.length) bad(`${ref}: clusterIPs`);
      if (JSON.stringify(spec.ipFamilies) !== JSON.stringify(ips.map(family))) bad(`${ref}: ipFamilies`);
      if ((spec.ipFamilyPolicy === 'SingleStack' && ips.length !== 1) || (spec.ipFamilyPolicy === 'RequireDualStack' && ips.length !== 2)) bad(`${ref}: ipFamilyPolicy`);
      for (const ip of ips) {
        if (canonicalIP(ip) !== ip) bad(`${ref}: cluster IP ${ip}`);
        if (clusterIPs.has(ip)) bad(`${ref}: cluster IP ${ip} taken`);
        clusterIPs.add(ip);
      }
      const ports = spec.ports ?? [];
      if (ports.length === 0) bad(`${ref}: no ports`);
      const names = new Set<string>();
      const keys = new Set<string>();
      for (const p of ports) {
        if (ports.length > 1 && !p.name) bad(`${ref}: a port without a name`);
        if (p.name && (!label(p.name) || names.has(p.name))) bad(`${ref}: port name ${p.name}`);
        names.add(p.name ?? '');
        if (!['TCP', 'UDP', 'SCTP'].includes(p.protocol!)) bad(`${ref}: protocol`);
        for (const n of [p.port, p.targetPort]) if (typeof n !== 'number' || n < 1 || n > 65535) bad(`${ref}: port ${n}`);
        if (keys.has(`${p.protocol}/${p.port}`)) bad(`${ref}: port ${p.port} twice`);
        keys.add(`${p.protocol}/${p.port}`);
        if (spec.type === 'ClusterIP' && p.nodePort) bad(`${ref}: node port on a ClusterIP`);
        if (spec.type !== 'ClusterIP' && !p.nodePort) bad(`${ref}: no node port allocated`);
        if (spec.type === 'LoadBalancer' && (p.port === 10250 || p.protocol === 'SCTP')) bad(`${ref}: load balancer port ${p.protocol}/${p.port}`);
        if (p.nodePort) {
          if (p.nodePort < 30000 || p.nodePort > 32767) bad(`${ref}: node port ${p.nodePort} out of the default range`);
          const key = `${p.protocol}/${p.nodePort}`;
          if (nodePorts.has(key)) bad(`${ref}: node port ${key} also used by ${nodePorts.get(key)}`);
          nodePorts.set(key, ref);
        }
      }
      if (spec.healthCheckNodePort) {
        if (spec.type !== 'LoadBalancer' || spec.externalTrafficPolicy !== 'Local') bad(`${ref}: healthCheckNodePort`);
        const key = `TCP/${spec.healthCheckNodePort}`;
        if (nodePorts.has(key) || spec.healthCheckNodePort < 30000 || spec.healthCheckNodePort > 32767) bad(`${ref}: healthCheckNodePort ${spec.healthCheckNodePort}`);
        nodePorts.set(key, ref);
      }
      if (spec.type === 'LoadBalancer' && spec.externalTrafficPolicy === 'Local' && !spec.healthCheckNodePort) bad(`${ref}: no healthCheckNodePort`);
      if (spec.type === 'ClusterIP' && spec.externalTrafficPolicy) bad(`${ref}: externalTrafficPolicy on a ClusterIP`);
      if (spec.sessionAffinity === 'ClientIP') {
        const t = spec.sessionAffinityConfig?.clientIP?.timeoutSeconds;
        if (typeof t !== 'number' || t < 1 || t > 86400) bad(`${ref}: affinity timeout ${t}`);
      } else if (spec.sessionAffinityConfig) bad(`${ref}: sessionAffinityConfig without ClientIP`);
      for (const ip of spec.externalIPs ?? []) if (canonicalIP(ip) !== ip || /^(127\.|169\.254\.|0\.0\.0\.0$|::1?$|fe[89ab])/.test(ip)) bad(`${ref}: external IP ${ip}`);
      if (spec.loadBalancerSourceRanges && spec.type !== 'LoadBalancer') bad(`${ref}: source ranges on a ${spec.type}`);
      for (const r of spec.loadBalancerSourceRanges ?? []) if (parseCIDR(r)?.text !== r) bad(`${ref}: source range ${r}`);
      for (const i of s.status?.loadBalancer?.ingress ?? []) if (!i.ip || canonicalIP(i.ip) !== i.ip) bad(`${ref}: ingress ${i.ip}`);
      continue;
    }
    const sl = o as EndpointSlice;
    if (!subdomain(sl.metadata?.name)) bad(`${ref}: name`);
    if (!label(sl.metadata?.labels?.['kubernetes.io/service-name'], DNS1035_LABEL)) bad(`${ref}: service-name label`);
    if (sl.addressType !== 'IPv4' && sl.addressType !== 'IPv6') bad(`${ref}: addressType`);
    const eps = sl.endpoints ?? [];
    if (eps.length > 100) bad(`${ref}: ${eps.length} endpoints (the controller cuts slices at 100)`);
    if ((sl.ports ?? []).length > 100) bad(`${ref}: more than 100 ports`);
    if (new Set((sl.ports ?? []).map((p) => p.name)).size !== (sl.ports ?? []).length) bad(`${ref}: port names not unique`);
    for (const e of eps) {
      const a = e.addresses ?? [];
      if (a.length !== 1 || canonicalIP(a[0]) !== a[0] || family(a[0]) !== sl.addressType) bad(`${ref}: addresses ${a}`);
      if (e.nodeName !== undefined && !subdomain(e.nodeName)) bad(`${ref}: nodeName`);
      if ((e.hints?.forZones ?? []).length > 8) bad(`${ref}: more than 8 zone hints`);
      if (e.targetRef?.name !== undefined && !subdomain(e.targetRef.name)) bad(`${ref}: targetRef name ${e.targetRef.name}`);
    }
  }
  return out;
}

/** refusedByKproxy: what kproxy's model refuses of a case, in every family of it. */
function refusedByKproxy(c: EdgeCase): string[] {
  return c.families.flatMap((f) => [...stateFromObjects(c.node, c.objects, undefined, f).invalid.values()]);
}

const fixed = fixedEdgeCases();
/** fixedEdgeCase builds every case to return one: look them up in the list built once. */
const fixedEdgeCase = (name: string) => fixed.find((c) => c.name === name)!;
const randoms = Array.from({ length: 40 }, (_, i) => randomEdgeCase(i + 1));

describe('edge cases: valid objects', () => {
  it.each(fixed.map((c) => [c.name, c] as const))('%s: the API server would accept every object, and so does kproxy', (_name, c) => {
    expect(apiProblems(c)).toEqual([]);
    expect(refusedByKproxy(c)).toEqual([]);
  });

  it.each(limitEdgeCases().map((c) => [c.name, c] as const))('limit case %s: the API server would accept every object, and so does kproxy (a mode may still leave a port out)', (_name, c) => {
    expect(apiProblems(c)).toEqual([]);
    expect(refusedByKproxy(c)).toEqual([]);
  });

  it('random clusters: the API server would accept every object, and so does kproxy (40 seeds)', () => {
    for (const c of randoms) {
      expect(apiProblems(c), c.name).toEqual([]);
      expect(refusedByKproxy(c), c.name).toEqual([]);
    }
  });
});

describe('edge cases: the fixed edges', () => {
  const endpointsOf = (c: EdgeCase, f: IPFamily) => c.objects.filter((o): o is EndpointSlice => o.kind === 'EndpointSlice' && (o as EndpointSlice).addressType === f).flatMap((s) => s.endpoints ?? []);

  it.each([...ENDPOINT_COUNTS])('endpoints-%i: one Service with exactly that many ready endpoints at distinct addresses, slices of at most 100', (n) => {
    const c = fixedEdgeCase(`endpoints-${n}`);
    const eps = endpointsOf(c, 'IPv4');
    expect(eps).toHaveLength(n);
    expect(new Set(eps.map((e) => e.addresses![0])).size).toBe(n);
    expect(eps.every((e) => e.conditions?.ready === true)).toBe(true);
    expect(c.objects.filter((o) => o.kind === 'EndpointSlice')).toHaveLength(Math.ceil(n / 100));
    const [e] = expectations(c);
    expect(e.destinations.map((d) => d.endpoints.length)).toEqual([n, n]);
  });

  it('endpoints-10000-dual: 10,000 ready endpoints in each family', () => {
    const c = fixedEdgeCase('endpoints-10000-dual');
    expect(endpointsOf(c, 'IPv4')).toHaveLength(10000);
    expect(endpointsOf(c, 'IPv6')).toHaveLength(10000);
    expect(expectations(c).map((e) => [e.family, e.endpoints.length])).toEqual([
      ['IPv4', 10000],
      ['IPv6', 10000],
    ]);
  });

  it.each([
    ['source-ranges-4096-v4', ['IPv4']],
    ['source-ranges-4096-v6', ['IPv6']],
    ['source-ranges-4096-dual', ['IPv4', 'IPv6']],
  ] as const)('%s: 4,096 canonical ranges per family, /32 (/128) and wider, none touching another', (name, families) => {
    const c = fixedEdgeCase(name);
    const svc = c.objects.find((o): o is Service => o.kind === 'Service')!;
    for (const f of families) {
      const ranges = svc.spec!.loadBalancerSourceRanges!.filter((r) => family(r) === f).map((r) => parseCIDR(r)!);
      expect(ranges).toHaveLength(4096);
      expect(new Set(ranges.map((r) => r.prefix)).size).toBeGreaterThan(3);
      expect(ranges.some((r) => r.prefix === (f === 'IPv4' ? 32 : 128))).toBe(true);
      const bits = f === 'IPv4' ? 32 : 128;
      const spans = ranges.map((r) => [ipToBigInt(r.ip)!, ipToBigInt(r.ip)! + (1n << BigInt(bits - r.prefix)) - 1n]).sort((a, b) => (a[0] < b[0] ? -1 : 1));
      for (let i = 1; i < spans.length; i++) expect(spans[i][0] > spans[i - 1][1] + 1n, `ranges ${i - 1} and ${i} touch`).toBe(true);
    }
    for (const e of expectations(c)) {
      const ranges = e.sourceRanges.map((r) => parseCIDR(r)!);
      const bits = e.family === 'IPv4' ? 32 : 128;
      const spans = ranges.map((r) => [ipToBigInt(r.ip)!, ipToBigInt(r.ip)! + (1n << BigInt(bits - r.prefix))]);
      const inAny = (ip: string) => {
        const x = ipToBigInt(ip)!;
        return spans.some(([from, to]) => x >= from && x < to);
      };
      expect(e.allowedSources.every(inAny)).toBe(true);
      expect(e.deniedSources.length).toBeGreaterThan(100);
      expect(e.deniedSources.some(inAny)).toBe(false);
      // The first and last ranges are always sampled: their first and last addresses are allowed.
      expect(e.allowedSources).toContain(ranges[0].ip);
      expect(e.allowedSources).toContain(ranges.at(-1)!.ip);
      const lb = e.destinations.find((d) => d.kind === 'load balancer IP')!;
      expect(e.allowedSources).toContain(lb.src);
    }
  });

  it('sourceRanges never lets two ranges touch, whatever their sizes', () => {
    for (const f of ['IPv4', 'IPv6'] as const) {
      const r = sourceRanges(f, 20).map((x) => parseCIDR(x)!);
      expect(r.map((x) => x.text)).toEqual(sourceRanges(f, 20));
    }
  });

  it('max-names: every name at its longest', () => {
    const c = fixedEdgeCase('max-names');
    const svc = c.objects.find((o): o is Service => o.kind === 'Service')!;
    expect(c.node).toHaveLength(253);
    expect(svc.metadata!.namespace).toHaveLength(63);
    expect(svc.metadata!.name).toHaveLength(63);
    expect(svc.spec!.ports!.map((p) => p.name!.length)).toEqual([63, 63]);
    expect(expectations(c).map((e) => e.servicePort.length)).toEqual([191, 191, 191, 191]);
    expect(endpointsOf(c, 'IPv6').some((e) => e.addresses![0].length === 39)).toBe(true);
  });

  it('ports-100, external-ips-100, node-ports-1000', () => {
    expect(expectations(fixedEdgeCase('ports-100'))).toHaveLength(100);
    const ext = expectations(fixedEdgeCase('external-ips-100'))[0];
    expect(ext.destinations.filter((d) => d.kind === 'external IP')).toHaveLength(100);
    const np = expectations(fixedEdgeCase('node-ports-1000'));
    expect(new Set(np.flatMap((e) => e.destinations.filter((d) => d.kind === 'node port').map((d) => d.port))).size).toBe(1000);
  });
});

describe('edge cases: random clusters', () => {
  it('are the same for the same seed and differ between seeds', () => {
    expect(JSON.stringify(randomEdgeCase(42))).toBe(JSON.stringify(randomEdgeCase(42)));
    expect(JSON.stringify(randomEdgeCase(42))).not.toBe(JSON.stringify(randomEdgeCase(43)));
  });

  it('mix every Service feature over the CI seeds', () => {
    const services = CI_SEEDS.map(randomEdgeCase).flatMap((c) => c.objects.filter((o): o is Service => o.kind === 'Service'));
    const slices = CI_SEEDS.map(randomEdgeCase).flatMap((c) => c.objects.filter((o): o is EndpointSlice => o.kind === 'EndpointSlice'));
    const has = (f: (s: Service) => boolean) => services.some(f);
    expect(has((s) => s.spec!.type === 'ClusterIP') && has((s) => s.spec!.type === 'NodePort') && has((s) => s.spec!.type === 'LoadBalancer')).toBe(true);
    expect(has((s) => s.spec!.externalTrafficPolicy === 'Local') && has((s) => s.spec!.internalTrafficPolicy === 'Local')).toBe(true);
    expect(has((s) => s.spec!.sessionAffinity === 'ClientIP')).toBe(true);
    expect(has((s) => (s.spec!.loadBalancerSourceRanges ?? []).length > 1)).toBe(true);
    expect(has((s) => (s.spec!.externalIPs ?? []).length > 0)).toBe(true);
    expect(has((s) => s.spec!.clusterIPs!.length === 2) && has((s) => s.spec!.clusterIPs![0].includes(':'))).toBe(true);
    expect(has((s) => s.spec!.ports!.length > 2) && has((s) => s.spec!.ports!.some((p) => p.protocol === 'UDP'))).toBe(true);
    expect(has((s) => s.spec!.ports!.some((p) => (p.name ?? '').length === 63)) && has((s) => s.metadata!.name!.length === 63)).toBe(true);
    const eps = slices.flatMap((s) => s.endpoints ?? []);
    const cond = (r: boolean, s: boolean, t: boolean) => eps.some((e) => e.conditions?.ready === r && e.conditions?.serving === s && e.conditions?.terminating === t);
    expect(cond(true, true, false) && cond(false, true, true) && cond(false, false, true) && cond(false, false, false)).toBe(true);
    expect(eps.some((e) => (e.hints?.forZones ?? []).length > 0)).toBe(true);
    expect(slices.some((s) => (s.endpoints ?? []).length === 0)).toBe(true);
  });

  it('KPROXY_EDGE_SEEDS names seeds as a list and ranges; CI_SEEDS otherwise', () => {
    expect(edgeSeeds(undefined)).toEqual([...CI_SEEDS]);
    expect(edgeSeeds('7, 100-103')).toEqual([7, 100, 101, 102, 103]);
    expect(() => edgeSeeds('seven')).toThrow(/KPROXY_EDGE_SEEDS: "seven" is not a seed/);
  });
});

describe('edge cases: files', () => {
  it('writeEdgeCase writes what the file source reads back, object for object', () => {
    const c = randomEdgeCase(7);
    const dir = mkdtempSync(join(tmpdir(), 'kproxy-edge-'));
    try {
      writeEdgeCase(c, dir);
      const read = readdirSync(dir)
        .sort()
        .flatMap((f) => parseManifest(f, readFileSync(join(dir, f), 'utf8')).objects.map((o) => o.object));
      const key = (o: { kind?: string; metadata?: { namespace?: string; name?: string } }) => `${o.kind} ${o.metadata?.namespace ?? ''}/${o.metadata?.name}`;
      expect(read.map(key).sort()).toEqual(c.objects.map(key).sort());
      expect(read).toEqual(expect.arrayContaining(c.objects.map((o) => expect.objectContaining({ kind: o.kind, metadata: o.metadata }))));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
