import { describe, expect, it } from 'vitest';
import { fmtAge, fmtBytes, fmtCompact, fmtMs, fmtPercent, plural } from './format.ts';

describe('format', () => {
  it('renders durations, ages, sizes and shares the way the pages show them', () => {
    expect([0.42, 8.25, 120.4, 3400, 125_000].map(fmtMs)).toEqual(['0.42 ms', '8.3 ms', '120 ms', '3.4 s', '2 min']);
    expect(fmtMs(null)).toBe('–');
    expect([500, 12_000, 200_000, 7_300_000, 90_000_000].map((d) => fmtAge(1_000_000_000 - d, 1_000_000_000))).toEqual(['just now', '12 s ago', '3 min ago', '2 h ago', '1 d ago']);
    expect(fmtAge(null, 0)).toBe('never');
    expect([0, 1536, 5 * 1024 * 1024].map(fmtBytes)).toEqual(['0 B', '1.5 KiB', '5.0 MiB']);
    expect([999, 12_345, 1_234_567].map(fmtCompact)).toEqual(['999', '12k', '1.2M']);
    expect([1, 1 / 3, 0.5, null].map(fmtPercent)).toEqual(['100 %', '33.3 %', '50.0 %', '–']);
    expect(plural(1, 'rule')).toBe('1 rule');
    expect(plural(12_000, 'rule')).toBe('12,000 rules');
  });
});
