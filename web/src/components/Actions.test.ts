import '@testing-library/svelte/vitest';
import { fireEvent, render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import { overview } from '../testing/fixtures.ts';
import { ActionsState } from '../lib/actions.svelte.ts';
import { Api } from '../lib/api.ts';
import Actions from './Actions.svelte';

function api(calls: { path: string; contentType?: string | null; body: unknown }[], status = 200) {
  return new Api(
    () => 'tok',
    async (url, init) => {
      calls.push({ path: url, contentType: new Headers(init?.headers).get('content-type'), body: init?.body ? JSON.parse(String(init.body)) : null });
      const action = url.split('/').pop();
      return new Response(JSON.stringify({ action, ok: status === 200, at: 0, user: 'token', message: status === 200 ? `${action} done` : 'try again in 8 s', paused: false }), { status });
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
    expect(result.textContent).toMatch(/Refused · try again in 8 s/);
  });

  it('disables every action for a viewer who may not act, and says why', () => {
    render(Actions, { props: { actions: new ActionsState(api([])), overview: overview(), viewer: { authMode: 'delegated', user: 'alice', canAct: false }, lastAction: null, now: 0 } });
    for (const id of ['resync', 'pause', 'cleanup']) expect((screen.getByTestId(id) as HTMLButtonElement).disabled).toBe(true);
    expect(screen.getByRole('alert').textContent).toMatch(/user “alice” lacks update on nodes\/kproxy node-a/);
  });
});
