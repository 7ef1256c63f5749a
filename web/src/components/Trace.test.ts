import '@testing-library/svelte/vitest';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../lib/api.ts';
import type { TraceResult, TraceStep } from '../lib/protocol.ts';
import type { Route } from '../lib/router.svelte.ts';
import Trace from './Trace.svelte';

const step = (over: Partial<TraceStep>): TraceStep => ({ table: 'nat', chain: 'KUBE-SERVICES', hook: 'prerouting', rule: '-j X', index: 0, packets: 3, bytes: 180, verdict: 'jump X', ...over });

const result: TraceResult = {
  query: { proto: 'tcp', src: '10.0.0.2', srcPort: null, dst: '10.96.10.30', dstPort: 443, from: 'external' },
  mode: 'iptables',
  family: 'IPv4',
  verdict: 'dnat',
  reason: 'shop/web:https: a new connection to cluster IP 10.96.10.30:443/tcp is DNATed to one of 2 endpoints (50% each)',
  service: 'shop/web:https',
  endpoints: [
    {
      address: '10.244.0.31:8443',
      probability: 0.5,
      masquerade: true,
      path: [step({ chain: 'KUBE-SEP-AAAA', rule: '-j DNAT --to-destination 10.244.0.31:8443', index: 1, verdict: 'DNAT to 10.244.0.31:8443' })],
    },
    { address: '10.244.1.32:8443', probability: 0.5, masquerade: true, path: [step({ chain: 'KUBE-SEP-BBBB', index: 1, verdict: 'DNAT to 10.244.1.32:8443' })] },
  ],
  masquerade: true,
  path: [
    step({ chain: 'PREROUTING', rule: '-j KUBE-SERVICES', verdict: 'jump KUBE-SERVICES' }),
    step({ chain: 'KUBE-SERVICES', rule: '-d 10.96.10.30/32 -j KUBE-SVC-WEB', index: 4, verdict: 'jump KUBE-SVC-WEB', drift: 'missing-rule' }),
  ],
  drift: [{ table: 'nat', chain: 'KUBE-SERVICES', kind: 'missing-rule', detail: '-d 10.96.10.31/32 …' }],
  notes: ['ClientIP affinity: …'],
  readAt: 1,
  simulated: false,
};

function fakeApi(answer: (path: string) => unknown) {
  const asked: string[] = [];
  return {
    asked,
    api: {
      get: async <T>(path: string): Promise<T> => {
        asked.push(path);
        const a = answer(path);
        if (a instanceof Error) throw a;
        return a as T;
      },
    },
  };
}

const route = (query: Partial<Extract<Route, { page: 'trace' }>['query']> = {}): Extract<Route, { page: 'trace' }> => ({
  page: 'trace',
  query: { proto: 'tcp', src: '', dst: '', from: '', ...query },
});

describe('Trace page', () => {
  it('traces the packet a link filled in and draws the path step by step, each step linking to its rule', async () => {
    const { api, asked } = fakeApi(() => result);
    render(Trace, { props: { api, route: route({ src: '10.0.0.2', dst: '10.96.10.30:443' }), go: () => {} } });
    await screen.findByTestId('trace-result');
    expect(asked).toEqual(['trace?proto=tcp&src=10.0.0.2&dst=10.96.10.30%3A443']);
    expect(screen.getByTestId('trace-verdict').textContent).toBe('DNAT');
    expect(screen.getByTestId('trace-reason').textContent).toBe(result.reason);
    const steps = within(screen.getByTestId('trace-path')).getAllByTestId('trace-step');
    expect(steps).toHaveLength(2);
    expect(steps[1].querySelector('a')!.getAttribute('href')).toBe('#/rules/nat/KUBE-SERVICES?rule=4');
    expect(steps[1].textContent).toContain('drift: missing rule');
    expect(within(screen.getByTestId('trace-path')).getByText('PREROUTING · arriving')).toBeTruthy();
    const eps = screen.getByTestId('trace-endpoints');
    expect(eps.textContent).toContain('10.244.0.31:8443');
    expect(eps.textContent).toContain('50%');
    expect(screen.getByTestId('trace-drift').textContent).toContain('-d 10.96.10.31/32');
    expect(screen.getByRole('link', { name: 'shop/web:https' }).getAttribute('href')).toBe('#/services/shop/web');
  });

  it('asks nothing until source and destination are given, and submits the form into the URL', async () => {
    const { api, asked } = fakeApi(() => result);
    const went: Route[] = [];
    render(Trace, { props: { api, route: route({ dst: '10.96.10.30:443' }), go: (r: Route) => went.push(r) } });
    expect(screen.getByText('Which packet?')).toBeTruthy();
    expect(asked).toEqual([]);
    await fireEvent.input(screen.getByLabelText('Source'), { target: { value: '10.0.0.2:40000' } });
    await fireEvent.submit(screen.getByTestId('trace-form'));
    expect(went).toEqual([{ page: 'trace', query: { proto: 'tcp', src: '10.0.0.2:40000', dst: '10.96.10.30:443', from: '' } }]);
  });

  it("shows the server's answer for a bad field", async () => {
    const { api } = fakeApi(() => new ApiError(400, 'KPROXY_ERR_TRACE_INPUT', 'dst: "10.96.10.30" has no port (write IP:PORT, [IPv6]:PORT)'));
    render(Trace, { props: { api, route: route({ src: '10.0.0.2', dst: '10.96.10.30' }), go: () => {} } });
    await waitFor(() => expect(screen.getByTestId('trace-error').textContent).toContain('dst: "10.96.10.30" has no port'));
    expect(screen.getByTestId('trace-error').textContent).toContain('KPROXY_ERR_TRACE_INPUT');
  });
});
