import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../clock-fake.ts';
import { RoundRobin } from './balancer.ts';

function rr(random = () => 0) {
  const clock = new FakeClock();
  return { clock, lb: new RoundRobin({ clock, random }) };
}

describe('RoundRobin (kube-proxy userspace LoadBalancerRR)', () => {
  it('gives each endpoint exactly one connection in turn, whoever asks', () => {
    const { lb } = rr();
    lb.setEndpoints(['10.0.0.3:80', '10.0.0.1:80', '10.0.0.2:80']);
    const got = Array.from({ length: 9 }, () => lb.next('192.0.2.1'));
    const counts = new Map<string, number>();
    for (const k of got) counts.set(k!, (counts.get(k!) ?? 0) + 1);
    expect([...counts.values()]).toEqual([3, 3, 3]);
    // The same order every round.
    expect(got.slice(0, 3)).toEqual(got.slice(3, 6));
  });

  it('shuffles a new endpoint list with the injected random source', () => {
    const { lb } = rr(() => 0.99);
    lb.setEndpoints(['a:1', 'b:1', 'c:1']);
    expect(lb.endpoints).toEqual(['a:1', 'b:1', 'c:1']);
    const zero = rr(() => 0).lb;
    zero.setEndpoints(['a:1', 'b:1', 'c:1']);
    expect(zero.endpoints).toEqual(['b:1', 'c:1', 'a:1']);
  });

  it('keeps the rotation going when the same endpoints come in another order, restarts it for a new set', () => {
    const { lb } = rr();
    lb.setEndpoints(['a:1', 'b:1', 'c:1']);
    const first = lb.next('x');
    lb.setEndpoints(['c:1', 'a:1', 'b:1']);
    expect(lb.next('x')).not.toBe(first);
    lb.setEndpoints(['a:1', 'b:1']);
    expect(lb.next('x')).toBe(lb.endpoints[0]);
  });

  it('returns null without endpoints', () => {
    const { lb } = rr();
    expect(lb.next('x')).toBeNull();
    lb.setEndpoints([]);
    expect(lb.next('x')).toBeNull();
  });

  it('pins a client with ClientIP affinity until it stays away for the timeout (whole seconds, as upstream)', () => {
    const { lb, clock } = rr();
    lb.setEndpoints(['a:1', 'b:1', 'c:1']);
    lb.setAffinity(10);
    const pinned = lb.next('192.0.2.1');
    for (let i = 0; i < 5; i++) {
      clock.advance(9_000);
      expect(lb.next('192.0.2.1')).toBe(pinned);
    }
    // Another client goes on with the rotation.
    expect(lb.next('192.0.2.2')).not.toBe(pinned);
    expect(lb.affinityClients).toBe(2);
    clock.advance(10_000);
    lb.sweep();
    expect(lb.affinityClients).toBe(0);
    expect(lb.next('192.0.2.1')).not.toBe(pinned);
  });

  it('moves a pinned client to the next endpoint when its connect failed (affinity reset)', () => {
    const { lb } = rr();
    lb.setEndpoints(['a:1', 'b:1', 'c:1']);
    lb.setAffinity(60);
    const first = lb.next('c1');
    const retry = lb.next('c1', true);
    expect(retry).not.toBe(first);
    expect(lb.next('c1')).toBe(retry);
  });

  it('forgets clients pinned to an endpoint that left, and all of them when affinity changes', () => {
    const { lb } = rr();
    lb.setEndpoints(['a:1', 'b:1']);
    lb.setAffinity(60);
    const pinned = lb.next('c1')!;
    lb.next('c2');
    lb.setEndpoints([pinned === 'a:1' ? 'b:1' : 'a:1', 'z:1']);
    expect(lb.affinityClients).toBe(1);
    lb.setAffinity(30);
    expect(lb.affinityClients).toBe(0);
  });
});
