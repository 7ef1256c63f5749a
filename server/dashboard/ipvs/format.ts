import { createArgs, type IpsetType } from '../../kernel/ipset.ts';
import type { IpvsForward, IpvsProtocol, IpvsRealServer, IpvsService } from '../../kernel/ipvs-batch.ts';
import { renderIpvsSave } from '../../kernel/ipvs-listing.ts';
import { DUMMY_DEVICE } from '../../proxy/ipvs/index.ts';
import { iptablesSaveText } from '../iptables/save-text.ts';
import type { KernelTables } from '../kernel-view.ts';
import type { Yield } from '../yield.ts';
import { ADDRESSES_TABLE, IPVS_TABLE, SETS_TABLE } from './tables.ts';

const FORWARD: Record<string, IpvsForward> = { Masq: 'masq', Route: 'route', Tunnel: 'tunnel' };

/**
 * formatIpvsIntended renders kproxy's intended IPVS-mode objects as one file,
 * in the formats the kernel's tools list them: `ipvsadm -Sn` (feed it to
 * `ipvsadm -R`), `ipset save` (`ipset restore`), the addresses of kube-ipvs0,
 * and `iptables-save` for the nat and filter tables (`iptables-restore
 * --noflush`). Each part sits under a "# command" header.
 */
export async function formatIpvsIntended(tables: KernelTables, pause: Yield): Promise<string[]> {
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
  out.push('# iptables-save -t nat -t filter');
  await pause();
  return [out.filter((l) => l !== '').join('\n') + '\n', ...(await iptablesSaveText(tables, ['nat', 'filter'], pause))];
}
