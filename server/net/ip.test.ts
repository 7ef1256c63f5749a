import { describe, expect, it } from 'vitest';
import {
  canonicalIP,
  cidrContains,
  compareIPs,
  endpointIPProblem,
  intToIPv4,
  ipFamilyOf,
  ipFromBigInt,
  ipToBigInt,
  ipv4ToInt,
  isIPv4MappedIPv6,
  isLinkLocalIPv6,
  isLoopbackIP,
  nftFamilyOf,
  objectIP,
  otherFamily,
  parseCIDR,
} from './ip.ts';

describe('canonicalIP', () => {
  it('prints IPv4 as a dotted quad and reads leading zeros as decimal, like ParseIPSloppy', () => {
    expect(canonicalIP('10.0.0.1')).toBe('10.0.0.1');
    expect(canonicalIP('010.000.0.01')).toBe('10.0.0.1');
  });

  it('returns a canonical IPv4 text itself, and reads every other dotted text as before', () => {
    const text = '10.96.0.10';
    expect(canonicalIP(text)).toBe(text);
    const cases = ['0.0.0.0', '255.255.255.255', '1.2.3.4', '0.10.0.1', '00.1.2.3', '1.2.3.04', '256.1.1.1', '1.2.3.', '.1.2.3', '1..2.3', '1.2.3.4.', '1234.1.1.1', '1.2.3.4 ', '1.2.3.+4', '1.2.3.a'];
    const expected = ['0.0.0.0', '255.255.255.255', '1.2.3.4', '0.10.0.1', '0.1.2.3', '1.2.3.4', null, null, null, null, null, null, null, null, null];
    expect(cases.map((c) => canonicalIP(c))).toEqual(expected);
  });

  it('prints IPv6 the way Go does: lower case, the longest zero run as ::, a single zero group kept', () => {
    expect(canonicalIP('2001:DB8:0:0:0:0:0:1')).toBe('2001:db8::1');
    expect(canonicalIP('0:0:0:0:0:0:0:1')).toBe('::1');
    expect(canonicalIP('2001:db8:0:1:1:1:1:1')).toBe('2001:db8:0:1:1:1:1:1');
    expect(canonicalIP('1:0:0:2:0:0:0:3')).toBe('1:0:0:2::3');
    expect(canonicalIP('::')).toBe('::');
  });

  it('reads an IPv4 tail inside IPv6', () => {
    expect(canonicalIP('::ffff:10.0.0.1')).toBe('::ffff:a00:1');
    expect(canonicalIP('64:ff9b::192.0.2.33')).toBe('64:ff9b::c000:221');
  });

  it('refuses what is not an address', () => {
    for (const bad of [
      '',
      '10.0.0',
      '10.0.0.256',
      '10.0.0.1.2',
      'a.b.c.d',
      '1:2:3:4:5:6:7:8:9',
      '1::2::3',
      '12345::1',
      'fe80::1%eth0',
      '::g',
      '1:2:3:4:5:6:7:8::',
      '::ffff:010.0.0.1',
      'localhost',
      'x'.repeat(46),
    ]) {
      expect(canonicalIP(bad), bad).toBeNull();
    }
    expect(canonicalIP(42)).toBeNull();
    expect(canonicalIP(undefined)).toBeNull();
  });
});

describe('objectIP', () => {
  it('returns the canonical text and family of an address from an object', () => {
    expect(objectIP('10.0.0.1')).toEqual({ ip: '10.0.0.1', family: 'IPv4' });
    expect(objectIP('FD00:0:0:0::0A')).toEqual({ ip: 'fd00::a', family: 'IPv6' });
    expect(objectIP('2001:db8:0:0:1:0:0:1')).toEqual({ ip: '2001:db8::1:0:0:1', family: 'IPv6' });
  });

  it('refuses IPv4-mapped IPv6 in every spelling, naming the IPv4 address to write instead', () => {
    for (const mapped of ['::ffff:10.0.0.1', '::FFFF:a00:1', '0:0:0:0:0:ffff:10.0.0.1']) {
      expect(isIPv4MappedIPv6(mapped), mapped).toBe(true);
      expect(objectIP(mapped), mapped).toEqual({ ip: null, why: 'is an IPv4-mapped IPv6 address, which Kubernetes does not accept (write 10.0.0.1 instead)' });
    }
    // NAT64's well-known prefix and IPv4-compatible addresses are ordinary IPv6 addresses.
    expect(isIPv4MappedIPv6('64:ff9b::10.0.0.1')).toBe(false);
    expect(objectIP('::10.0.0.1')).toEqual({ ip: '::a00:1', family: 'IPv6' });
  });

  it('says what is wrong with text that is no address', () => {
    for (const bad of ['fd00::1::2', '10.0.0.256', 'fe80::1%eth0', '', null]) expect(objectIP(bad), String(bad)).toEqual({ ip: null, why: 'is not an IP address' });
  });
});

describe('family names', () => {
  it('pairs each family with the other and with its nftables family', () => {
    expect(otherFamily('IPv4')).toBe('IPv6');
    expect(otherFamily('IPv6')).toBe('IPv4');
    expect(nftFamilyOf('IPv4')).toBe('ip');
    expect(nftFamilyOf('IPv6')).toBe('ip6');
  });
});

describe('ipFamilyOf', () => {
  it('names the family of an address and null for anything else', () => {
    expect(ipFamilyOf('10.0.0.1')).toBe('IPv4');
    expect(ipFamilyOf('fd00::1')).toBe('IPv6');
    expect(ipFamilyOf('10.0.0.0/8')).toBeNull();
  });
});

describe('parseCIDR', () => {
  it('clears host bits and prints the network as Go does', () => {
    expect(parseCIDR('10.1.2.3/8')).toEqual({ family: 'IPv4', ip: '10.0.0.0', prefix: 8, text: '10.0.0.0/8' });
    expect(parseCIDR('0.0.0.0/0')?.text).toBe('0.0.0.0/0');
    expect(parseCIDR('192.168.1.77/32')?.text).toBe('192.168.1.77/32');
    expect(parseCIDR('2001:db8:1:2:3::1/52')).toEqual({ family: 'IPv6', ip: '2001:db8:1::', prefix: 52, text: '2001:db8:1::/52' });
    expect(parseCIDR('::/0')?.text).toBe('::/0');
  });

  it('refuses a bad address, a prefix out of range or no prefix', () => {
    for (const bad of ['10.0.0.0', '10.0.0.0/33', '10.0.0.0/-1', '10.0.0.0/', 'fd00::/129', 'x/8', '10.0.0.0/8/8']) expect(parseCIDR(bad), bad).toBeNull();
    expect(parseCIDR(null)).toBeNull();
  });
});

describe('cidrContains', () => {
  it('matches addresses of the CIDR family inside its prefix only', () => {
    const v4 = parseCIDR('10.244.0.0/16')!;
    expect(cidrContains(v4, '10.244.255.1')).toBe(true);
    expect(cidrContains(v4, '10.245.0.1')).toBe(false);
    expect(cidrContains(v4, 'fd00::1')).toBe(false);
    expect(cidrContains(parseCIDR('0.0.0.0/0')!, '203.0.113.9')).toBe(true);
    const v6 = parseCIDR('fd00:10::/60')!;
    expect(cidrContains(v6, 'fd00:10:0:f::1')).toBe(true);
    expect(cidrContains(v6, 'fd00:10:0:10::1')).toBe(false);
    expect(cidrContains(v6, '10.0.0.1')).toBe(false);
  });
});

describe('isLoopbackIP', () => {
  it('is 127.0.0.0/8, ::1 and IPv4 loopback mapped into IPv6', () => {
    for (const ip of ['127.0.0.1', '127.255.0.9', '::1', '::ffff:7f00:1']) expect(isLoopbackIP(ip), ip).toBe(true);
    for (const ip of ['10.0.0.1', '128.0.0.1', '::', '::2', '::ffff:a00:1', 'fe80::1']) expect(isLoopbackIP(ip), ip).toBe(false);
  });
});

describe('isLinkLocalIPv6', () => {
  it('is fe80::/10, in any spelling, and nothing of IPv4', () => {
    for (const ip of ['fe80::1', 'FE80::a:1', 'febf:ffff::1', 'fe80:0:0:0:0:0:0:1']) expect(isLinkLocalIPv6(ip), ip).toBe(true);
    for (const ip of ['fec0::1', 'fe7f::1', 'fd00::1', '::1', '169.254.0.1', '10.0.0.1', 'not-an-ip']) expect(isLinkLocalIPv6(ip), ip).toBe(false);
  });
});

describe("endpointIPProblem (the API server's ValidateEndpointIP)", () => {
  it('refuses the unspecified addresses', () => {
    expect(endpointIPProblem('0.0.0.0')).toBe('may not be unspecified (0.0.0.0)');
    expect(endpointIPProblem('::')).toBe('may not be unspecified (::)');
  });

  it('refuses loopback: all of 127.0.0.0/8 and ::1', () => {
    for (const ip of ['127.0.0.1', '127.1.2.3', '127.255.255.255', '::1']) expect(endpointIPProblem(ip), ip).toBe('may not be in the loopback range (127.0.0.0/8, ::1/128)');
  });

  it('refuses link-local unicast: 169.254.0.0/16 and fe80::/10', () => {
    for (const ip of ['169.254.0.1', '169.254.169.254', 'fe80::1', 'febf:ffff::1']) expect(endpointIPProblem(ip), ip).toBe('may not be in the link-local range (169.254.0.0/16, fe80::/10)');
  });

  it('refuses link-local multicast: 224.0.0.0/24 and ffX2::/16 as Go reads it', () => {
    for (const ip of ['224.0.0.1', '224.0.0.251', 'ff02::1', 'ff12::1:2', 'ff32::fb']) expect(endpointIPProblem(ip), ip).toBe('may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)');
  });

  it('lets other multicast and the IPv4 broadcast address pass, as the API server does', () => {
    for (const ip of ['224.0.1.1', '239.255.255.250', '255.255.255.255', 'ff05::1:3', 'ff0e::1']) expect(endpointIPProblem(ip), ip).toBeNull();
  });

  it('lets ordinary unicast pass, including the edges of the refused ranges', () => {
    for (const ip of ['10.244.0.5', '1.2.3.4', '126.255.255.255', '128.0.0.1', '169.253.255.255', '169.255.0.1', '223.255.255.255', 'fd00::5', '2001:db8::1', 'fec0::1', 'fe7f::1', '::2'])
      expect(endpointIPProblem(ip), ip).toBeNull();
  });
});

describe('compareIPs', () => {
  it('sorts IPv4 numerically, then IPv6 numerically', () => {
    const sorted = ['fd00::10', '10.0.0.10', 'fd00::9', '10.0.0.9', '9.255.255.255', '192.0.2.1', '::1'].sort(compareIPs);
    expect(sorted).toEqual(['9.255.255.255', '10.0.0.9', '10.0.0.10', '192.0.2.1', '::1', 'fd00::9', 'fd00::10']);
    expect(compareIPs('10.0.0.1', '10.0.0.1')).toBe(0);
  });
});

describe('ipv4ToInt and intToIPv4', () => {
  it('round-trip the whole unsigned range', () => {
    for (const ip of ['0.0.0.0', '10.0.0.1', '255.255.255.255', '128.0.0.0']) expect(intToIPv4(ipv4ToInt(ip))).toBe(ip);
    expect(ipv4ToInt('255.255.255.255')).toBe(0xffffffff);
  });
});

describe('ipToBigInt and ipFromBigInt', () => {
  it('read an address as its number in its family and print it back canonically', () => {
    expect(ipToBigInt('10.0.0.1')).toBe(0x0a000001n);
    expect(ipToBigInt('010.0.0.1')).toBe(0x0a000001n);
    expect(ipToBigInt('::1')).toBe(1n);
    expect(ipToBigInt('fd00::1:0')).toBe((0xfd00n << 112n) | 0x10000n);
    expect(ipToBigInt('FD00:0:0:0:0:0:1:0')).toBe(ipToBigInt('fd00::1:0'));
    expect(ipToBigInt('not-an-ip')).toBeNull();
    for (const ip of ['0.0.0.0', '10.0.0.1', '255.255.255.255']) expect(ipFromBigInt(ipToBigInt(ip)!, 'IPv4')).toBe(ip);
    for (const ip of ['::', '::1', 'fd00::1:0', 'fd00:1:2:3:4:5:6:7', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '1::']) expect(ipFromBigInt(ipToBigInt(ip)!, 'IPv6')).toBe(ip);
  });

  it('count across an address boundary, as ranges need', () => {
    expect(ipFromBigInt(ipToBigInt('10.0.0.255')! + 1n, 'IPv4')).toBe('10.0.1.0');
    expect(ipFromBigInt(ipToBigInt('fd00::ffff')! + 1n, 'IPv6')).toBe('fd00::1:0');
  });
});
