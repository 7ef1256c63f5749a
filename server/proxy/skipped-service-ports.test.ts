import { describe, expect, it } from 'vitest';
import { MemoryLog } from '../log.ts';
import type { Endpoint } from './endpoint.ts';
import type { ServicePort } from './service-port.ts';
import { SkippedServicePorts } from './skipped-service-ports.ts';

const sp = (id: string) => ({ id }) as ServicePort;
const eps: readonly Endpoint[] = [];

describe('SkippedServicePorts', () => {
  it('warns once per port and reason, reports a copy, and forgets a port once programmed or gone', () => {
    const log = new MemoryLog();
    const skipped = new SkippedServicePorts(log.logger);
    skipped.skip('ns/a:p80/TCP', 'bad comment', 'service port skipped: its rules cannot be written safely');
    skipped.skip('ns/a:p80/TCP', 'bad comment', 'service port skipped: its rules cannot be written safely');
    skipped.skip('ns/b:p80/TCP', 'set full', 'service port skipped: its ipset entries do not fit');
    expect(log.lines('warn')).toHaveLength(2);
    skipped.skip('ns/a:p80/TCP', 'bad address', 'service port skipped: its rules cannot be written safely');
    expect(log.lines('warn')).toHaveLength(3);
    expect(log.lines('warn')[2]).toMatch(/servicePort=ns\/a:p80\/TCP.*why="?bad address/);

    const snapshot = skipped.snapshot();
    expect(skipped.programmed('ns/a:p80/TCP')).toBe(true);
    expect(skipped.programmed('ns/a:p80/TCP')).toBe(false);
    expect([...snapshot.keys()]).toEqual(['ns/a:p80/TCP', 'ns/b:p80/TCP']);
    skipped.forgetGone(new Map());
    expect(skipped.snapshot().size).toBe(0);
  });

  it('holds a refusal while the Service and endpoints are the ones the kernel refused, and forgets it on a change or when the port is gone', () => {
    const skipped = new SkippedServicePorts(new MemoryLog().logger);
    const a = sp('ns/a:p80/TCP');
    skipped.refuse(a.id, a, eps, 'the kernel refused its objects');
    expect(skipped.refusal(a.id, a, eps)).toBe('the kernel refused its objects');
    const changed = sp('ns/a:p80/TCP');
    expect(skipped.refusal(a.id, changed, eps)).toBeUndefined();
    expect(skipped.refusal(a.id, a, eps)).toBeUndefined();
    skipped.refuse(a.id, a, eps, 'refused again');
    skipped.forgetGone(new Map());
    expect(skipped.refusal(a.id, a, eps)).toBeUndefined();
  });
});
