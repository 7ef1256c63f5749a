import { IpsetBatch, type IpsetSet } from '../../kernel/ipset.ts';
import { IpvsBatch, realServerKey, sameVirtualServer, virtualServerKey, type IpvsService } from '../../kernel/ipvs-batch.ts';
import { NetlinkBatch } from '../../kernel/netlink.ts';
import { cidrContains, type CIDR, type IPFamily } from '../../net/ip.ts';
import type { WantedVirtualServer } from './builder.ts';
import { gracefulTerminationNeeded, type Deletion, type DrainingRealServer, type GracefulTermination } from './graceful-termination.ts';
import { DUMMY_DEVICE, IPSETS, setSpec, type SetKey } from './names.ts';

/**
 * The diff of IPVS mode: what the kernel holds (read once per sync) against
 * what the services want, turned into one ip batch, one ipset batch and one
 * ipvsadm batch. A full sync compares everything; a partial sync only the
 * objects of changed services (its scope), so an unchanged service's objects
 * are never touched. Pure: no I/O, no clock.
 */

/** Wanted is the whole wanted state, aggregated over service ports. */
export interface Wanted {
  readonly virtualServers: ReadonlyMap<string, WantedVirtualServer>;
  readonly sets: ReadonlyMap<SetKey, ReadonlySet<string>>;
  readonly binds: ReadonlySet<string>;
}

/** Scope is what a partial sync may touch: the objects changed services had or have. */
export interface Scope {
  readonly virtualServers: ReadonlySet<string>;
  readonly entries: ReadonlyMap<SetKey, ReadonlySet<string>>;
  readonly binds: ReadonlySet<string>;
}

const inScope = <T>(scope: ReadonlySet<T> | null | undefined, x: T) => scope === null || (scope?.has(x) ?? false);

/** planAddresses makes kube-ipvs0 exist and hold exactly the wanted addresses (within scope). */
export function planAddresses(wanted: ReadonlySet<string>, linkExists: boolean, bound: ReadonlySet<string>, scope: Scope | null): NetlinkBatch {
  const b = new NetlinkBatch();
  if (!linkExists) b.addDummy(DUMMY_DEVICE);
  for (const ip of [...wanted].sort()) if (!bound.has(ip) && inScope(scope?.binds ?? null, ip)) b.addAddress(DUMMY_DEVICE, ip);
  for (const ip of [...bound].sort()) if (!wanted.has(ip) && inScope(scope?.binds ?? null, ip)) b.delAddress(DUMMY_DEVICE, ip);
  return b;
}

/**
 * planIpsets creates missing sets (all of them on a full sync, -exist keeps
 * that harmless) and deletes and adds entries (within scope), deletions first. A set that
 * exists with another type is destroyed and created again; that fails while
 * a rule still uses it, and the error says so.
 */
export function planIpsets(wanted: ReadonlyMap<SetKey, ReadonlySet<string>>, current: ReadonlyMap<string, IpsetSet>, family: IPFamily, scope: Scope | null): IpsetBatch {
  const b = new IpsetBatch();
  for (const info of IPSETS) {
    const spec = setSpec(info, family);
    const cur = current.get(spec.name);
    const mismatch = cur !== undefined && (cur.type !== spec.type || (cur.family ?? null) !== spec.family);
    if (mismatch) b.destroy(spec.name);
    if (!cur || mismatch || scope === null) b.create(spec);
    const want = wanted.get(info.key) ?? new Set<string>();
    const have = cur && !mismatch ? cur.entries : new Set<string>();
    const s = scope === null ? null : (scope.entries.get(info.key) ?? new Set<string>());
    // Deletions first: a set near its maxelem makes room before it takes the new entries (no
    // wanted entry is ever deleted, so no packet meets a set without what it must hold).
    for (const e of [...have].sort()) if (!want.has(e) && inScope(s, e)) b.del(spec, e);
    for (const e of [...want].sort()) if (!have.has(e) && inScope(s, e)) b.add(spec, e);
  }
  return b;
}

/** IpvsPlan is the ipvsadm batch and the draining bookkeeping to commit once it applied. */
export interface IpvsPlan {
  readonly batch: IpvsBatch;
  readonly drainStart: readonly Pick<DrainingRealServer, 'vs' | 'rs'>[];
  readonly drainCancel: readonly { vsKey: string; rsKey: string }[];
  readonly deletedVirtualServers: readonly string[];
}

export interface IpvsPlanInput {
  readonly wanted: ReadonlyMap<string, WantedVirtualServer>;
  readonly current: ReadonlyMap<string, IpvsService>;
  readonly scope: Scope | null;
  readonly family: IPFamily;
  /** excludeCIDRs: virtual servers there are never deleted (ipvs.excludeCIDRs). */
  readonly excludeCIDRs: readonly CIDR[];
  readonly draining: Pick<GracefulTermination, 'has'>;
  /** deletions: draining real servers the graceful termination sweep let go this sync. */
  readonly deletions: readonly Deletion[];
}

/**
 * planIpvs diffs virtual and real servers. New virtual servers are added with
 * their real servers; changed ones edited in place (-E keeps connections);
 * unwanted ones deleted, except in excludeCIDRs or of the other family. A real
 * server no longer wanted is drained (weight 0) for TCP, deleted for UDP and
 * SCTP; one wanted again is put back to weight 1.
 */
export function planIpvs(input: IpvsPlanInput): IpvsPlan {
  const { wanted, current, scope, draining } = input;
  const batch = new IpvsBatch();
  const drainStart: Pick<DrainingRealServer, 'vs' | 'rs'>[] = [];
  const drainCancel: { vsKey: string; rsKey: string }[] = [];
  const deletedVirtualServers: string[] = [];
  const deletions = new Map(input.deletions.map((d) => [`${virtualServerKey(d.vs)}/${realServerKey(d.rs)}`, d]));
  const emitted = new Set<string>();
  const vsScope = scope?.virtualServers ?? null;

  for (const [key, w] of [...wanted].sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (!inScope(vsScope, key)) continue;
    const cur = current.get(key);
    if (!cur) {
      batch.addService(w.vs);
      for (const rs of w.reals.values()) batch.addReal(w.vs, rs);
      continue;
    }
    if (!sameVirtualServer(cur, w.vs)) batch.editService(w.vs);
    const have = new Map(cur.reals.map((r) => [realServerKey(r), r]));
    for (const [rk, rs] of w.reals) {
      const h = have.get(rk);
      if (!h) batch.addReal(w.vs, rs);
      else if (h.weight !== rs.weight || h.forward !== rs.forward) batch.editReal(w.vs, rs);
      if (draining.has(key, rk)) drainCancel.push({ vsKey: key, rsKey: rk });
    }
    for (const [rk, h] of have) {
      if (w.reals.has(rk)) continue;
      const dk = `${key}/${rk}`;
      if (deletions.has(dk)) {
        batch.deleteReal(w.vs, h);
        emitted.add(dk);
      } else if (draining.has(key, rk)) {
        continue;
      } else if (!gracefulTerminationNeeded(w.vs.protocol)) {
        batch.deleteReal(w.vs, h);
      } else {
        if (h.weight !== 0) batch.editReal(w.vs, { ...h, weight: 0 });
        drainStart.push({ vs: w.vs, rs: h });
      }
    }
  }

  for (const [key, cur] of [...current].sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (wanted.has(key) || !inScope(vsScope, key)) continue;
    if ((input.family === 'IPv6') !== cur.address.includes(':')) continue;
    if (input.excludeCIDRs.some((c) => cidrContains(c, cur.address))) continue;
    batch.deleteService(cur);
    deletedVirtualServers.push(key);
  }

  // Draining real servers of virtual servers outside this partial sync's scope still go when drained.
  const deleted = new Set(deletedVirtualServers);
  for (const [dk, d] of deletions) {
    const vsKey = virtualServerKey(d.vs);
    if (emitted.has(dk) || deleted.has(vsKey) || wanted.get(vsKey)?.reals.has(realServerKey(d.rs))) continue;
    if (!current.get(vsKey)?.reals.some((r) => r.address === d.rs.address && r.port === d.rs.port)) continue;
    batch.deleteReal(d.vs, d.rs);
  }
  return { batch, drainStart, drainCancel, deletedVirtualServers };
}
