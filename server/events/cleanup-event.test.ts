import { describe, expect, it, vi } from 'vitest';
import { realClock } from '../clock.ts';
import { MemoryLog } from '../log.ts';
import { flushWithin, recordCleanup } from './cleanup-event.ts';
import { FakeEventSink } from './event-sink-fake.ts';
import { KubeEventRecorder } from './kube-event-recorder.ts';

describe('cleanup Event', () => {
  it('is written on the Node with the summary, Normal when the cleanup succeeded', async () => {
    const sink = new FakeEventSink();
    const rec = new KubeEventRecorder({ sink, reportingInstance: 'node-a', clock: realClock, logger: new MemoryLog().logger });
    recordCleanup(rec, 'node-a', 'removed filter 12, nat 140', true);
    expect(await flushWithin(rec, 5000)).toBe(true);
    rec.stop();
    const [event] = [...sink.events.values()];
    expect(event).toMatchObject({ type: 'Normal', reason: 'Cleanup', action: 'Cleanup', note: 'removed filter 12, nat 140', regarding: { kind: 'Node', name: 'node-a' } });
  });

  it('is a Warning when the cleanup failed', async () => {
    const sink = new FakeEventSink();
    const rec = new KubeEventRecorder({ sink, reportingInstance: 'node-a', clock: realClock, logger: new MemoryLog().logger });
    recordCleanup(rec, 'node-a', 'removed filter 0, nat 0; 1 error', false);
    await flushWithin(rec, 5000);
    rec.stop();
    expect([...sink.events.values()][0]).toMatchObject({ type: 'Warning', reason: 'CleanupFailed' });
  });

  it('does not wait longer than its timeout for an API server that never answers', async () => {
    vi.useFakeTimers();
    try {
      const never = { flush: () => new Promise<void>(() => {}) };
      const result = flushWithin(never, 5000);
      await vi.advanceTimersByTimeAsync(5000);
      expect(await result).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });
});
