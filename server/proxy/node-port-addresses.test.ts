import { describe, expect, it } from 'vitest';
import { NodePortAddresses } from './node-port-addresses.ts';

describe('NodePortAddresses (--nodeport-addresses)', () => {
  it('matches every address when empty or when only the other family is given', () => {
    for (const v of [[], ['fd00::/64']]) {
      const n = new NodePortAddresses('IPv4', v);
      expect(n.matchAll).toBe(true);
      expect(n.containsIPv4Loopback).toBe(true);
    }
  });

  it('keeps the CIDRs of its family and finds matching host addresses, sorted', () => {
    const n = new NodePortAddresses('IPv4', ['192.168.0.0/16', 'fd00::/64', '10.0.0.0/8']);
    expect(n.matchAll).toBe(false);
    expect(n.containsIPv4Loopback).toBe(false);
    expect(n.nodeIPs(['127.0.0.1', '10.0.0.10', '192.168.1.2', '10.0.0.9', 'fd00::1', '172.16.0.1', '10.0.0.10'])).toEqual(['10.0.0.9', '10.0.0.10', '192.168.1.2']);
  });

  it('notices loopback ranges (localhost node ports)', () => {
    expect(new NodePortAddresses('IPv4', ['127.0.0.0/8']).containsIPv4Loopback).toBe(true);
    expect(new NodePortAddresses('IPv4', ['127.0.0.1/32']).containsIPv4Loopback).toBe(true);
    expect(new NodePortAddresses('IPv4', ['0.0.0.0/0', '10.0.0.0/8']).matchAll).toBe(true);
  });

  it('turns "primary" into the node primary address of the family', () => {
    const n = new NodePortAddresses('IPv4', ['primary'], ['fd00::10', '10.0.0.10', '10.0.0.11']);
    expect(n.cidrs.map((c) => c.text)).toEqual(['10.0.0.10/32']);
    expect(n.nodeIPs(['10.0.0.10', '10.0.0.11'])).toEqual(['10.0.0.10']);
  });
});
