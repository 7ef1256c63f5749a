import { describe, expect, it } from 'vitest';
import { FixedChainDiff } from './fixed-chain-diff.ts';
import type { FixedRules } from './fixed-rules.ts';
import { applyDiff, countedChains, countLines, fullFilterPart, fullNatShared, natTablePart, partialShared } from './restore-text.ts';
import { LineBuffer } from '../xtables/restore-writer.ts';
import type { ServicePortRules } from './rules.ts';

function buf(...lines: string[]): LineBuffer {
  const b = new LineBuffer();
  for (const l of lines) b.writeLine(l);
  return b;
}

function fixed(): FixedRules {
  return {
    filterChains: ['KUBE-FIREWALL', 'KUBE-FORWARD', 'KUBE-SERVICES'],
    filterHead: buf('-A KUBE-FIREWALL -j DROP'),
    filterTail: buf('-A KUBE-FORWARD -j ACCEPT'),
    natChains: ['KUBE-MARK-MASQ', 'KUBE-NODEPORTS', 'KUBE-SERVICES'],
    natHead: buf('-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000'),
    natTail: buf('-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS'),
    warnings: [],
  };
}

/** port stands for one service port's rules in the shared chains (only what partial syncs read). */
function port(jumps: string[], filter: string[] = []): { objects: ServicePortRules } {
  const text = (l: string[]) => l.map((x) => x + '\n').join('');
  return { objects: { jumpsText: text(jumps), filterText: text(filter) } as ServicePortRules };
}

describe('restore text assembly', () => {
  it('a full filter part declares every fixed chain once, writes head, services, tail, then the deferred jumps, and a mangle canary first when missing', () => {
    const part = fullFilterPart(fixed(), buf('-A KUBE-SERVICES -d 10.96.0.1/32 -j REJECT'), {
      existingNat: new Set(),
      deferred: [{ table: 'filter', from: 'INPUT', to: 'KUBE-FIREWALL', args: ['-j', 'KUBE-FIREWALL'] }],
      deferredCanaries: ['mangle', 'filter'],
    });
    expect(part.text).toBe(
      [
        '*mangle',
        ':KUBE-PROXY-CANARY - [0:0]',
        'COMMIT',
        '*filter',
        ':KUBE-FIREWALL - [0:0]',
        ':KUBE-FORWARD - [0:0]',
        ':KUBE-SERVICES - [0:0]',
        ':KUBE-PROXY-CANARY - [0:0]',
        '-A KUBE-FIREWALL -j DROP',
        '-A KUBE-SERVICES -d 10.96.0.1/32 -j REJECT',
        '-A KUBE-FORWARD -j ACCEPT',
        '-I INPUT 1 -j KUBE-FIREWALL',
        'COMMIT',
        '',
      ].join('\n'),
    );
    expect(part.lines).toBe(countLines(part.text));
    expect(part.rulesWritten).toBe(4);
  });

  it('one nat block: every declaration before any rule, the KUBE-NODEPORTS jump last', () => {
    const shared = fullNatShared(fixed(), buf('-A KUBE-SERVICES -d 10.96.0.1/32 -j KUBE-SVC-A'));
    const block = { chains: buf(':KUBE-SVC-A - [0:0]'), rules: buf('-A KUBE-SVC-A -j KUBE-SEP-A') };
    const end = new LineBuffer();
    end.writeText(shared.tail.text(), shared.tail.lines);
    end.writeLine('COMMIT');
    const nat = natTablePart([block], shared.chains, shared.rules, end, '0x4000');
    const lines = nat.text.trimEnd().split('\n');
    expect(lines[0]).toBe('*nat');
    const lastDeclaration = lines.findLastIndex((l) => l.startsWith(':'));
    const firstRule = lines.findIndex((l) => l.startsWith('-A'));
    expect(lastDeclaration).toBeLessThan(firstRule);
    expect(lines.slice(-2)).toEqual(['-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS', 'COMMIT']);
    expect(nat.lines).toBe(lines.length);
  });

  it('split nat blocks: KUBE-MARK-MASQ committed first, each block of whole service ports its own COMMIT, the fixed chains that reference them last', () => {
    const shared = fullNatShared(fixed(), buf('-A KUBE-SERVICES -d 10.96.0.1/32 -j KUBE-SVC-A', '-A KUBE-SERVICES -d 10.96.0.2/32 -j KUBE-SVC-B'));
    const blocks = [
      { chains: buf(':KUBE-SVC-A - [0:0]'), rules: buf('-A KUBE-SVC-A -j KUBE-MARK-MASQ') },
      { chains: buf(':KUBE-SVC-B - [0:0]'), rules: buf('-A KUBE-SVC-B -j KUBE-MARK-MASQ') },
    ];
    const nat = natTablePart(blocks, shared.chains, shared.rules, buf('COMMIT'), '0x4000');
    const commits = nat.text.split('COMMIT\n').filter(Boolean);
    expect(commits[0]).toBe('*nat\n:KUBE-MARK-MASQ - [0:0]\n-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n');
    expect(commits[1]).toContain('KUBE-SVC-A');
    expect(commits[1]).not.toContain('KUBE-SVC-B');
    expect(commits[2]).toContain('KUBE-SVC-B');
    expect(commits[3]).toMatch(/^\*nat\n:KUBE-MARK-MASQ[\s\S]*-A KUBE-SERVICES -d 10\.96\.0\.2\/32 -j KUBE-SVC-B\n$/);
    expect(nat.lines).toBe(countLines(nat.text));
  });

  it('a partial sync edits a long shared chain in place and rewrites a short one from every port, in sync order', () => {
    const a = port(['-A KUBE-SERVICES -d 10.96.0.1/32 -j KUBE-SVC-A']);
    const b = port(['-A KUBE-SERVICES -d 10.96.0.2/32 -j KUBE-SVC-B', '-A KUBE-NODEPORTS --dport 30002 -j KUBE-EXT-B']);
    const diff = new FixedChainDiff();
    diff.change('', b.objects.jumpsText);
    const ports = new Map([
      ['a', a],
      ['b', b],
    ]);
    const lengths = new Map([
      ['KUBE-SERVICES', 100],
      ['KUBE-NODEPORTS', 1],
    ]);
    const nat = partialShared('nat', { diff, ports, fixed: fixed(), lengths, inPlaceEdits: true });
    expect(nat.chains.text()).toBe('*nat\n:KUBE-NODEPORTS - [0:0]\n');
    expect(nat.rules.text()).toBe('-A KUBE-NODEPORTS --dport 30002 -j KUBE-EXT-B\n-I KUBE-SERVICES 1 -d 10.96.0.2/32 -j KUBE-SVC-B\n');
    expect(nat.rulesWritten).toBe(2);

    const rewritten = partialShared('nat', { diff, ports, fixed: fixed(), lengths, inPlaceEdits: false });
    expect(rewritten.chains.text()).toBe('*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n');
    expect(rewritten.rules.text()).toContain('-A KUBE-SERVICES -d 10.96.0.1/32 -j KUBE-SVC-A\n-A KUBE-SERVICES -d 10.96.0.2/32 -j KUBE-SVC-B\n');
    // Rewriting KUBE-SERVICES brings back its KUBE-NODEPORTS jump, last.
    expect(rewritten.tail.text()).toBe('-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n');
  });

  it('a partial filter part is nothing when no filter chain changed', () => {
    const part = partialShared('filter', { diff: new FixedChainDiff(), ports: new Map(), fixed: fixed(), lengths: new Map(), inPlaceEdits: true });
    expect(part).toEqual({ text: '', lines: 0, rulesWritten: 0 });
  });

  it('keeps the shared chain lengths: counted from a full text, or moved by a diff', () => {
    const counted = countedChains('-A KUBE-SERVICES -j X\n-A KUBE-SERVICES -j Y\n-A KUBE-NODEPORTS -j Z\n');
    expect(counted).toEqual(
      new Map([
        ['KUBE-SERVICES', 2],
        ['KUBE-NODEPORTS', 1],
      ]),
    );
    const diff = new FixedChainDiff();
    diff.change('-A KUBE-SERVICES -j X\n', '-A KUBE-NODEPORTS -j W\n-A KUBE-NODEPORTS -j V\n');
    expect(applyDiff(counted, diff)).toEqual(
      new Map([
        ['KUBE-SERVICES', 1],
        ['KUBE-NODEPORTS', 3],
      ]),
    );
  });
});
