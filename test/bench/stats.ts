/** Small statistics for benchmark samples. */

/** Summary of several runs of one measurement. */
export interface Summary {
  readonly n: number;
  readonly min: number;
  readonly median: number;
  readonly max: number;
}

/** quantile with linear interpolation between closest ranks (q in 0..1). */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return s[lo] + (s[hi] - s[lo]) * (pos - lo);
}

export function summarize(values: readonly number[]): Summary {
  const ok = values.filter((v) => Number.isFinite(v));
  if (ok.length === 0) return { n: 0, min: NaN, median: NaN, max: NaN };
  return { n: ok.length, min: Math.min(...ok), median: quantile(ok, 0.5), max: Math.max(...ok) };
}

/** Percentiles of a latency distribution. */
export interface Percentiles {
  readonly n: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
}

export function percentiles(values: readonly number[]): Percentiles {
  return { n: values.length, p50: quantile(values, 0.5), p90: quantile(values, 0.9), p99: quantile(values, 0.99), max: values.length ? Math.max(...values) : NaN };
}

/** fmt prints a number for a table: ms under 10 with one decimal, larger ones whole. */
export function fmt(v: number, unit = ''): string {
  if (!Number.isFinite(v)) return 'n/a';
  const text = Math.abs(v) < 10 ? v.toFixed(1) : Math.round(v).toLocaleString('en-US');
  return unit ? `${text} ${unit}` : text;
}

/** fmtSummary prints "median (min–max)". */
export function fmtSummary(s: Summary, unit = ''): string {
  if (s.n === 0) return 'n/a';
  if (s.n === 1) return fmt(s.median, unit);
  return `${fmt(s.median, unit)} (${fmt(s.min)}–${fmt(s.max)})`;
}

export const MiB = 1024 * 1024;
