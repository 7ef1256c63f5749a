/** Formatting helpers shared by the pages. Pure functions: they test without a DOM. */

/** fmtCount: 1234567 -> "1,234,567". */
export function fmtCount(n: number | null | undefined): string {
  return n === null || n === undefined ? '–' : n.toLocaleString('en-US');
}

/** fmtCompact: 1234567 -> "1.2M", 12345 -> "12.3k". */
export function fmtCompact(n: number): string {
  if (n < 1000) return String(n);
  if (n < 1_000_000) return `${(n / 1000).toFixed(n < 10_000 ? 1 : 0)}k`;
  if (n < 1_000_000_000) return `${(n / 1_000_000).toFixed(n < 10_000_000 ? 1 : 0)}M`;
  return `${(n / 1_000_000_000).toFixed(1)}G`;
}

/** fmtBytes: 1536 -> "1.5 KiB". */
export function fmtBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** fmtMs: a duration in ms, at a precision that reads well ("0.8 ms", "12 ms", "3.4 s", "2 min"). */
export function fmtMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

/** fmtAge: how long ago, from now: "just now", "12 s ago", "3 min ago", "2 h ago", "4 d ago". */
export function fmtAge(at: number | null | undefined, now: number): string {
  if (at === null || at === undefined) return 'never';
  const s = Math.max(0, Math.round((now - at) / 1000));
  if (s < 2) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86_400)} d ago`;
}

/** fmtTime: wall-clock time of day, "14:03:27". */
export function fmtTime(at: number): string {
  const d = new Date(at);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** fmtPercent: 0.3333 -> "33.3 %", 1 -> "100 %". */
export function fmtPercent(share: number | null | undefined): string {
  if (share === null || share === undefined) return '–';
  const p = share * 100;
  return `${p === 100 || p === 0 ? p.toFixed(0) : p.toFixed(1)} %`;
}

/** plural: plural(1, 'rule') -> "1 rule", plural(3, 'rule') -> "3 rules". */
export function plural(n: number, word: string, many = `${word}s`): string {
  return `${fmtCount(n)} ${n === 1 ? word : many}`;
}
