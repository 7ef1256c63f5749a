import '@testing-library/svelte/vitest';
import { render, screen } from '@testing-library/svelte';
import { describe, expect, it } from 'vitest';
import ConnectionIndicator from './ConnectionIndicator.svelte';

describe('ConnectionIndicator', () => {
  it.each([
    ['live', 'Live'],
    ['reconnecting', 'Reconnecting…'],
    ['connecting', 'Connecting…'],
    ['stale', 'Stale · last update 20 s ago'],
  ] as const)('shows %s as "%s"', (state, label) => {
    render(ConnectionIndicator, { props: { state, lastMessageAt: 1_000, now: 21_000 } });
    const el = screen.getByTestId('connection');
    expect(el.textContent?.trim()).toBe(label);
    expect(el.className).toContain(state);
  });
});
