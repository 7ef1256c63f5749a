/**
 * Go durations, as KubeProxyConfiguration (metav1.Duration) and kube-proxy's
 * duration flags write them: "30s", "1m30s", "15m0s", "500ms", "1h0m0s", "-1s".
 * kproxy keeps durations as milliseconds; these two functions are the only
 * place that reads or writes the text form, so `/configz` and `--help` print
 * exactly what kube-proxy prints.
 */

const NS_PER_UNIT: Record<string, bigint> = {
  ns: 1n,
  us: 1_000n,
  µs: 1_000n, // U+00B5 micro sign
  μs: 1_000n, // U+03BC Greek small letter mu
  ms: 1_000_000n,
  s: 1_000_000_000n,
  m: 60_000_000_000n,
  h: 3_600_000_000_000n,
};

// Go's time.Duration is an int64 of nanoseconds: anything longer does not parse.
const MAX_NS = (1n << 63n) - 1n;

/** DurationSyntaxError says why a duration string is not a Go duration. */
export class DurationSyntaxError extends Error {
  constructor(input: string, why: string) {
    super(`invalid duration ${JSON.stringify(input)}: ${why}`);
    this.name = 'DurationSyntaxError';
  }
}

/**
 * parseDurationNs parses a Go duration string into nanoseconds, accepting what
 * time.ParseDuration accepts: an optional sign, then one or more decimal numbers
 * (fractions allowed) each followed by a unit (ns, us, µs, ms, s, m, h); "0"
 * alone needs no unit.
 */
export function parseDurationNs(input: string): bigint {
  let s = input;
  let negative = false;
  if (s.startsWith('-') || s.startsWith('+')) {
    negative = s[0] === '-';
    s = s.slice(1);
  }
  if (s === '0') return 0n;
  if (s === '') throw new DurationSyntaxError(input, 'empty');
  let total = 0n;
  while (s !== '') {
    const m = /^(\d*)(?:\.(\d*))?/.exec(s)!;
    const [whole = '', frac] = [m[1], m[2]];
    if (whole === '' && (frac === undefined || frac === '')) throw new DurationSyntaxError(input, 'expected a number');
    s = s.slice(m[0].length);
    const unit = /^[^\d.]+/.exec(s)?.[0];
    if (unit === undefined) throw new DurationSyntaxError(input, 'missing unit (ns, us, ms, s, m, h)');
    const scale = NS_PER_UNIT[unit];
    if (scale === undefined) throw new DurationSyntaxError(input, `unknown unit ${JSON.stringify(unit)}`);
    s = s.slice(unit.length);
    let ns = BigInt(whole === '' ? '0' : whole) * scale;
    if (frac) {
      // Truncate like Go does: digits finer than a nanosecond are dropped.
      ns += (BigInt(frac) * scale) / 10n ** BigInt(frac.length);
    }
    total += ns;
    if (total > MAX_NS) throw new DurationSyntaxError(input, 'out of range');
  }
  return negative ? -total : total;
}

/** parseDuration parses a Go duration string into (possibly fractional) milliseconds. */
export function parseDuration(input: string): number {
  return Number(parseDurationNs(input)) / 1e6;
}

/** isDuration tells whether input parses as a Go duration. */
export function isDuration(input: string): boolean {
  try {
    parseDurationNs(input);
    return true;
  } catch {
    return false;
  }
}

function fraction(value: bigint, digits: number): string {
  // value has `digits` implied decimal places: 1500n,3 -> "1.5"
  const scale = 10n ** BigInt(digits);
  const whole = value / scale;
  const rest = (value % scale).toString().padStart(digits, '0').replace(/0+$/, '');
  return rest === '' ? whole.toString() : `${whole}.${rest}`;
}

/** formatDurationNs renders nanoseconds the way Go's Duration.String() does. */
export function formatDurationNs(ns: bigint): string {
  if (ns === 0n) return '0s';
  const sign = ns < 0n ? '-' : '';
  const abs = ns < 0n ? -ns : ns;
  if (abs < 1_000n) return `${sign}${abs}ns`;
  if (abs < 1_000_000n) return `${sign}${fraction(abs, 3)}µs`;
  if (abs < 1_000_000_000n) return `${sign}${fraction(abs, 6)}ms`;
  const hours = abs / NS_PER_UNIT.h!;
  const minutes = (abs % NS_PER_UNIT.h!) / NS_PER_UNIT.m!;
  const seconds = fraction(abs % NS_PER_UNIT.m!, 9);
  if (hours > 0n) return `${sign}${hours}h${minutes}m${seconds}s`;
  if (minutes > 0n) return `${sign}${minutes}m${seconds}s`;
  return `${sign}${seconds}s`;
}

/** formatDuration renders milliseconds as a Go duration string ("1m30s", "500ms", "0s"). */
export function formatDuration(ms: number): string {
  return formatDurationNs(BigInt(Math.round(ms * 1e6)));
}
