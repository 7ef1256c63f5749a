import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../server/clock-fake.ts';
import { recordStarting, teeRecorder } from '../../server/events/event-recorder.ts';
import { ApiEventSink } from '../../server/events/event-sink.ts';
import { KubeEventRecorder } from '../../server/events/kube-event-recorder.ts';
import { MemoryEventRecorder } from '../../server/events/memory-event-recorder.ts';
import { MemoryLog } from '../../server/log.ts';
import { loadKubeConfig } from '../../server/sources/k8s/kubeconfig.ts';
import { waitFor } from '../wait.ts';
import { FakeApiServer } from './fake-apiserver.ts';
import { writeKubeconfig, type KubeconfigFile } from './kubeconfig-file.ts';

let server: FakeApiServer;
let kubeconfig: KubeconfigFile;
let clock: FakeClock;
let log: MemoryLog;
let recorder: KubeEventRecorder;

beforeEach(async () => {
  server = await new FakeApiServer().start();
  kubeconfig = await writeKubeconfig(server.url);
  clock = new FakeClock();
  log = new MemoryLog();
  const { api } = await loadKubeConfig({ kubeconfig: kubeconfig.path });
  recorder = new KubeEventRecorder({ sink: new ApiEventSink(api), reportingInstance: 'node-a', clock, logger: log.logger, random: () => 0.5 });
});
afterEach(async () => {
  recorder.stop();
  await server.stop();
  await kubeconfig.remove();
});

const eventWrites = () => server.requests.filter((r) => r.path.includes('/events'));

describe('Kubernetes Events through the Kubernetes client against the fake API server', () => {
  it('posts the Starting event on the Node the way kube-proxy does', async () => {
    recordStarting(recorder, 'node-a');
    await recorder.flush();

    expect(eventWrites().map((r) => `${r.method} ${r.path}`)).toEqual(['POST /apis/events.k8s.io/v1/namespaces/default/events']);
    expect(server.events).toHaveLength(1);
    const e = server.events[0].object;
    expect(e).toMatchObject({
      metadata: { namespace: 'default', name: expect.stringMatching(/^node-a\.[0-9a-f]+$/) },
      type: 'Normal',
      reason: 'Starting',
      action: 'StartKubeProxy',
      note: '',
      reportingController: 'kproxy',
      reportingInstance: 'node-a',
      regarding: { kind: 'Node', name: 'node-a', uid: 'node-a', namespace: '' },
      eventTime: '2026-01-01T00:00:00.000000Z', // MicroTime: the fake server rejects anything else, as the API server does
    });
    expect(recorder.counters).toMatchObject({ recorded: 1, created: 1, failed: 0 });
  });

  it('turns repeats into a series: one create, one patch with count 2, later counts on refresh', async () => {
    const ref = { kind: 'Service', name: 'web', namespace: 'shop', uid: 'u-1' };
    recorder.record(ref, 'Warning', 'SyncFailed', 'Sync', 'iptables-restore failed');
    await recorder.flush();
    clock.advance(1_000);
    recorder.record(ref, 'Warning', 'SyncFailed', 'Sync', 'iptables-restore failed again');
    await recorder.flush();
    for (let i = 0; i < 5; i++) recorder.record(ref, 'Warning', 'SyncFailed', 'Sync', 'still failing');
    await recorder.flush();

    expect(eventWrites().map((r) => r.method)).toEqual(['POST', 'PATCH']);
    expect(server.events).toHaveLength(1);
    expect(server.events[0]).toMatchObject({ namespace: 'shop', patches: 1, object: { series: { count: 2, lastObservedTime: '2026-01-01T00:00:01.000000Z' }, note: 'iptables-restore failed' } });

    await clock.advanceAsync(30 * 60_000); // the series refresh writes the count the cache kept
    await recorder.flush();
    expect(eventWrites().map((r) => r.method)).toEqual(['POST', 'PATCH', 'PATCH']);
    expect(server.events[0].object).toMatchObject({ series: { count: 7 } });
    expect(recorder.counters).toMatchObject({ recorded: 7, aggregated: 6, created: 1, patched: 2 });
  });

  it('keeps the event while the API server is down and writes it once it is back, never blocking the caller', async () => {
    await server.goDown();
    const started = Date.now();
    recordStarting(recorder, 'node-a');
    expect(Date.now() - started).toBeLessThan(50); // record() only queues
    await waitFor(() => recorder.counters.retries === 1, { what: 'the first failed write' });

    await server.comeBack();
    await clock.advanceAsync(15_000); // the jittered retry pause (10 s)
    await waitFor(() => recorder.counters.created === 1, { what: 'the write after recovery' });
    expect(server.events.map((e) => e.object.reason)).toEqual(['Starting']);
    expect(recorder.counters.failed).toBe(0);
  });

  it('drops an event the server refuses, counting and logging it without retrying', async () => {
    server.failNext({ method: 'POST', pathPrefix: '/apis/events.k8s.io', status: 422 });
    recorder.record({ kind: 'Node', name: 'node-a', namespace: '' }, 'Warning', 'Bad', 'Test', 'refused');
    await recorder.flush();
    expect(recorder.counters).toMatchObject({ failed: 1, retries: 0, created: 0 });
    expect(log.lines('warn').join('\n')).toMatch(/Event Bad on Node node-a refused by the API server \(HTTP 422\).*KPROXY_ERR_EVENT_RECORD/);
  });

  it('feeds the dashboard recorder and the API from one record() call', async () => {
    const memory = new MemoryEventRecorder({ clock, logger: log.logger });
    const seen: string[] = [];
    memory.onEvent((e) => seen.push(`${e.type} ${e.reason} ${e.regarding.kind}/${e.regarding.name}`));
    recordStarting(teeRecorder(memory, recorder), 'node-a');
    await recorder.flush();
    expect(seen).toEqual(['Normal Starting Node/node-a']);
    expect(server.events).toHaveLength(1);
    expect(log.lines('info').some((l) => /event object="Node node-a" reason=Starting action=StartKubeProxy/.test(l))).toBe(true);
  });
});
