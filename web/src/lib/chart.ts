import type { SyncEntry } from './protocol.ts';

/** Bar is one sync in the latency chart: build and apply stacked, failures marked. */
export interface Bar {
  readonly seq: number;
  readonly x: number;
  readonly width: number;
  readonly buildY: number;
  readonly buildH: number;
  readonly applyY: number;
  readonly applyH: number;
  readonly ok: boolean;
  readonly full: boolean;
  readonly title: string;
}

export interface LatencyChart {
  readonly bars: readonly Bar[];
  /** maxMs: the value at the top of the chart (a round number). */
  readonly maxMs: number;
  readonly ticks: readonly { readonly y: number; readonly ms: number }[];
}

/** niceCeil rounds up to 1, 2 or 5 × a power of ten (10, 20, 50, 100…). */
export function niceCeil(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/**
 * latencyChart lays out the sync history as stacked bars (kproxy's own build
 * time under the kernel's apply time) in a width × height box: plain data
 * that an SVG renders, so the chart needs no chart library.
 */
export function latencyChart(syncs: readonly SyncEntry[], width: number, height: number, fmt: (ms: number) => string): LatencyChart {
  const n = syncs.length;
  const maxMs = niceCeil(Math.max(1, ...syncs.map((s) => s.durationMs)));
  const scale = (ms: number) => (ms / maxMs) * height;
  const slot = n ? width / n : width;
  const barW = Math.max(1, Math.min(18, slot * 0.7));
  const bars = syncs.map((s, i) => {
    const applyH = scale(Math.min(s.applyMs, s.durationMs));
    const buildH = Math.max(s.ok ? 1 : 0, scale(Math.max(0, s.durationMs - s.applyMs)));
    const x = i * slot + (slot - barW) / 2;
    return {
      seq: s.seq,
      x,
      width: barW,
      applyY: height - applyH,
      applyH,
      buildY: height - applyH - buildH,
      buildH,
      ok: s.ok,
      full: s.full,
      title: `sync #${s.seq} (${s.trigger}, ${s.full ? 'full' : 'partial'}): ${fmt(s.durationMs)} = build ${fmt(s.durationMs - s.applyMs)} + kernel ${fmt(s.applyMs)}${s.ok ? '' : ' — FAILED'}`,
    };
  });
  const ticks = [0, 0.5, 1].map((f) => ({ y: height - f * height, ms: f * maxMs }));
  return { bars, maxMs, ticks };
}
