import { describe, expect, it } from 'vitest';
import type { ExecFn } from './exec.ts';
import { hostInterfaces, parseLinkTable } from './netif.ts';

// Trimmed `ip -j addr show` output (iproute2 6.1).
const IP_JSON = JSON.stringify([
  {
    ifindex: 1,
    ifname: 'lo',
    addr_info: [
      { family: 'inet', local: '127.0.0.1', prefixlen: 8 },
      { family: 'inet6', local: '::1', prefixlen: 128 },
    ],
  },
  {
    ifindex: 2,
    ifname: 'eth0',
    addr_info: [
      { family: 'inet', local: '10.0.0.10', prefixlen: 24 },
      { family: 'inet6', local: 'fe80:0:0:0::1', prefixlen: 64 },
    ],
  },
  { ifindex: 3, ifname: 'down0' },
]);

describe('host interface addresses', () => {
  it('reads ip -j addr show into canonical addresses per interface', async () => {
    const exec: ExecFn = async (cmd, args) => {
      expect([cmd, ...args]).toEqual(['ip', '-j', 'addr', 'show']);
      return { code: 0, stdout: IP_JSON, stderr: '' };
    };
    expect(await hostInterfaces(exec).addresses()).toEqual([
      { ifname: 'lo', family: 'IPv4', address: '127.0.0.1', prefixLength: 8 },
      { ifname: 'lo', family: 'IPv6', address: '::1', prefixLength: 128 },
      { ifname: 'eth0', family: 'IPv4', address: '10.0.0.10', prefixLength: 24 },
      { ifname: 'eth0', family: 'IPv6', address: 'fe80::1', prefixLength: 64 },
    ]);
  });
  it('reports a failing ip command as a KPROXY_ERR_NETLINK error', async () => {
    const exec: ExecFn = async () => ({ code: 1, stdout: '', stderr: 'Cannot open netlink socket' });
    await expect(hostInterfaces(exec).addresses()).rejects.toMatchObject({ code: 'KPROXY_ERR_NETLINK' });
    expect(() => parseLinkTable('not json')).toThrow(/invalid JSON/);
  });
});
