import { describe, expect, it } from 'vitest';
import { comment, extractLines, probability, ProbabilityCache } from './restore-writer.ts';

describe('restore text helpers', () => {
  it('writes one-word comments bare and phrases quoted, as kube-proxy does', () => {
    expect(comment('ns1/svc1:p80')).toBe('ns1/svc1:p80');
    expect(comment('ns1/svc1:p80 cluster IP')).toBe('"ns1/svc1:p80 cluster IP"');
  });

  it('refuses comments that would change the restore line', () => {
    for (const bad of ['a"b', 'a\\b', 'two\nlines', 'tab\there', '', 'x'.repeat(256)]) {
      expect(() => comment(bad), JSON.stringify(bad)).toThrow(expect.objectContaining({ code: 'KPROXY_ERR_RULE_BUILD' }));
    }
    expect(comment('x'.repeat(255))).toHaveLength(255);
  });

  it('formats probabilities like Go "%0.10f", including its round-half-to-even', () => {
    expect(probability(2)).toBe('0.5000000000');
    expect(probability(3)).toBe('0.3333333333');
    expect(probability(7)).toBe('0.1428571429');
    expect(probability(1024)).toBe('0.0009765625');
    // 1/2048 = 0.00048828125 exactly: Go rounds the tie to even, JavaScript would round up.
    expect(probability(2048)).toBe('0.0004882812');
    expect(probability(4096)).toBe('0.0002441406');
    const cache = new ProbabilityCache();
    expect(cache.get(3)).toBe('0.3333333333');
    expect(cache.get(2048)).toBe('0.0004882812');
  });

  it('extracts the blamed lines with context, marking them', () => {
    const input = ['*nat', ':KUBE-A - [0:0]', '-A KUBE-A -j KUBE-NOPE', 'COMMIT', ''].join('\n');
    expect(extractLines(input, [3], 1)).toBe('      2: :KUBE-A - [0:0]\n>     3: -A KUBE-A -j KUBE-NOPE\n      4: COMMIT');
    expect(extractLines(input, [])).toBe('');
  });
});
