import { describe, expect, it } from 'vitest';
import { CleanupFailedError } from '../errors.ts';
import { cleanupSummary, mergeCleanup } from './backend.ts';

describe('cleanup results', () => {
  it('mergeCleanup adds the counts per kind and keeps every error, in order', () => {
    const a = new CleanupFailedError('iptables-nft: cannot list the rules');
    const b = new CleanupFailedError('removing kube-ipvs0 failed');
    const merged = mergeCleanup({ removed: { nat: 3, filter: 1 }, errors: [a] }, { removed: {}, errors: [] }, { removed: { nat: 2, ipsets: 4 }, errors: [b] });
    expect(merged).toEqual({ removed: { nat: 5, filter: 1, ipsets: 4 }, errors: [a, b] });
    expect(mergeCleanup()).toEqual({ removed: {}, errors: [] });
  });

  it('cleanupSummary says what went, or that nothing was there, and each error', () => {
    expect(cleanupSummary({ removed: { nat: 5, nftables: 1 }, errors: [] })).toBe('removed nat 5, nftables 1');
    expect(cleanupSummary({ removed: {}, errors: [] })).toBe('nothing to remove');
    expect(cleanupSummary({ removed: { nat: 2 }, errors: [new CleanupFailedError('removing kube-ipvs0 failed')] })).toBe('removed nat 2; 1 error(s): removing kube-ipvs0 failed');
  });
});
