import '@testing-library/svelte/vitest';
import { fireEvent, render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import Login from './Login.svelte';

describe('Login', () => {
  it('submits the typed token and shows why the server refused it', async () => {
    const tried: string[] = [];
    render(Login, { props: { error: 'the bearer token is not the dashboard token', onlogin: async (t: string) => (tried.push(t), false) } });
    expect(screen.getByRole('alert').textContent).toBe('the bearer token is not the dashboard token');
    const button = screen.getByRole('button', { name: 'Sign in' }) as HTMLButtonElement;
    expect(button.disabled).toBe(true);
    await fireEvent.input(screen.getByLabelText('Token'), { target: { value: 's3cret' } });
    await fireEvent.submit(screen.getByTestId('login'));
    expect(tried).toEqual(['s3cret']);
  });
});
