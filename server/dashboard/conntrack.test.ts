import { describe, expect, it } from 'vitest';
import { FakeClock } from '../clock-fake.ts';
import { FakeSysctl } from '../kernel/sysctl-fake.ts';
import { ConntrackCounter, SYSCTL_CONNTRACK_COUNT, SYSCTL_CONNTRACK_MAX } from './conntrack.ts';

describe('ConntrackCounter', () => {
  it('reads the count and the max, at most once per interval', async () => {
    const clock = new FakeClock();
    const sysctl = new FakeSysctl({ [SYSCTL_CONNTRACK_COUNT]: '812', [SYSCTL_CONNTRACK_MAX]: '262144' });
    const c = new ConntrackCounter({ sysctl, clock });
    expect(await c.read()).toEqual({ count: 812, max: 262144, readAt: clock.now() });
    sysctl.values.set(SYSCTL_CONNTRACK_COUNT, '900');
    expect((await c.read()).count).toBe(812);
    clock.advance(1000);
    expect((await c.read()).count).toBe(900);
  });

  it('says why when the conntrack module is not loaded', async () => {
    const c = new ConntrackCounter({ sysctl: new FakeSysctl({}), clock: new FakeClock() });
    const info = await c.read();
    expect(info).toMatchObject({ count: null, max: null });
    expect(info.error).toMatch(/nf_conntrack_count/);
  });
});
