import { describe, expect, it } from 'vitest';
import { ChainNames, hash16, isServiceChainName, servicePortChains } from './chain-names.ts';

describe('kube-proxy chain names', () => {
  it('names ns1/svc1:p80 over tcp KUBE-SVC-XPGD46QRK7WJZT7O and its endpoint 10.180.0.1:80 KUBE-SEP-SXIVWICOYRO3J4NJ', () => {
    const names = new ChainNames();
    expect(servicePortChains(names, 'ns1/svc1:p80', 'tcp').cluster).toBe('KUBE-SVC-XPGD46QRK7WJZT7O');
    expect(names.endpointChain('ns1/svc1:p80', 'tcp', '10.180.0.1:80')).toBe('KUBE-SEP-SXIVWICOYRO3J4NJ');
  });

  it('shares one hash across the SVC, SVL, EXT and FW chains of a port (upstream TestOverallIPTablesRules names)', () => {
    const c = servicePortChains(new ChainNames(), 'ns5/svc5:p80', 'tcp');
    expect(c).toEqual({ cluster: 'KUBE-SVC-NUKIZ6OKUXPJNT4C', local: 'KUBE-SVL-NUKIZ6OKUXPJNT4C', external: 'KUBE-EXT-NUKIZ6OKUXPJNT4C', firewall: 'KUBE-FW-NUKIZ6OKUXPJNT4C' });
    expect(servicePortChains(new ChainNames(), 'ns2/svc2:p80', 'tcp').external).toBe('KUBE-EXT-GNZBNJ2PO5MGZ6GT');
  });

  it('is base32 of sha256, cut to 16 characters', () => {
    // sha256("") = e3b0c442 98fc1c14 ...; base32 of its first 10 bytes:
    expect(hash16('')).toBe('4OYMIQUY7QOBJGX3');
    expect(hash16('x')).toMatch(/^[A-Z2-7]{16}$/);
  });

  it('memoizes across a generation and forgets unused names after two rotations', () => {
    const names = new ChainNames();
    names.portHash('a/b:c', 'tcp');
    names.rotate();
    expect(names.size).toBe(1);
    names.rotate();
    expect(names.size).toBe(0);
  });

  it('tells service chains from fixed chains', () => {
    for (const c of ['KUBE-SVC-X', 'KUBE-SVL-X', 'KUBE-EXT-X', 'KUBE-FW-X', 'KUBE-SEP-X', 'KUBE-XLB-X']) expect(isServiceChainName(c)).toBe(true);
    for (const c of ['KUBE-SERVICES', 'KUBE-FIREWALL', 'KUBE-FORWARD', 'KUBE-EXTERNAL-SERVICES', 'KUBE-MARK-MASQ']) expect(isServiceChainName(c)).toBe(false);
  });
});
