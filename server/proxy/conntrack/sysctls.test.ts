import { describe, expect, it } from 'vitest';
import type { ProxyConfig } from '../../config/types.ts';
import { SimulatedSysctl } from '../../kernel/sysctl-simulated.ts';
import { MemoryLog } from '../../log.ts';
import { applyConntrackSysctls, CONNTRACK_MAX_CAP, conntrackMax, HASHSIZE } from './sysctls.ts';

/** kube-proxy's defaults: 32768 per core, min 131072, 24 h established, 1 h close-wait, UDP timeouts left. */
const DEFAULTS: ProxyConfig['conntrack'] = {
  maxPerCore: 32768,
  min: 131072,
  tcpEstablishedTimeoutMs: 86_400_000,
  tcpCloseWaitTimeoutMs: 3_600_000,
  tcpBeLiberal: false,
  udpTimeoutMs: 0,
  udpStreamTimeoutMs: 0,
};

/** A kernel as Debian boots it: 2 CPUs' worth of defaults. */
function kernel(over: Record<string, string> = {}) {
  const sysctl = new SimulatedSysctl({
    'net/netfilter/nf_conntrack_max': '65536',
    'net/netfilter/nf_conntrack_tcp_timeout_established': '432000',
    'net/netfilter/nf_conntrack_tcp_timeout_close_wait': '60',
    'net/netfilter/nf_conntrack_tcp_be_liberal': '0',
    'net/netfilter/nf_conntrack_udp_timeout': '30',
    'net/netfilter/nf_conntrack_udp_timeout_stream': '120',
    ...over,
  });
  const sysfs = new SimulatedSysctl({ [HASHSIZE]: '16384' });
  return { sysctl, sysfs };
}

describe('conntrackMax', () => {
  it('is maxPerCore × CPUs, at least min, capped at 1Mi like kube-proxy 1.36, and 0 when maxPerCore is 0', () => {
    expect(conntrackMax(DEFAULTS, 2)).toBe(131072);
    expect(conntrackMax(DEFAULTS, 8)).toBe(262144);
    expect(conntrackMax(DEFAULTS, 96)).toBe(CONNTRACK_MAX_CAP);
    expect(conntrackMax({ ...DEFAULTS, maxPerCore: 0, min: 500000 }, 8)).toBe(0);
    expect(conntrackMax({ ...DEFAULTS, min: 2_000_000 }, 96)).toBe(2_000_000);
  });
});

describe('applyConntrackSysctls', () => {
  it('raises nf_conntrack_max and the hash size to a quarter of it, and sets the configured timeouts', async () => {
    const { sysctl, sysfs } = kernel();
    const log = new MemoryLog();
    const r = await applyConntrackSysctls({ config: { ...DEFAULTS, tcpBeLiberal: true, udpTimeoutMs: 45_000, udpStreamTimeoutMs: 300_000 }, sysctl, sysfs, cpuCount: 8, logger: log.logger });
    expect(sysctl.writes).toEqual([
      { name: 'net/netfilter/nf_conntrack_max', value: '262144' },
      { name: 'net/netfilter/nf_conntrack_tcp_timeout_established', value: '86400' },
      { name: 'net/netfilter/nf_conntrack_tcp_timeout_close_wait', value: '3600' },
      { name: 'net/netfilter/nf_conntrack_tcp_be_liberal', value: '1' },
      { name: 'net/netfilter/nf_conntrack_udp_timeout', value: '45' },
      { name: 'net/netfilter/nf_conntrack_udp_timeout_stream', value: '300' },
    ]);
    expect(sysfs.writes).toEqual([{ name: HASHSIZE, value: '65536' }]);
    expect(r.readOnlySysFS).toBe(false);
    expect(r.outcomes.every((o) => o.action === 'set')).toBe(true);
    expect(log.lines('info').map((l) => l.slice(l.indexOf('] ') + 2))).toContain('set net/netfilter/nf_conntrack_max to 262144 want=262144 was=65536');
  });

  it('never lowers nf_conntrack_max, and then leaves the hash size to whoever raised it', async () => {
    const { sysctl, sysfs } = kernel({ 'net/netfilter/nf_conntrack_max': '524288' });
    const r = await applyConntrackSysctls({ config: DEFAULTS, sysctl, sysfs, cpuCount: 2, logger: new MemoryLog().logger });
    expect(sysctl.values.get('net/netfilter/nf_conntrack_max')).toBe('524288');
    expect(sysfs.writes).toEqual([]);
    expect(r.outcomes[0]).toMatchObject({ name: 'net/netfilter/nf_conntrack_max', action: 'kept', want: 131072, was: 524288 });
  });

  it('does not touch a hash size that is already large enough', async () => {
    const { sysctl, sysfs } = kernel();
    sysfs.values.set(HASHSIZE, '65536');
    const r = await applyConntrackSysctls({ config: DEFAULTS, sysctl, sysfs, cpuCount: 2, logger: new MemoryLog().logger });
    expect(sysctl.values.get('net/netfilter/nf_conntrack_max')).toBe('131072');
    expect(sysfs.writes).toEqual([]);
    expect(r.outcomes[1]).toMatchObject({ name: `/sys/${HASHSIZE}`, action: 'kept', want: 32768, was: 65536 });
  });

  it('skips every setting configured 0 or false, and writes nothing already as wanted', async () => {
    const { sysctl, sysfs } = kernel({ 'net/netfilter/nf_conntrack_tcp_timeout_established': '86400' });
    const config = { ...DEFAULTS, maxPerCore: 0, tcpCloseWaitTimeoutMs: 0 };
    const r = await applyConntrackSysctls({ config, sysctl, sysfs, cpuCount: 2, logger: new MemoryLog().logger });
    expect(sysctl.writes).toEqual([]);
    expect(sysfs.writes).toEqual([]);
    expect(r.outcomes.map((o) => `${o.name.replace('net/netfilter/', '')} ${o.action}`)).toEqual([
      'nf_conntrack_max skipped',
      'nf_conntrack_tcp_timeout_established kept',
      'nf_conntrack_tcp_timeout_close_wait skipped',
      'nf_conntrack_tcp_be_liberal skipped',
      'nf_conntrack_udp_timeout skipped',
      'nf_conntrack_udp_timeout_stream skipped',
    ]);
  });

  it('sets timeouts that differ in either direction (only the max is raise-only)', async () => {
    const { sysctl, sysfs } = kernel({ 'net/netfilter/nf_conntrack_tcp_timeout_established': '999999' });
    await applyConntrackSysctls({ config: { ...DEFAULTS, maxPerCore: 0 }, sysctl, sysfs, logger: new MemoryLog().logger });
    expect(sysctl.values.get('net/netfilter/nf_conntrack_tcp_timeout_established')).toBe('86400');
  });

  it('on a read-only /proc/sys warns once per sysctl, naming it and why, and goes on', async () => {
    const { sysctl, sysfs } = kernel();
    for (const name of sysctl.values.keys()) sysctl.refuse(name, 'EROFS');
    const log = new MemoryLog();
    const r = await applyConntrackSysctls({ config: { ...DEFAULTS, udpTimeoutMs: 45_000 }, sysctl, sysfs, cpuCount: 2, logger: log.logger });
    expect(r.outcomes.filter((o) => o.action === 'failed').map((o) => o.name)).toEqual([
      'net/netfilter/nf_conntrack_max',
      'net/netfilter/nf_conntrack_tcp_timeout_established',
      'net/netfilter/nf_conntrack_tcp_timeout_close_wait',
      'net/netfilter/nf_conntrack_udp_timeout',
    ]);
    // The hash size goes with the max: not attempted when the max could not be raised.
    expect(sysfs.writes).toEqual([]);
    const warnings = log.lines('warn');
    expect(warnings).toHaveLength(4);
    expect(warnings[0]).toContain('cannot set net/netfilter/nf_conntrack_max to 131072: /proc/sys is mounted read-only');
    expect(warnings[0]).toContain('kproxy goes on with the kernel');
  });

  it('in a network namespace: the max is not writable there, the per-namespace timeouts are', async () => {
    const { sysctl, sysfs } = kernel();
    sysctl.refuse('net/netfilter/nf_conntrack_max', 'EACCES');
    const log = new MemoryLog();
    const r = await applyConntrackSysctls({ config: DEFAULTS, sysctl, sysfs, cpuCount: 2, logger: log.logger });
    expect(r.outcomes[0]).toMatchObject({ action: 'failed', reason: expect.stringContaining('only the initial network namespace') });
    expect(sysctl.values.get('net/netfilter/nf_conntrack_tcp_timeout_established')).toBe('86400');
  });

  it("reports a read-only /sys (the hash size) so the caller can record kube-proxy's Warning Event", async () => {
    const { sysctl, sysfs } = kernel();
    sysfs.refuse(HASHSIZE, 'EROFS');
    const r = await applyConntrackSysctls({ config: DEFAULTS, sysctl, sysfs, cpuCount: 2, logger: new MemoryLog().logger });
    expect(r.readOnlySysFS).toBe(true);
    expect(sysctl.values.get('net/netfilter/nf_conntrack_max')).toBe('131072');
    expect(r.outcomes[1]).toMatchObject({ name: `/sys/${HASHSIZE}`, action: 'failed', reason: expect.stringContaining('/sys is mounted read-only') });
  });

  it('names the initial-namespace rule when the module refuses the hash size (EIO from sysfs)', async () => {
    const { sysctl, sysfs } = kernel();
    sysfs.refuse(HASHSIZE, 'EIO');
    const r = await applyConntrackSysctls({ config: DEFAULTS, sysctl, sysfs, cpuCount: 2, logger: new MemoryLog().logger });
    expect(r.outcomes[1]).toMatchObject({ action: 'failed', reason: 'the kernel accepts it only from the initial network namespace' });
    expect(r.readOnlySysFS).toBe(false);
  });

  it('a missing nf_conntrack module fails each write with a reason, never a throw', async () => {
    const sysctl = new SimulatedSysctl();
    for (const n of ['max', 'tcp_timeout_established', 'tcp_timeout_close_wait']) sysctl.refuse(`net/netfilter/nf_conntrack_${n}`, 'ENOENT');
    const r = await applyConntrackSysctls({ config: DEFAULTS, sysctl, sysfs: new SimulatedSysctl(), cpuCount: 2, logger: new MemoryLog().logger });
    expect(r.outcomes.filter((o) => o.action === 'failed')).toHaveLength(3);
    expect(r.outcomes[0].reason).toContain('is the nf_conntrack module loaded?');
  });
});
