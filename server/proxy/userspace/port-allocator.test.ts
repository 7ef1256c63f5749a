import { describe, expect, it } from 'vitest';
import { PortAllocator } from './port-allocator.ts';

describe('PortAllocator (kube-proxy userspace port_allocator)', () => {
  it('lets the kernel choose without a range', () => {
    const a = new PortAllocator(null);
    expect([a.allocate(), a.allocate()]).toEqual([0, 0]);
  });

  it('takes a random free port of the range, then the next free ones, until it is exhausted', () => {
    const a = new PortAllocator({ base: 40000, size: 3 }, () => 0.5);
    expect(a.allocate()).toBe(40001);
    expect(a.allocate()).toBe(40002);
    expect(a.allocate()).toBe(40000);
    expect(a.allocate()).toBeNull();
    a.release(40002);
    expect(a.inUse).toBe(2);
    expect(a.allocate()).toBe(40002);
  });

  it('ignores releasing a port it never gave out', () => {
    const a = new PortAllocator({ base: 40000, size: 2 }, () => 0);
    a.release(12345);
    expect(a.allocate()).toBe(40000);
  });
});
