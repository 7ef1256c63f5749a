import { text as streamText } from 'node:stream/consumers';
import { inflateSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { PackedText } from './packed-text.ts';

/** rules: restore input as kproxy writes it, n rules (text that deflates well, as the real one does). */
function rules(n: number): string {
  const lines = ['*nat'];
  for (let i = 0; i < n; i++)
    lines.push(`-A KUBE-SEP-${String(i).padStart(16, '0')} -m comment --comment "ns/svc-${i}:http" -p tcp -m tcp -j DNAT --to-destination 10.64.${(i >> 8) & 255}.${i & 255}:8080`);
  lines.push('COMMIT', '');
  return lines.join('\n');
}

describe('PackedText', () => {
  it('keeps a small text as it is', async () => {
    const p = new PackedText('*nat\nCOMMIT\n');
    await p.packed();
    expect(p.isPacked).toBe(false);
    expect(p.textSync()).toBe('*nat\nCOMMIT\n');
    expect(await p.text()).toBe('*nat\nCOMMIT\n');
  });

  it('holds a large text deflated once packed, and gives the same text back each time it is read', async () => {
    const text = rules(20_000);
    const p = new PackedText(text);
    expect(p.length).toBe(text.length);
    await p.packed();
    expect(p.isPacked).toBe(true);
    expect(p.heldBytes).toBeLessThan(text.length / 5);
    expect(await p.text()).toBe(text);
    expect(p.textSync()).toBe(text);
    expect(await p.text()).toBe(text);
  });

  it('keeps characters whole across the pieces it deflates', async () => {
    const piece = 'x'.repeat((1 << 20) - 1);
    const text = `${piece}😀${piece}é😀${rules(10)}`;
    const p = new PackedText(text);
    await p.packed();
    expect(p.isPacked).toBe(true);
    expect(await p.text()).toBe(text);
  });

  it('reads the text before it is packed too', async () => {
    const text = rules(20_000);
    const p = new PackedText(text);
    expect(await p.text()).toBe(text);
    await p.packed();
  });

  it('streams the text it holds, packed or not, whole characters and all', async () => {
    const piece = 'x'.repeat((1 << 20) - 1);
    for (const text of [rules(30_000), `${piece}😀${piece}é😀${rules(10)}`, '*nat\nCOMMIT\n']) {
      const p = new PackedText(text);
      expect(await streamText(p.stream())).toBe(text);
      await p.packed();
      expect(await streamText(p.stream())).toBe(text);
    }
  });

  it('hands out its deflated bytes as HTTP deflate carries them, and none for a text it keeps as text', async () => {
    const text = rules(20_000);
    const p = new PackedText(text);
    const deflated = await p.deflated();
    expect(deflated).not.toBeNull();
    expect(inflateSync(deflated!).toString('utf8')).toBe(text);
    expect(await new PackedText('*nat\nCOMMIT\n').deflated()).toBeNull();
  });

  it('packs a text given in pieces without joining them, the same text read back', async () => {
    const pieces = ['*filter\n', rules(20_000), '😀', 'COMMIT\n'];
    const p = await PackedText.fromPieces(pieces);
    expect(p.isPacked).toBe(true);
    expect(p.length).toBe(pieces.join('').length);
    expect(await p.text()).toBe(pieces.join(''));
    expect(await streamText(p.stream())).toBe(pieces.join(''));
  });
});
