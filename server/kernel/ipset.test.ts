import { describe, expect, it } from 'vitest';
import type { ExecFn } from './exec.ts';
import { SimulatedIpset } from './ipset-simulated.ts';
import { canonicalEntry, createIpsetRunner, IpsetBatch, IpsetRestoreError, parseIpsetSave, type IpsetSpec } from './ipset.ts';

const clusterIP: IpsetSpec = { name: 'KUBE-CLUSTER-IP', type: 'hash:ip,port', family: 'inet' };
const nodePorts: IpsetSpec = { name: 'KUBE-NODE-PORT-TCP', type: 'bitmap:port', family: null };
const sourceCIDR: IpsetSpec = { name: 'KUBE-LOAD-BALANCER-SOURCE-CIDR', type: 'hash:ip,port,net', family: 'inet' };

describe('ipset entries', () => {
  it('are compared in the form ipset save prints', () => {
    expect(canonicalEntry('hash:ip,port', '10.96.0.1,TCP:443')).toBe('10.96.0.1,tcp:443');
    expect(canonicalEntry('hash:ip,port,net', '1.2.3.4,tcp:80,10.1.2.3/8')).toBe('1.2.3.4,tcp:80,10.0.0.0/8');
    expect(canonicalEntry('hash:ip,port,net', '1.2.3.4,tcp:80,10.0.0.5/32')).toBe('1.2.3.4,tcp:80,10.0.0.5');
    expect(canonicalEntry('hash:ip,port,ip', '10.244.0.5,udp:53,10.244.0.5')).toBe('10.244.0.5,udp:53,10.244.0.5');
    expect(canonicalEntry('bitmap:port', '30080')).toBe('30080');
    expect(canonicalEntry('hash:ip', '10.96.0.1')).toBe('10.96.0.1');
    expect(canonicalEntry('hash:ip,port', '[fd00::1],tcp:80')).toBeNull();
    expect(canonicalEntry('hash:ip,port', 'fd00::1,tcp:80')).toBe('fd00::1,tcp:80');
  });

  it('refuses what is not an entry of the type', () => {
    for (const [type, text] of [
      ['hash:ip,port', '10.96.0.1'],
      ['hash:ip,port', '10.96.0.1,icmp:0'],
      ['hash:ip,port', '10.96.0.1,tcp:70000'],
      ['hash:ip,port,net', '1.2.3.4,tcp:80,0.0.0.0/0'],
      ['bitmap:port', '-1'],
      ['hash:ip', '10.96.0.1 -exist'],
    ] as const) {
      expect(canonicalEntry(type, text), `${type} ${text}`).toBeNull();
    }
  });
});

describe('ipset restore batches', () => {
  it('create sets with kube-proxy parameters and add or delete entries with -exist', () => {
    const b = new IpsetBatch();
    b.create(clusterIP);
    b.create(nodePorts);
    b.add(clusterIP, '10.96.0.1,tcp:443');
    b.add(nodePorts, '30080');
    b.del(sourceCIDR, '1.2.3.4,tcp:80,10.0.0.0/8');
    b.flush('KUBE-CLUSTER-IP');
    b.destroy('KUBE-CLUSTER-IP');
    expect(b.text()).toBe(
      [
        'create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 -exist',
        'create KUBE-NODE-PORT-TCP bitmap:port range 0-65535 -exist',
        'add KUBE-CLUSTER-IP 10.96.0.1,tcp:443 -exist',
        'add KUBE-NODE-PORT-TCP 30080 -exist',
        'del KUBE-LOAD-BALANCER-SOURCE-CIDR 1.2.3.4,tcp:80,10.0.0.0/8 -exist',
        'flush KUBE-CLUSTER-IP',
        'destroy KUBE-CLUSTER-IP',
        '',
      ].join('\n'),
    );
  });

  it('never writes an invalid name or entry into the batch', () => {
    const b = new IpsetBatch();
    expect(() => b.add(clusterIP, '10.96.0.1,tcp:443\nflush X')).toThrow(/not a valid hash:ip,port entry/);
    expect(() => b.create({ name: 'KUBE-A-NAME-LONGER-THAN-THIRTY-ONE', type: 'hash:ip', family: 'inet' })).toThrow(/not a valid set name/);
    expect(b.lines).toBe(0);
  });
});

describe('ipset save', () => {
  it('parses the real output, hash seeds included', () => {
    const sets = parseIpsetSave(`create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0xda05b2c6
add KUBE-CLUSTER-IP 10.96.0.1,tcp:443
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 30080
create other-software hash:mac
add other-software 00:11:22:33:44:55
`);
    expect(sets.get('KUBE-CLUSTER-IP')).toMatchObject({ type: 'hash:ip,port', family: 'inet' });
    expect([...sets.get('KUBE-CLUSTER-IP')!.entries]).toEqual(['10.96.0.1,tcp:443']);
    expect([...sets.get('KUBE-NODE-PORT-TCP')!.entries]).toEqual(['30080']);
    expect([...sets.get('other-software')!.entries]).toEqual(['00:11:22:33:44:55']);
  });
});

describe('real ipset runner', () => {
  it('names the line ipset refused', async () => {
    const exec: ExecFn = async () => ({ code: 1, stdout: '', stderr: 'ipset v7.17: Error in line 2: The set with the given name does not exist\n' });
    const err = await createIpsetRunner({ exec })
      .restore('create A hash:ip family inet hashsize 1024 maxelem 65536 -exist\nadd B 10.0.0.1 -exist\n')
      .catch((e) => e);
    expect(err).toBeInstanceOf(IpsetRestoreError);
    expect(err.line).toBe(2);
    expect(err.message).toContain('The set with the given name does not exist at line 2: add B 10.0.0.1 -exist');
    expect(err.code).toBe('KPROXY_ERR_IPSET');
  });
});

describe('SimulatedIpset', () => {
  it('applies a batch and prints ipset save', async () => {
    const k = new SimulatedIpset();
    const b = new IpsetBatch();
    b.create(clusterIP);
    b.add(clusterIP, '10.96.0.1,tcp:443');
    b.add(clusterIP, '10.96.0.1,tcp:443');
    await k.restore(b.text());
    expect(k.saveText()).toBe('create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\nadd KUBE-CLUSTER-IP 10.96.0.1,tcp:443\n');
  });

  it('stops at the first refused line and names it', async () => {
    const k = new SimulatedIpset();
    const err = await k.restore('create A hash:ip family inet hashsize 1024 maxelem 65536\nadd B 10.0.0.1 -exist\nadd A 10.0.0.2\n').catch((e) => e);
    expect(err.line).toBe(2);
    expect(err.message).toContain('The set with the given name does not exist');
    expect([...k.sets().get('A')!.entries]).toEqual([]);
  });

  it('refuses to re-create a set with another type, even with -exist', async () => {
    const k = new SimulatedIpset();
    await k.restore('create A hash:ip family inet hashsize 1024 maxelem 65536\n');
    const err = await k.restore('create A hash:ip,port family inet hashsize 1024 maxelem 65536 -exist\n').catch((e) => e);
    expect(err.message).toContain('set with the same name already exists');
  });

  it('holds at most maxelem entries in a hash set, as the kernel: the add past it is refused and stops the batch', async () => {
    const k = new SimulatedIpset();
    const adds = Array.from({ length: 65537 }, (_, i) => `add A 10.${i >> 16}.${(i >> 8) & 255}.${i & 255} -exist`);
    // What ipset v7.17 answered to the same input: "Error in line 65538: Hash is full, cannot add more elements".
    const err = await k.restore(['create A hash:ip family inet hashsize 1024 maxelem 65536', ...adds].join('\n') + '\n').catch((e) => e);
    expect(err.line).toBe(65538);
    expect(err.message).toContain('Hash is full, cannot add more elements');
    expect(k.sets().get('A')!.entries.size).toBe(65536);
    // An entry already there is no new element; a smaller maxelem is the set's own.
    await k.restore('add A 10.0.0.0 -exist\ncreate B hash:ip family inet hashsize 1024 maxelem 2\nadd B 10.0.0.1\nadd B 10.0.0.2\n');
    await expect(k.restore('add B 10.0.0.3\n')).rejects.toThrow(/Hash is full/);
  });

  it('refuses to destroy a set a kernel component still uses', async () => {
    let refs = 1;
    const k = new SimulatedIpset({ references: () => refs });
    await k.restore('create A hash:ip family inet hashsize 1024 maxelem 65536\n');
    await expect(k.restore('destroy A\n')).rejects.toThrow(/in use by a kernel component/);
    refs = 0;
    await k.restore('destroy A\n');
    expect(k.sets().size).toBe(0);
  });
});
