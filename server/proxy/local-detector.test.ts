import { describe, expect, it } from 'vitest';
import { localDetectorFor } from './local-detector.ts';

const cfg = (over: Partial<Parameters<typeof localDetectorFor>[0]> = {}) => ({
  detectLocalMode: 'ClusterCIDR' as const,
  detectLocal: { bridgeInterface: '', interfaceNamePrefix: '' },
  clusterCIDRs: [] as string[],
  ...over,
});

describe('local traffic detectors (kube-proxy LocalTrafficDetector)', () => {
  it('ClusterCIDR matches the --cluster-cidr of the family', () => {
    const d = localDetectorFor(cfg({ clusterCIDRs: ['fd00::/48', '10.244.0.0/16'] }), { podCIDRs: [] }, 'IPv4');
    expect(d).toMatchObject({ implemented: true, ifLocal: ['-s', '10.244.0.0/16'], ifNotLocal: ['!', '-s', '10.244.0.0/16'], ifNotLocalNFT: ['ip', 'saddr', '!=', '10.244.0.0/16'] });
    expect(localDetectorFor(cfg({ clusterCIDRs: ['fd00::/48'] }), { podCIDRs: [] }, 'IPv6').ifLocalNFT).toEqual(['ip6', 'saddr', 'fd00::/48']);
  });

  it('ClusterCIDR without a CIDR of the family detects nothing', () => {
    expect(localDetectorFor(cfg({ clusterCIDRs: ['fd00::/48'] }), { podCIDRs: [] }, 'IPv4').implemented).toBe(false);
  });

  it('NodeCIDR uses the Node pod CIDR, and nothing until the Node has one', () => {
    expect(localDetectorFor(cfg({ detectLocalMode: 'NodeCIDR' }), { podCIDRs: ['10.244.3.0/24'] }, 'IPv4').ifLocal).toEqual(['-s', '10.244.3.0/24']);
    expect(localDetectorFor(cfg({ detectLocalMode: 'NodeCIDR' }), { podCIDRs: [] }, 'IPv4').implemented).toBe(false);
  });

  it('BridgeInterface and InterfaceNamePrefix match the incoming interface', () => {
    expect(localDetectorFor(cfg({ detectLocalMode: 'BridgeInterface', detectLocal: { bridgeInterface: 'cbr0', interfaceNamePrefix: '' } }), { podCIDRs: [] }, 'IPv4')).toMatchObject({
      ifLocal: ['-i', 'cbr0'],
      ifNotLocal: ['!', '-i', 'cbr0'],
      ifNotLocalNFT: ['iif', '!=', '"cbr0"'],
    });
    expect(localDetectorFor(cfg({ detectLocalMode: 'InterfaceNamePrefix', detectLocal: { bridgeInterface: '', interfaceNamePrefix: 'veth' } }), { podCIDRs: [] }, 'IPv4')).toMatchObject({
      ifLocal: ['-i', 'veth+'],
      // nft's iif names one existing interface; a wildcard needs iifname.
      ifLocalNFT: ['iifname', '"veth*"'],
    });
  });

  it('refuses interface names that would not be a single safe word in a rule', () => {
    for (const bad of ['', 'eth 0', 'a"b', 'averyveryverylongname', 'x+']) {
      expect(() => localDetectorFor(cfg({ detectLocalMode: 'BridgeInterface', detectLocal: { bridgeInterface: bad, interfaceNamePrefix: '' } }), { podCIDRs: [] }, 'IPv4')).toThrow(
        /KPROXY|not a valid interface name/,
      );
    }
  });
});
