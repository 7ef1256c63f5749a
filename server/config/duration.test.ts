import { describe, expect, it } from 'vitest';
import { formatDuration, formatDurationNs, isDuration, parseDuration, parseDurationNs } from './duration.ts';

describe('parseDuration (Go time.ParseDuration)', () => {
  it.each([
    ['0', 0],
    ['0s', 0],
    ['1s', 1000],
    ['30s', 30_000],
    ['1m30s', 90_000],
    ['15m0s', 900_000],
    ['1h0m0s', 3_600_000],
    ['24h0m0s', 86_400_000],
    ['2h22m', 8_520_000],
    ['500ms', 500],
    ['250ms', 250],
    ['1.5s', 1500],
    ['.5s', 500],
    ['1.s', 1000],
    ['1500us', 1.5],
    ['1500µs', 1.5],
    ['1500μs', 1.5],
    ['2000000ns', 2],
    ['-1s', -1000],
    ['+1m', 60_000],
    ['1h1h', 7_200_000],
  ])('%s is %d ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each([
    ['', /empty/],
    ['30', /missing unit/],
    ['1m30', /missing unit/],
    ['s', /expected a number/],
    ['.s', /expected a number/],
    ['-', /empty/],
    ['1d', /unknown unit "d"/],
    ['1 s', /unknown unit " s"/],
    ['thirty seconds', /expected a number/],
    ['9999999999999h', /out of range/],
  ])('rejects %j', (text, why) => {
    expect(() => parseDuration(text)).toThrow(why);
    expect(isDuration(text)).toBe(false);
  });

  it('truncates below a nanosecond like Go', () => {
    expect(parseDurationNs('1.0000000009s')).toBe(1_000_000_000n);
  });
});

describe('formatDuration (Go Duration.String)', () => {
  it.each([
    [0, '0s'],
    [1000, '1s'],
    [30_000, '30s'],
    [90_000, '1m30s'],
    [900_000, '15m0s'],
    [3_600_000, '1h0m0s'],
    [86_400_000, '24h0m0s'],
    [500, '500ms'],
    [1500, '1.5s'],
    [1.5, '1.5ms'],
    [0.0015, '1.5µs'],
    [-1000, '-1s'],
    [3_723_500, '1h2m3.5s'],
  ])('%d ms is %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  it('prints nanoseconds', () => {
    expect(formatDurationNs(7n)).toBe('7ns');
  });

  it('round-trips what it prints', () => {
    for (const ms of [0, 1, 250, 999, 1000, 61_000, 3_600_000, 90_061_001]) {
      expect(parseDuration(formatDuration(ms))).toBe(ms);
    }
  });
});
