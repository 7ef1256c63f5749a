import { realServerKey, virtualServerKey, type IpvsService } from '../../kernel/ipvs-batch.ts';
import type { IPFamily } from '../../net/ip.ts';
import type { CountCheck } from '../sync-verify.ts';
import type { WantedVirtualServer } from './builder.ts';
import type { DrainingRealServer } from './graceful-termination.ts';
import { IPSETS, setName, type SetKey } from './names.ts';

/**
 * What a full sync's verification compares in IPVS mode besides the glue
 * chains (xtables/verify.ts): every virtual server the sync wanted, with
 * its real servers (the wanted ones plus those draining at weight 0), every
 * other virtual server kproxy manages gone; each of the family's ipsets with
 * as many entries as the sync wanted (`ipset list -t`: the headers only);
 * kube-ipvs0 with the addresses bound. Pure: the proxier hands in what the
 * sync wanted and what the kernel listed.
 */

/**
 * compareVirtualServers checks the IPVS table (`ipvsadm -Sn`): each wanted
 * virtual server holds its wanted real servers and the draining ones kproxy
 * keeps at weight 0 until their connections end; a virtual server kproxy
 * manages (its family, outside ipvs.excludeCIDRs) that the sync did not
 * want should have been deleted.
 */
export function compareVirtualServers(
  wanted: ReadonlyMap<string, WantedVirtualServer>,
  draining: readonly DrainingRealServer[],
  kernel: readonly IpvsService[],
  manages: (address: string) => boolean,
  check: CountCheck,
  servicePortOf: (vsKey: string) => string | undefined,
): void {
  const drainingOf = new Map<string, Set<string>>();
  for (const d of draining) {
    if (wanted.get(d.vsKey)?.reals.has(realServerKey(d.rs))) continue;
    let s = drainingOf.get(d.vsKey);
    if (!s) drainingOf.set(d.vsKey, (s = new Set()));
    s.add(realServerKey(d.rs));
  }
  const held = new Map<string, IpvsService>();
  for (const s of kernel) held.set(virtualServerKey(s), s);
  for (const [key, w] of wanted) {
    const want = w.reals.size + (drainingOf.get(key)?.size ?? 0);
    const got = held.get(key)?.reals.length ?? null;
    check.compare(`virtual server ${key}`, 'real servers', want, got, got === want ? undefined : servicePortOf(key));
  }
  for (const [key, s] of held) if (!wanted.has(key) && manages(s.address)) check.unexpected(`virtual server ${key}`, 'virtual server', 1);
}

/** compareSets checks each of the family's ipsets (`ipset list -t`): as many entries as the sync wanted; a missing set is null. */
export function compareSets(wanted: ReadonlyMap<SetKey, ReadonlySet<string>>, family: IPFamily, kernel: ReadonlyMap<string, number>, check: CountCheck): void {
  for (const info of IPSETS) {
    const name = setName(info.key, family);
    check.compare(`ipset ${name}`, 'entries', wanted.get(info.key)?.size ?? 0, kernel.get(name) ?? null);
  }
}

/** compareBinds checks that kube-ipvs0 holds, of the family, as many addresses as the sync bound; a missing link is null. */
export function compareBinds(wanted: ReadonlySet<string>, bound: readonly string[] | null, device: string, family: IPFamily, check: CountCheck): void {
  check.compare(`link ${device}`, `${family} addresses`, wanted.size, bound === null ? null : bound.length);
}
