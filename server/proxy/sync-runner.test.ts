import { describe, expect, it } from 'vitest';
import { FakeClock, flushMicrotasks } from '../clock-fake.ts';
import { SyncRunner } from './sync-runner.ts';

function setup(min = 1000, max = 30_000, runMs = 0) {
  const clock = new FakeClock();
  const starts: number[] = [];
  let fail = false;
  const runner = new SyncRunner({
    clock,
    minIntervalMs: min,
    maxIntervalMs: max,
    run: async () => {
      starts.push(clock.monotonic());
      if (runMs) await new Promise<void>((r) => clock.setTimeout(r, runMs));
      if (fail) throw new Error('boom');
    },
  });
  return { clock, runner, starts, setFail: (v: boolean) => (fail = v) };
}

describe('SyncRunner', () => {
  it('runs nothing before start() and nothing without a request before the first run', async () => {
    const { clock, runner, starts } = setup();
    runner.request();
    await clock.advanceAsync(5000);
    expect(starts).toEqual([]);
    runner.start();
    await clock.advanceAsync(0);
    expect(starts).toEqual([0 + 5000]);
  });

  it('runs a first request at once', async () => {
    const { clock, runner, starts } = setup();
    runner.start();
    runner.request();
    await clock.advanceAsync(0);
    expect(starts).toEqual([0]);
  });

  it('keeps minInterval from the end of one run to the start of the next and coalesces requests', async () => {
    const { clock, runner, starts } = setup(1000, 30_000, 300);
    runner.start();
    runner.request();
    await clock.advanceAsync(0);
    // Three requests while the first run is in progress and right after it: one run.
    runner.request();
    await clock.advanceAsync(100);
    runner.request();
    await clock.advanceAsync(250); // first run ended at 300
    runner.request();
    await clock.advanceAsync(5000);
    expect(starts).toEqual([0, 1300]);
  });

  it('runs every maxInterval without requests', async () => {
    const { clock, runner, starts } = setup(1000, 30_000);
    runner.start();
    runner.request();
    await clock.advanceAsync(95_000);
    expect(starts).toEqual([0, 30_000, 60_000, 90_000]);
  });

  it('a request after a quiet period runs at once, not at the next periodic slot', async () => {
    const { clock, runner, starts } = setup(1000, 30_000);
    runner.start();
    runner.request();
    await clock.advanceAsync(10_000);
    runner.request();
    await clock.advanceAsync(0);
    expect(starts).toEqual([0, 10_000]);
  });

  it('retryAfter schedules a retry, not earlier than minInterval', async () => {
    const { clock, runner, starts } = setup(1000, 30_000);
    runner.start();
    runner.request();
    await clock.advanceAsync(0);
    runner.retryAfter(200);
    await clock.advanceAsync(2000);
    expect(starts).toEqual([0, 1000]);
    runner.retryAfter(5000);
    await clock.advanceAsync(10_000);
    expect(starts).toEqual([0, 1000, 7000]); // requested at 2000 + 5000
  });

  it('survives a throwing run and keeps its schedule', async () => {
    const { clock, starts, setFail } = setup(1000, 10_000);
    const errors: unknown[] = [];
    const runner = new SyncRunner({
      clock,
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      run: async () => {
        starts.push(clock.monotonic());
        throw new Error('boom');
      },
      onError: (e) => errors.push(e),
    });
    setFail(true);
    runner.start();
    runner.request();
    await clock.advanceAsync(25_000);
    expect(starts).toEqual([0, 10_000, 20_000]);
    expect(errors).toHaveLength(3);
  });

  it('stop() cancels future runs', async () => {
    const { clock, runner, starts } = setup();
    runner.start();
    runner.request();
    await clock.advanceAsync(0);
    await runner.stop();
    runner.request();
    await clock.advanceAsync(100_000);
    await flushMicrotasks();
    expect(starts).toEqual([0]);
  });
});
