import { createArgs, type IpsetType } from '../../kernel/ipset.ts';
import type { IpvsForward, IpvsProtocol, IpvsRealServer, IpvsService } from '../../kernel/ipvs-batch.ts';
import { renderIpvsSave } from '../../kernel/ipvs-listing.ts';
import { formatIptablesSave, makeRule, type IptablesChain, type IptablesTable } from '../../kernel/iptables-save-parser.ts';
import { DUMMY_DEVICE } from '../../proxy/ipvs/names.ts';
import type { KernelTables } from '../kernel-view.ts';
import { ADDRESSES_TABLE, IPVS_TABLE, SETS_TABLE } from './tables.ts';

const FORWARD: Record<string, IpvsForward> = { Masq: 'masq', Route: 'route', Tunnel: 'tunnel' };

/**
 * formatIpvsIntended renders kproxy's intended IPVS-mode objects as one file,
 * in the formats the kernel's tools list them: `ipvsadm -Sn` (feed it to
 * `ipvsadm -R`), `ipset save` (`ipset restore`), the addresses of kube-ipvs0,
 * and `iptables-save` for the nat and filter tables (`iptables-restore
 * --noflush`). Each part sits under a "# command" header.
 */
export function formatIpvsIntended(tables: KernelTables): string {
  const services: IpvsService[] = [];
  for (const c of tables.tables.get(IPVS_TABLE)?.chains.values() ?? []) {
    const vs = c.ipvs;
    if (!vs) continue;
    const reals: IpvsRealServer[] = c.rules.flatMap((r) => (r.ipvs ? [{ address: r.ipvs.address, port: r.ipvs.port, weight: r.ipvs.weight, forward: FORWARD[r.ipvs.forward] ?? 'masq' }] : []));
    services.push({ protocol: vs.protocol as IpvsProtocol, address: vs.address, port: vs.port, scheduler: vs.scheduler, persistence: vs.persistence, schedFlags: vs.flags, reals });
  }
  const out = ['# ipvsadm -Sn', renderIpvsSave(services).trimEnd(), '# ipset save'];
  for (const c of tables.tables.get(SETS_TABLE)?.chains.values() ?? []) {
    // policy is "TYPE" or "TYPE family FAMILY" (tables.ts setPolicy).
    const [type, , family] = (c.policy ?? '').split(' ');
    out.push(`create ${createArgs({ name: c.name, type: type as IpsetType, family: family === 'inet6' ? 'inet6' : family === 'inet' ? 'inet' : null })}`);
    for (const r of c.rules) out.push(`add ${c.name} ${r.spec}`);
  }
  out.push(`# ip addr show ${DUMMY_DEVICE}`);
  for (const r of tables.tables.get(ADDRESSES_TABLE)?.chains.get(DUMMY_DEVICE)?.rules ?? []) out.push(r.spec);
  const iptables = new Map<string, IptablesTable>();
  for (const name of ['nat', 'filter']) {
    const t = tables.tables.get(name);
    if (!t) continue;
    const chains = new Map([...t.chains].map(([cn, c]): [string, IptablesChain] => [cn, { ...c, rules: c.rules.map((r) => makeRule(cn, r.spec, [], 0, 0)) }]));
    iptables.set(name, { name, chains });
  }
  out.push('# iptables-save -t nat -t filter', formatIptablesSave({ tables: iptables }).trimEnd());
  return out.filter((l) => l !== '').join('\n') + '\n';
}
