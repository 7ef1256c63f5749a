/**
 * gc-signal is preloaded into the benchmarked daemon (--expose-gc --import):
 * SIGUSR2 runs a full garbage collection, so the benchmark can read the live
 * heap and the resident memory left after it, apart from garbage not yet
 * collected. Nothing else in the daemon changes.
 */
const gc = (globalThis as { gc?: () => void }).gc;
process.on('SIGUSR2', () => {
  gc?.();
  gc?.();
});
