import '@testing-library/svelte/vitest';
import { fireEvent, render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import { overview } from '../testing/fixtures.ts';
import { ActionsState } from '../lib/actions.svelte.ts';
import { Api } from '../lib/api.ts';
import Actions from './Actions.svelte';

/** api answers each action with its result (200) or the error body the server sends (409, 429, 500). */
function api(
  calls: { path: string; contentType?: string | null; body: unknown }[],
  status = 200,
  error = { code: 'KPROXY_ERR_RATE_LIMITED', message: 'resync was asked less than 10 s after the previous one; try again in 8 s' },
) {
  return new Api(
    () => 'tok',
    async (url, init) => {
      calls.push({ path: url, contentType: new Headers(init?.headers).get('content-type'), body: init?.body ? JSON.parse(String(init.body)) : null });
      const action = url.split('/').pop();
      const body = status === 200 ? { action, ok: true, at: 0, user: 'token', message: `${action} done`, paused: false } : { error };
      return new Response(JSON.stringify(body), { status });
    },
  );
}

const viewer = { authMode: 'token' as const, user: 'token', canAct: true };

describe('Actions page', () => {
  it('resyncs and shows the result', async () => {
    const calls: { path: string; contentType?: string | null; body: unknown }[] = [];
    render(Actions, { props: { actions: new ActionsState(api(calls)), overview: overview(), viewer, lastAction: null, now: 0 } });
    await fireEvent.click(screen.getByTestId('resync'));
    await screen.findByText(/resync done/);
    // Every action carries a JSON body (the server takes no other: another site's page cannot send one unasked).
    expect(calls).toEqual([{ path: 'api/v1/actions/resync', contentType: 'application/json', body: {} }]);
  });

  it('asks to type the node name before a cleanup, and pauses syncs when asked to keep rules off', async () => {
    const calls: { path: string; contentType?: string | null; body: unknown }[] = [];
    render(Actions, { props: { actions: new ActionsState(api(calls)), overview: overview({ node: 'node-7' }), viewer, lastAction: null, now: 0 } });
    await fireEvent.click(screen.getByTestId('cleanup'));
    expect(screen.getByText('Remove every kproxy rule on node-7?')).toBeTruthy();
    const confirm = screen.getByRole('button', { name: 'Remove all rules', hidden: true }) as HTMLButtonElement;
    expect(confirm.disabled).toBe(true);
    await fireEvent.input(screen.getByLabelText('confirmation'), { target: { value: 'node-8' } });
    expect(confirm.disabled).toBe(true);
    await fireEvent.input(screen.getByLabelText('confirmation'), { target: { value: 'node-7' } });
    expect(confirm.disabled).toBe(false);
    await fireEvent.click(confirm);
    await screen.findByText(/cleanup done/);
    expect(calls).toEqual([{ path: 'api/v1/actions/cleanup', contentType: 'application/json', body: { pause: true } }]);
  });

  it('shows a refused action (rate limit) as refused', async () => {
    render(Actions, { props: { actions: new ActionsState(api([], 429)), overview: overview(), viewer, lastAction: null, now: 0 } });
    await fireEvent.click(screen.getByTestId('resync'));
    const result = await screen.findByTestId('action-result');
    expect(result.textContent).toMatch(/Refused · resync was asked less than 10 s after the previous one; try again in 8 s/);
    expect(screen.queryByRole('alert')).toBeNull();
  });

  it('shows a failed action as failed, with what the server said (its code; the details are in its log)', async () => {
    const message = 'kproxy could not answer this request (KPROXY_ERR_CLEANUP_FAILED); the kproxy log on this node has the details (request req-7)';
    const actions = new ActionsState(api([], 500, { code: 'KPROXY_ERR_CLEANUP_FAILED', message }));
    render(Actions, { props: { actions, overview: overview({ node: 'node-7' }), viewer, lastAction: null, now: 0 } });
    await fireEvent.click(screen.getByTestId('cleanup'));
    await fireEvent.input(screen.getByLabelText('confirmation'), { target: { value: 'node-7' } });
    await fireEvent.click(screen.getByRole('button', { name: 'Remove all rules', hidden: true }));
    const result = await screen.findByTestId('action-result');
    expect(result.textContent).toContain(`Failed · ${message}`);
    expect(actions.refused.cleanup).toEqual({ status: 500, code: 'KPROXY_ERR_CLEANUP_FAILED', message });
  });

  it('disables every action for a viewer who may not act, and says why', () => {
    render(Actions, { props: { actions: new ActionsState(api([])), overview: overview(), viewer: { authMode: 'delegated', user: 'alice', canAct: false }, lastAction: null, now: 0 } });
    for (const id of ['resync', 'pause', 'cleanup']) expect((screen.getByTestId(id) as HTMLButtonElement).disabled).toBe(true);
    expect(screen.getByRole('alert').textContent).toMatch(/user “alice” lacks update on nodes\/kproxy node-a/);
  });
});
