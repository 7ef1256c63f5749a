import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { MemoryLog } from '../log.ts';
import { nodeReference, recordStarting } from './event-recorder.ts';
import { MemoryEventRecorder } from './memory-event-recorder.ts';

function setup(capacity?: number) {
  const clock = new FakeClock();
  const log = new MemoryLog();
  return { clock, log, rec: new MemoryEventRecorder({ clock, logger: log.logger, capacity }) };
}

describe('MemoryEventRecorder', () => {
  it('keeps the most recent events, oldest first, within its capacity', () => {
    const { rec, clock } = setup(3);
    for (let i = 1; i <= 5; i++) {
      clock.advance(1000);
      rec.record({ kind: 'Service', name: `s${i}`, namespace: 'ns' }, 'Normal', 'Synced', 'Sync', `n${i}`);
    }
    expect(rec.recent().map((e) => `${e.seq} ${e.regarding.name}`)).toEqual(['3 s3', '4 s4', '5 s5']);
    expect(rec.recent({ limit: 2 }).map((e) => e.seq)).toEqual([4, 5]);
    expect(rec.recent({ afterSeq: 4 }).map((e) => e.seq)).toEqual([5]);
    expect(rec.total).toBe(5);
    expect(rec.recent()[0].time).toBe(Date.UTC(2026, 0, 1) + 3000);
  });

  it('streams each event to listeners until they unsubscribe, and a failing listener harms no one', () => {
    const { rec, log } = setup();
    const seen: string[] = [];
    rec.onEvent(() => {
      throw new Error('socket closed');
    });
    const off = rec.onEvent((e) => seen.push(e.reason));
    recordStarting(rec, 'node-a');
    off();
    rec.record(nodeReference('node-a'), 'Warning', 'SyncFailed', 'Sync', 'x');
    expect(seen).toEqual(['Starting']);
    expect(rec.listenerErrors).toBe(2);
    expect(log.lines('error')).toHaveLength(2);
  });

  it('logs Normal events at info and Warnings at warn, naming the object', () => {
    const { rec, log } = setup();
    recordStarting(rec, 'node-a');
    rec.record({ kind: 'Service', name: 'web', namespace: 'shop' }, 'Warning', 'ServiceInvalid', 'Sync', 'port 0 is out of range');
    expect(log.lines('info').join('\n')).toMatch(/event object="Node node-a" reason=Starting action=StartKubeProxy$/m);
    expect(log.lines('warn').join('\n')).toMatch(/event object="Service shop\/web" reason=ServiceInvalid action=Sync note="port 0 is out of range"/);
  });
});
