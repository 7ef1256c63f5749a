import { mkdtemp, mkdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SimulatedSysctl } from './sysctl-simulated.ts';
import { ensureSysctl, procSysctl, sysctlInt } from './sysctl.ts';

describe('sysctl', () => {
  it('ensureSysctl writes only when the value differs', async () => {
    const s = new SimulatedSysctl({ 'net/ipv4/conf/all/route_localnet': '0' });
    expect(await ensureSysctl(s, 'net/ipv4/conf/all/route_localnet', '1')).toBe(true);
    expect(await ensureSysctl(s, 'net/ipv4/conf/all/route_localnet', '1')).toBe(false);
    expect(s.writes).toEqual([{ name: 'net/ipv4/conf/all/route_localnet', value: '1' }]);
  });

  it('sysctlInt reads numbers and treats a missing sysctl as unknown', async () => {
    const s = new SimulatedSysctl({ 'net/netfilter/nf_conntrack_tcp_be_liberal': '1' });
    expect(await sysctlInt(s, 'net/netfilter/nf_conntrack_tcp_be_liberal')).toBe(1);
    expect(await sysctlInt(s, 'net/netfilter/nf_conntrack_max')).toBeNull();
  });

  it('refuses names that could leave /proc/sys', async () => {
    const s = new SimulatedSysctl();
    for (const bad of ['../etc/passwd', '/etc/passwd', 'net/../../x', 'net/ipv4/conf/all/route_localnet\n']) {
      await expect(s.read(bad)).rejects.toMatchObject({ code: 'KPROXY_ERR_SYSCTL' });
    }
  });

  it('reads and writes files below the given root', async () => {
    const root = await mkdtemp(join(tmpdir(), 'kproxy-sysctl-'));
    await mkdir(join(root, 'net/ipv4/conf/all'), { recursive: true });
    await writeFile(join(root, 'net/ipv4/conf/all/route_localnet'), '0\n');
    const s = procSysctl(root);
    expect(await s.read('net/ipv4/conf/all/route_localnet')).toBe('0');
    await s.write('net/ipv4/conf/all/route_localnet', '1');
    expect(await readFile(join(root, 'net/ipv4/conf/all/route_localnet'), 'utf8')).toBe('1\n');
    await expect(s.read('net/ipv4/conf/all/missing')).rejects.toMatchObject({ code: 'KPROXY_ERR_SYSCTL' });
  });
});
