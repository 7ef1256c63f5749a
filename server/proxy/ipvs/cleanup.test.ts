import { describe, expect, it } from 'vitest';
import { CommandNotFoundError, IpsetError } from '../../errors.ts';
import { SimulatedIpset } from '../../kernel/ipset-simulated.ts';
import { SimulatedIpvs } from '../../kernel/ipvs-simulated.ts';
import { SimulatedNetlink } from '../../kernel/netlink-simulated.ts';
import { MemoryLog, silentLogger } from '../../log.ts';
import { parseCIDR } from '../../net/ip.ts';
import { cleanupIptables } from '../xtables/cleanup.ts';
import { ep, makeService, makeSlice, stateFromObjects } from '../testing.ts';
import { cleanupIpvs } from './cleanup.ts';
import { ipvsHarness } from './testing.ts';

async function programmed() {
  const h = ipvsHarness();
  const state = stateFromObjects('node-a', [
    makeService('ns1', 'a', { type: 'NodePort', clusterIP: '10.96.0.1', ports: [{ name: 'http', port: 80, protocol: 'TCP', nodePort: 30080 }] }),
    makeSlice('ns1', 'a', 'a-1', [ep('10.244.0.1', { nodeName: 'node-a' })], [{ name: 'http', port: 8080, protocol: 'TCP' }]),
  ]);
  await h.sync(state);
  return h;
}

describe('IPVS cleanup', () => {
  it('removes virtual servers, kube-proxy sets and kube-ipvs0 after the iptables rules; a second run finds nothing', async () => {
    const h = await programmed();
    await h.ipvs.restore('-A -t 172.16.0.5:80 -s wlc\n');
    await h.ipset.restore(
      'create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536\ncreate KUBE-NODE-PORT-SCTP bitmap:port range 0-65535\ncreate other-software hash:ip family inet hashsize 1024 maxelem 65536\n',
    );
    const iptables = await cleanupIptables({ runners: [h.iptables], logger: silentLogger });
    expect(iptables.errors).toEqual([]);
    const r = await cleanupIpvs({ ipvs: h.ipvs, ipset: h.ipset, netlink: h.netlink, logger: silentLogger, excludeCIDRs: [parseCIDR('172.16.0.0/12')!] });
    expect(r.errors).toEqual([]);
    expect(r.removed).toEqual({ 'virtual-servers': 2, ipsets: 19, links: 1 });
    expect(h.ipvs.services().map((s) => s.address)).toEqual(['172.16.0.5']);
    expect([...h.ipset.sets().keys()]).toEqual(['other-software']);
    expect(h.netlink.table().has('kube-ipvs0')).toBe(false);
    expect(await cleanupIpvs({ ipvs: h.ipvs, ipset: h.ipset, netlink: h.netlink, logger: silentLogger })).toEqual({ removed: { 'virtual-servers': 1 }, errors: [] });
  });

  it('reports a set still in use and destroys the others', async () => {
    const h = await programmed();
    // The iptables rules still match the sets: only the unmatched ones can go.
    const r = await cleanupIpvs({ ipvs: h.ipvs, ipset: h.ipset, netlink: h.netlink, logger: silentLogger });
    expect(r.errors.length).toBeGreaterThan(0);
    expect(r.errors[0].code).toBe('KPROXY_ERR_CLEANUP_FAILED');
    expect(r.errors[0].message).toMatch(/ipset KUBE-[A-Z-]+ could not be destroyed/);
    const left = [...h.ipset.sets().keys()];
    expect(left).toContain('KUBE-CLUSTER-IP');
    expect(left).not.toContain('KUBE-LOAD-BALANCER-SOURCE-IP');
    expect(r.removed.links).toBe(1);
  });

  it('skips virtual servers with a note when the kernel has no IPVS, and still removes sets and the link', async () => {
    const log = new MemoryLog();
    const ipset = new SimulatedIpset();
    await ipset.restore('create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\n');
    const netlink = new SimulatedNetlink();
    await netlink.batch('link add kube-ipvs0 type dummy\n');
    const r = await cleanupIpvs({ ipvs: null, ipset, netlink, logger: log.logger, ipvsSkipReason: 'ip_vs missing' });
    expect(r).toEqual({ removed: { ipsets: 1, links: 1 }, errors: [] });
    expect(log.lines('info').join('\n')).toContain('IPVS virtual servers skipped: this kernel has no IPVS');
  });

  it('treats a missing ipset program as nothing to remove', async () => {
    const ipset = { save: async () => Promise.reject(new IpsetError('ipset save could not run', { cause: new CommandNotFoundError('ipset is not installed') })), restore: async () => {} };
    const r = await cleanupIpvs({ ipvs: new SimulatedIpvs(), ipset, netlink: new SimulatedNetlink(), logger: silentLogger });
    expect(r).toEqual({ removed: {}, errors: [] });
  });
});
