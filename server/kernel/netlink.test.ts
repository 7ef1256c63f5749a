import { describe, expect, it } from 'vitest';
import type { ExecFn } from './exec.ts';
import { SimulatedNetlink } from './netlink-simulated.ts';
import { createNetlink, NetlinkBatch, NetlinkBatchError } from './netlink.ts';
import { parseLinkTable } from './netif.ts';

const IP_J = JSON.stringify([
  { ifindex: 1, ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', prefixlen: 8 }] },
  {
    ifindex: 2,
    ifname: 'eth0',
    addr_info: [
      { family: 'inet', local: '10.0.0.10', prefixlen: 24 },
      { family: 'inet6', local: 'fe80::1', prefixlen: 64 },
    ],
  },
  { ifindex: 3, ifname: 'kube-ipvs0', addr_info: [] },
]);

describe('netlink', () => {
  it('lists every link, address-less ones included (kube-ipvs0 right after creation)', () => {
    const t = parseLinkTable(IP_J);
    expect([...t.keys()]).toEqual(['lo', 'eth0', 'kube-ipvs0']);
    expect(t.get('kube-ipvs0')).toEqual([]);
    expect(t.get('eth0')!.map((a) => a.address)).toEqual(['10.0.0.10', 'fe80::1']);
  });

  it('writes host addresses and the dummy link as ip -batch commands', () => {
    const b = new NetlinkBatch();
    b.addDummy('kube-ipvs0');
    b.addAddress('kube-ipvs0', '10.96.0.1');
    b.addAddress('kube-ipvs0', 'fd00::1');
    b.delAddress('kube-ipvs0', '10.96.0.2');
    b.deleteLink('kube-ipvs0');
    expect(b.text()).toBe('link add kube-ipvs0 type dummy\naddr add 10.96.0.1/32 dev kube-ipvs0\naddr add fd00::1/128 dev kube-ipvs0\naddr del 10.96.0.2/32 dev kube-ipvs0\nlink del kube-ipvs0\n');
    expect(() => b.addAddress('kube ipvs0', '10.0.0.1')).toThrow(/not a valid link name/);
    expect(() => b.addAddress('kube-ipvs0', '10.0.0.1/8')).toThrow(/not an IP address/);
  });

  it('names the command ip refused', async () => {
    const calls: unknown[] = [];
    const exec: ExecFn = async (file, args, opts) => {
      calls.push([file, ...args, opts?.stdin]);
      return { code: 1, stdout: '', stderr: 'Error: Unknown device type.\nCommand failed -:1\n' };
    };
    const err = await createNetlink(exec)
      .batch('link add kube-ipvs0 type dummy\n')
      .catch((e) => e);
    expect(err).toBeInstanceOf(NetlinkBatchError);
    expect(err.line).toBe(1);
    expect(err.message).toBe('ip -batch failed at line 1 (exit 1): Error: Unknown device type.: link add kube-ipvs0 type dummy');
    expect(calls).toEqual([['ip', '-batch', '-', 'link add kube-ipvs0 type dummy\n']]);
  });
});

describe('SimulatedNetlink', () => {
  it('creates the dummy link, binds and unbinds addresses', async () => {
    const n = new SimulatedNetlink();
    await n.batch('link add kube-ipvs0 type dummy\naddr add 10.96.0.1/32 dev kube-ipvs0\naddr add 10.96.0.2/32 dev kube-ipvs0\n');
    await n.batch('addr del 10.96.0.1/32 dev kube-ipvs0\n');
    expect(n.addresses('kube-ipvs0')).toEqual(['10.96.0.2']);
    expect([...(await n.show()).keys()]).toEqual(['lo', 'eth0', 'kube-ipvs0']);
  });

  it('stops at the first refused command, like ip without -force', async () => {
    const n = new SimulatedNetlink();
    n.dummySupported = false;
    const err = await n.batch('link add kube-ipvs0 type dummy\naddr add 10.96.0.1/32 dev kube-ipvs0\n').catch((e) => e);
    expect(err.line).toBe(1);
    expect(err.message).toContain('Unknown device type');
    const again = await new SimulatedNetlink().batch('addr del 10.96.0.9/32 dev eth0\n').catch((e) => e);
    expect(again.message).toContain('Cannot assign requested address');
  });
});
